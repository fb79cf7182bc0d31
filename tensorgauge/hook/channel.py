"""The channel from the job to the monitor: an append-only file of JSON lines.

Standard library only: this module runs inside the user's job. Each event is
one ``os.write`` of one line to a file opened with ``O_APPEND``, so lines from
several processes (the job's Python subprocesses) never interleave, a write
never blocks on the monitor, and a dead monitor cannot stop or crash the job.
Every event carries the writer's pid, ``time.monotonic()`` (system-wide on
Linux, so comparable with the monitor's clock), and the writer's own CPU
seconds and RSS at that instant, which make phase boundaries exact.

The job owns its descriptors and the folder's names: before each write the
channel checks (one ``fstat``) that its descriptor is still the events file it
opened, so a job that closed it and opened a file of its own under the same
number never receives events; it opens only regular files, never blocking
(a FIFO put in the file's place is refused); and a line is written whole or
not at all (a full filesystem's short write is taken back), counted as lost.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time

from tensorgauge.hook.protocol import EVENTS_ENV

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# Never O_CREAT: the monitor made the file in its private directory; once the run is over and the
# directory gone, a process that outlived it writes nowhere. O_NONBLOCK: a FIFO in its place cannot block.
_WRITE_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
# A full filesystem (ENOSPC, EDQUOT), a file-size limit (EFBIG): counted, and tried again with the next event.
_PASSING = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EAGAIN, errno.EINTR)


def process_cpu_seconds() -> float:
    """User+system seconds of this process and the children it has waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def process_rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def identity(st: os.stat_result) -> tuple[int, int]:
    """Which file a stat result is of: (device, inode)."""
    return st.st_dev, st.st_ino


class Channel:
    """Writes events; silently does nothing when there is no monitor."""

    def __init__(self, path: str | None):
        self.path = path
        self._fd: int | None = None
        self._file: tuple[int, int] | None = None  # identity() of the events file behind _fd
        self._pid = os.getpid()
        self.broken = False
        self.lost = 0  # events that could not be written since the last one that was

    @property
    def active(self) -> bool:
        return bool(self.path) and not self.broken

    def _open(self) -> int | None:
        """The events file's descriptor, checked to be the file this channel opened; opened again by its
        path after a fork, or when the job closed ours (its number may now be one of the job's files)."""
        if self.path is None:
            return None
        if self._fd is not None and self._pid == os.getpid() and self._still_ours(self._fd):
            return self._fd
        self._pid, self._fd = os.getpid(), None  # never closed: the number may be the job's now
        try:
            fd = os.open(self.path, _WRITE_FLAGS)
        except OSError:
            self.broken = True
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO with a reader, a device: not a channel
            os.close(fd)
            self.broken = True
            return None
        self._fd, self._file = fd, identity(st)
        return fd

    def _still_ours(self, fd: int) -> bool:
        try:
            return identity(os.fstat(fd)) == self._file
        except OSError:  # closed by the job
            return False

    def emit(self, kind: str, **data) -> None:
        """Send one event; never raises."""
        if not self.active:
            return
        event = {"t": time.monotonic(), "pid": os.getpid(), "kind": kind,
                 "cpu": process_cpu_seconds(), "rss": process_rss_bytes()}
        event.update(data)
        if self.lost:  # told with the next event that gets through
            event["lost_before"] = self.lost
        try:
            line = (json.dumps(event, default=str, separators=(",", ":")) + "\n").encode()
            fd = self._open()
            if fd is not None:
                if write_whole(fd, line):
                    self.lost = 0
                else:
                    self.lost += 1
        except OSError as exc:
            if exc.errno in _PASSING:
                self.lost += 1  # a full /dev/shm: counted, and tried again with the next event
            else:  # the run's folder gone: nothing more can get through
                self.broken = True
        except Exception:  # an event that cannot be written must not reach the job
            self.lost += 1


def write_whole(fd: int, line: bytes) -> bool:
    """Append ``line`` to ``fd`` (opened with ``O_APPEND``): True when all of it was written. A short write
    (the filesystem filled up inside the line) is taken back, so that no torn line stays in front of
    the next one; unless another process appended meanwhile (its line then follows the torn part)."""
    written = os.write(fd, line)
    if written == len(line):
        return True
    try:
        end = os.lseek(fd, 0, os.SEEK_CUR)  # after an O_APPEND write: the end of what it wrote
        if os.fstat(fd).st_size == end:
            os.ftruncate(fd, end - written)
    except OSError:
        pass
    return False


_channel: Channel | None = None


def channel() -> Channel:
    """The process's channel, opened from ``$TENSORGAUGE_EVENTS`` on first use."""
    global _channel
    if _channel is None:
        _channel = Channel(os.environ.get(EVENTS_ENV))
    return _channel


def set_channel(new: Channel | None) -> Channel | None:
    """Replace the process's channel (``tensorgauge.monitor`` and tests); returns the old one."""
    global _channel
    old, _channel = _channel, new
    return old


_MARK_BYTES = 32
MAX_LINE_BYTES = 4 << 20  # an event line longer than this is skipped (the hook's largest are a few KB)
MAX_DEPTH = 32  # ... and one nested deeper (the hook's go 5 deep): its reading, storing or showing would overflow the stack
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


class EventReader:
    """Reads the events written so far, complete lines only (monitor side). At most
    ``max_bytes`` a call: a burst of events from the job is read over several ticks
    instead of stalling one; ``at_end`` says whether the last call read all that was
    written. A file the job truncated is read again from its start.

    Nothing the job does to the file blocks or stops the reader: it opens the file once, without
    blocking, as soon as it exists (the monitor makes it before the job starts) and reads that
    file, a regular one, through its own descriptor from then on. A file in its place (a FIFO,
    another file, none) is ignored and said once in ``tampered``. A line that is not an event (torn,
    not JSON, too long, nested too deep) is skipped and counted in ``skipped``."""

    def __init__(self, path: str, max_bytes: int = 64 << 10):
        self.path = path
        self.max_bytes = max_bytes
        self._fd: int | None = None
        self._file: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""  # the bytes read after the last complete line
        self._overlong = False  # passing over the rest of a line longer than MAX_LINE_BYTES
        self._last = b""  # the bytes before the last complete line's end: if they change, the file was rewritten
        self.at_end = True
        self.skipped = 0
        self.tampered: str | None = None
        self._descriptor()

    def _descriptor(self) -> int | None:
        """Our descriptor of the events file (None until it exists, or when what is there is no events file)."""
        if self._fd is not None:
            if self.tampered is None:
                self._check_path()
            return self._fd
        if self.tampered is not None:
            return None
        try:
            fd = os.open(self.path, _READ_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a symlink (O_NOFOLLOW), a socket
            self._tamper(f"it cannot be opened: {exc.strerror}")
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            self._tamper("it is a FIFO, a folder or a device, not a regular file")
            return None
        self._fd, self._file = fd, identity(st)
        return fd

    def _check_path(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            self._tamper("it was removed")
            return
        except OSError:
            return
        if identity(st) != self._file:
            self._tamper(f"{'another file' if stat.S_ISREG(st.st_mode) else 'a FIFO, link or device'} was put in its place")

    def _tamper(self, what: str) -> None:
        self.tampered = (f"the job's events channel was tampered with ({self.path}: {what}); "
                         "events sent through what is there now are not recorded")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _resync(self, fd: int, size: int) -> None:
        """Read again what changed under us: the whole file if it was truncated or rewritten before the
        last complete line, the unfinished line if its torn end was taken back (a short write)."""
        done = self._offset - len(self._partial)
        if done and (size < done or os.pread(fd, len(self._last), done - len(self._last)) != self._last):
            self._offset, self._partial, self._last, self._overlong = 0, b"", b"", False
        elif self._partial and os.pread(fd, len(self._partial), done) != self._partial:
            self._offset, self._partial = done, b""

    def read_new(self, everything: bool = False) -> list[dict]:
        """The complete lines written since the last call (``everything``: to the end, however much)."""
        fd = self._descriptor()
        if fd is None:
            return []
        try:
            size = os.fstat(fd).st_size
            self._resync(fd, size)
            want = size - self._offset if everything else min(self.max_bytes, size - self._offset)
            chunk = os.pread(fd, want, self._offset) if want > 0 else b""
        except OSError:
            return []
        self._offset += len(chunk)
        self.at_end = self._offset >= size
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        ended = len(data) - len(self._partial)  # the end of the last complete line in data
        self._last = (self._last + data[max(0, ended - _MARK_BYTES):ended])[-_MARK_BYTES:]
        if lines and self._overlong:  # the end of an overlong line: counted when it was cut
            lines.pop(0)
            self._overlong = False
        if len(self._partial) > MAX_LINE_BYTES:  # a line too long to be an event: passed over to its end
            if not self._overlong:
                self.skipped += 1
            self._fold_partial()
            self._overlong = True
        out = []
        for line in lines:
            event = self._parse(line)
            if event is None:
                self.skipped += 1
                cut = line.rfind(b'{"t":', 1)  # a torn line, then a whole one (a process killed mid-write)
                event = self._parse(line[cut:]) if cut > 0 else None
            if event is not None:
                out.append(event)
        return out

    def _fold_partial(self) -> None:
        """Treat the unfinished line as read: nothing of it is kept."""
        self._last = (self._last + self._partial[-_MARK_BYTES:])[-_MARK_BYTES:]
        self._partial = b""

    @staticmethod
    def _parse(line: bytes) -> dict | None:
        """The event on ``line``, or None for a line that is not one."""
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if not isinstance(event, dict) or "t" not in event or "kind" not in event:
            return None
        return event if line.count(b"[") + line.count(b"{") <= MAX_DEPTH or depth(event) <= MAX_DEPTH else None

    def skip_rest(self) -> int:
        """Pass over whatever is still unread: the number of lines passed over (counted a MiB at a
        time, never parsed)."""
        lines = 0
        fd = self._descriptor()
        self._fold_partial()
        try:
            while fd is not None and (chunk := os.pread(fd, 1 << 20, self._offset)):
                self._offset += len(chunk)
                lines += chunk.count(b"\n")
                self._last = (self._last + chunk)[-_MARK_BYTES:]
        except OSError:
            pass
        self.at_end = True
        return lines


def depth(value: object, limit: int = MAX_DEPTH) -> int:
    """How deeply ``value`` nests lists and objects (a number or text: 0); past ``limit``, ``limit + 1``.
    Without recursion: a value nested a million deep is measured in as many steps as it has containers."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if level > limit:
            return limit + 1
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in children)
    return deepest
