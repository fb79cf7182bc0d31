"""The channel from the job to the monitor: an append-only file of JSON lines.

Standard library only: this module runs inside the user's job. Each event is
one ``os.write`` of one line to a file opened with ``O_APPEND``, so lines from
several processes (the job's Python subprocesses) never interleave, a write
never blocks on the monitor, and a dead monitor cannot stop or crash the job.
Every event carries the writer's pid, ``time.monotonic()`` (system-wide on
Linux, so comparable with the monitor's clock), and the writer's own CPU
seconds and RSS at that instant, which make phase boundaries exact.
"""

from __future__ import annotations

import errno
import json
import os
import time

from tensorgauge.hook.protocol import EVENTS_ENV

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


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


class Channel:
    """Writes events; silently does nothing when there is no monitor."""

    def __init__(self, path: str | None):
        self.path = path
        self._fd: int | None = None
        self._pid = os.getpid()
        self.broken = False
        self.lost = 0  # events that could not be written since the last one that was

    @property
    def active(self) -> bool:
        return bool(self.path) and not self.broken

    def _open(self) -> int | None:
        if self.path is None:
            return None
        if self._fd is None or self._pid != os.getpid():  # reopen after fork
            self._pid = os.getpid()
            try:
                # Never O_CREAT: the monitor made the file in its private directory; once the run
                # is over and the directory gone, a process that outlived it writes nowhere.
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                self.broken = True
                return None
        return self._fd

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
                os.write(fd, line)
                self.lost = 0
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EAGAIN, errno.EINTR):
                self.lost += 1  # a full /dev/shm: counted, and tried again with the next event
            else:  # a closed descriptor, the run's folder gone: nothing more can get through
                self.broken = True
        except Exception:  # an event that cannot be written must not reach the job
            self.lost += 1


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


class EventReader:
    """Reads the events written so far, complete lines only (monitor side). At most
    ``max_bytes`` a call: a burst of events from the job is read over several ticks
    instead of stalling one; ``at_end`` says whether the last call read all that was
    written. A file the job truncated is read again from its start."""

    def __init__(self, path: str, max_bytes: int = 64 << 10):
        self.path = path
        self.max_bytes = max_bytes
        self._offset = 0
        self._partial = b""
        self.at_end = True
        self._last = b""  # the bytes just before the offset: if they change, the file was rewritten

    def _rewritten(self, f) -> bool:
        f.seek(self._offset - len(self._last))
        return f.read(len(self._last)) != self._last

    def read_new(self, everything: bool = False) -> list[dict]:
        """The complete lines written since the last call (``everything``: to the end, however much)."""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if self._offset and (size < self._offset or self._rewritten(f)):
                    # truncated (and maybe written again past where we were): read it from its start
                    self._offset, self._partial = 0, b""
                f.seek(self._offset)
                chunk = f.read(-1 if everything else self.max_bytes)
        except OSError:
            return []
        self._offset += len(chunk)
        if chunk:
            self._last = (self._partial + chunk)[-_MARK_BYTES:]
        self.at_end = self._offset >= size
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        out = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn line from a process killed mid-write
            if isinstance(event, dict) and "t" in event and "kind" in event:
                out.append(event)
        return out

    def skip_rest(self) -> int:
        """Pass over whatever is still unread: the number of lines passed over (counted a MiB at a
        time, never parsed)."""
        lines = 0
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                while chunk := f.read(1 << 20):
                    self._offset += len(chunk)
                    lines += chunk.count(b"\n")
                    self._last = (self._last + chunk)[-_MARK_BYTES:]
        except OSError:
            pass
        self._partial, self.at_end = b"", True
        return lines
