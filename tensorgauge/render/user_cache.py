"""Files the tool caches for the user in ``$XDG_CACHE_HOME/tensorgauge`` (``~/.cache/tensorgauge``).

Whatever the umask: the folder is 0700 (folders made on the way too, as XDG asks), files are
0644 at most. Nothing is read back that another user could have written: the folder must be the
user's and writable by no one else, and a file a regular one, not a link, the user's and writable
by no one else. A folder of the user's that others may write (made under umask 000 by an earlier
version) is closed to them first; one owned by someone else is neither read nor written.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

FOLDER_MODE = 0o700
FILE_MODE = 0o644
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tensorgauge"


def read(name: str) -> str | None:
    """The cached ``name``, or None: missing, unreadable, or not to be trusted."""
    with _opened_folder(create=False) as fd:
        if fd is None:
            return None
        try:
            file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)  # a FIFO: no wait
        except OSError:
            return None
        with os.fdopen(file, encoding="utf-8") as f:
            info = os.fstat(file)
            if not stat.S_ISREG(info.st_mode) or not _only_mine(info) or info.st_nlink != 1:
                return None
            try:
                return f.read()
            except (OSError, UnicodeDecodeError):
                return None


def write(name: str, text: str) -> bool:
    """``text`` cached as ``name`` (atomically: a concurrent reader never sees half of it); False
    where there is no folder of the user's own to write it in."""
    with _opened_folder(create=True) as fd:
        if fd is None:
            return False
        partial = f"{name}.{os.getpid()}.tmp"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial, dir_fd=fd)  # left by a process of this pid that died
            file = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                           FILE_MODE, dir_fd=fd)
            with os.fdopen(file, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(partial, name, src_dir_fd=fd, dst_dir_fd=fd)
            return True
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(partial, dir_fd=fd)
            return False


def _only_mine(info: os.stat_result) -> bool:
    return info.st_uid == os.getuid() and not info.st_mode & _OTHERS_WRITE


@contextlib.contextmanager
def _opened_folder(create: bool):
    """The cache folder's descriptor (made if ``create``), or None where it is not the user's alone."""
    path = folder()
    if create:
        _make(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid():
            yield None
            return
        if info.st_mode & _OTHERS_WRITE:
            try:
                os.fchmod(fd, FOLDER_MODE)
            except OSError:
                yield None
                return
        yield fd
    finally:
        os.close(fd)


def _make(path: Path) -> None:
    """``path`` and the folders missing above it, each 0700 (the umask can only narrow it)."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for each in reversed(missing):
        try:
            os.mkdir(each, FOLDER_MODE)
        except FileExistsError:
            pass
        except OSError:
            return
