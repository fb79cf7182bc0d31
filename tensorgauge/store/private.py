"""Paths the tool writes into that another user could have planted: in a shared folder, a store
file made in advance, or a checkpoint folder put where the tool will look for its own.

What the tool records into or keeps checkpoints in must be this user's (or root's), and no one
else may write to it: a folder writable by others is accepted only with the sticky bit (as
``/tmp``), where others cannot remove or rename what is in it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tensorgauge.errors import TensorgaugeError


class UntrustedPathError(TensorgaugeError):
    """A path the tool would write into that another user owns, can write, or could have linked."""


def _owner(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def others_control(info: os.stat_result) -> str | None:
    """Why another user controls what ``info`` describes (a file or folder), or None."""
    if info.st_uid not in (os.geteuid(), 0):
        return f"belongs to another user ({_owner(info.st_uid)})"
    mode = info.st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and not (stat.S_ISDIR(mode) and mode & stat.S_ISVTX):
        return f"can be written by other users (mode {stat.S_IMODE(mode):04o})"
    return None


def check_own(path: Path, what: str, advice: str) -> None:
    """Refuses ``path`` (followed where it is a link) when another user owns it or can write it."""
    try:
        reason = others_control(path.stat())
    except (FileNotFoundError, NotADirectoryError):  # nothing there yet: whoever makes it says why it cannot
        return
    except OSError as exc:
        raise UntrustedPathError(f"{what} {path}: {exc.strerror}") from None
    if reason:
        raise UntrustedPathError(f"{what} {path} {reason}: {advice}")


def private_folder(base: Path, names: tuple[str, ...], what: str, advice: str) -> Path:
    """``base/names[0]/names[1]/...``, each part made (mode 0700) where missing, and checked before the next
    is made in it, links not followed: refused when a part is a symbolic link, not a folder, another user's
    or writable by others."""
    path = base
    for name in names:
        path = path / name
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise UntrustedPathError(f"{what}: cannot make {path}: {exc.strerror}") from None
        info = path.lstat()
        reason = "is a symbolic link" if stat.S_ISLNK(info.st_mode) else \
            "is not a folder" if not stat.S_ISDIR(info.st_mode) else others_control(info)
        if reason:
            raise UntrustedPathError(f"{what} {path} {reason}: {advice}")
    return path
