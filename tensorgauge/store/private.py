"""Paths the tool writes into that another user could have planted: in a shared folder, a store
file made in advance, or a checkpoint folder put where the tool will look for its own.

What the tool records into or keeps checkpoints in must be this user's (or root's), and no one
else may write to it: a folder writable by others is accepted only with the sticky bit (as
``/tmp``), where others cannot remove or rename what is in it.
"""

from __future__ import annotations

import errno
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
    """Refuses ``path`` (followed where it is a link) when another user owns it or can write it, or when it is
    a link to nothing: what was made there would be made where the link's owner chose."""
    try:
        reason = others_control(path.stat())
    except (FileNotFoundError, NotADirectoryError):  # nothing there yet: whoever makes it says why it cannot
        if os.path.islink(path):
            raise UntrustedPathError(f"{what} {path} is a link to nothing ({os.path.realpath(path)}), and nothing "
                                     f"is made through a link: {advice}") from None
        return
    except OSError as exc:
        raise UntrustedPathError(f"{what} {path}: {exc.strerror}") from None
    if reason:
        raise UntrustedPathError(f"{what} {path} {reason}: {advice}")


def private_folder(base: Path, names: tuple[str, ...], what: str, advice: str) -> Path:
    """``base/names[0]/names[1]/...``, each part made (mode 0700) where missing, and checked before the next
    is made in it, links not followed: refused when a part is a symbolic link, not a folder, another user's
    or writable by others; ``base`` itself (followed where it is a link) neither another user's nor writable
    by others, who could move or replace what is made in it."""
    check_own(base, what + ": the folder", advice)
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


def writable_target(path: Path, what: str) -> Path:
    """The path to open for writing ``path``: itself, or the file its link names. Refused: a link to nothing
    (nothing is made through a link), a file another user owns, anything but a file, a terminal, a pipe
    or ``/dev/null``."""
    try:
        info = path.lstat()
    except (FileNotFoundError, NotADirectoryError):  # made by the open, or its folder is missing
        return path
    except OSError as exc:
        raise UntrustedPathError(f"{what} {path}: {exc.strerror}") from None
    target = path
    if stat.S_ISLNK(info.st_mode):
        target = Path(os.path.realpath(path))
        try:
            info = target.stat()
        except OSError:
            raise UntrustedPathError(f"{what} {path}: it is a link to nothing ({target}), and nothing is made "
                                     "through a link; give the path itself") from None
    if stat.S_ISDIR(info.st_mode):
        raise UntrustedPathError(f"{what} {path}: it is a folder; give a file's path")
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
        raise UntrustedPathError(f"{what} {path}: it is not a file")
    if stat.S_ISREG(info.st_mode) and info.st_uid != os.geteuid():
        raise UntrustedPathError(f"{what} {path}: it belongs to another user ({_owner(info.st_uid)}), "
                                 "whose file is not replaced; write somewhere else")
    return target


def write_own_file(path: Path | str, data: bytes, what: str = "cannot write") -> None:
    """``data`` into ``path`` (made, mode 0666 less the umask, where missing), never through a link made in
    between, never over another user's file (see :func:`writable_target`)."""
    path = Path(path)
    target = writable_target(path, what)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        reason = "a link was put there" if exc.errno == errno.ELOOP else exc.strerror
        raise UntrustedPathError(f"{what} {path}: {reason}") from None
    with os.fdopen(fd, "wb") as out:
        out.write(data)
