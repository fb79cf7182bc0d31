"""A run's private files: a directory only this user can enter (0700, made by the
monitor with ``mkdtemp``), holding the hook's events file and the stop request.

Nothing is opened by a name another user could have planted: the directory is
new and private, files are created with ``O_EXCL | O_NOFOLLOW``, and the job's
hook opens the events file without ``O_CREAT``, so a process that outlives the
run cannot bring it back once the directory is removed. The monitor opens the
events file for reading as it makes it, before the job starts, and reads that
file only: what the job later puts in its place is not read (see
:class:`~tensorgauge.hook.channel.EventReader`).

The directory is in RAM (``/dev/shm``) when that is a writable tmpfs with
:data:`MIN_FREE_BYTES` free, else in the usual temporary directory: on a disk,
the hook's appends can block while the filesystem commits its journal (the
store's own syncs, a checkpoint the job just wrote), and each block pauses the
job. On keras-io's FordA example (an h5 checkpoint most epochs) that was six
0.6 s pauses, with no CPU used, at the start of the epochs after a save;
with the events in RAM, none.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from tensorgauge.hook.channel import EventReader
from tensorgauge.model import Event, Sample

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_private(path: str, text: str = "") -> bool:
    """Create ``path`` (0600) with ``text``; False if it exists or cannot be made."""
    try:
        fd = os.open(path, _CREATE, 0o600)
    except OSError:
        return False
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return True


RAM_DIRECTORY = "/dev/shm"
MIN_FREE_BYTES = 1 << 30  # a container's default /dev/shm (64 MiB) could fill on a long run: not used


def private_parent(ram: str = RAM_DIRECTORY, min_free: int = MIN_FREE_BYTES) -> str | None:
    """Where to make a run's directory: ``ram`` when usable, else None (the temporary directory)."""
    try:
        stats = os.statvfs(ram)
    except (OSError, AttributeError):
        return None
    if not os.access(ram, os.W_OK | os.X_OK) or stats.f_bavail * stats.f_frsize < min_free:
        return None
    return ram


class RunFiles:
    def __init__(self, run_id: str):
        # 0700, a name nobody could guess
        self.directory = tempfile.mkdtemp(prefix=f"tensorgauge-{run_id}-", dir=private_parent())
        self.events_path = os.path.join(self.directory, "events.jsonl")
        self.stop_path = os.path.join(self.directory, "stop")
        if not create_private(self.events_path):
            raise OSError(f"cannot create {self.events_path}")
        self.events = EventReader(self.events_path)  # opened now: the job has not started

    def remove(self) -> None:
        self.events.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class SpaceWatch:
    """An observer of the run (see :class:`~tensorgauge.monitoring.monitor.Observer`) that says, once,
    when the filesystem of the run's files is full: the job's events are lost until space is freed
    (the hook counts them and tells the count with its next event that gets through)."""

    def __init__(self, directory: str, report, clock=time.monotonic, every_seconds: float = 1.0,
                 min_free_bytes: int = 64 << 10):
        self.directory, self.report, self.clock = directory, report, clock
        self.every_seconds, self.min_free_bytes = every_seconds, min_free_bytes
        self._next = 0.0
        self.told = False

    def observe(self, sample: Sample | None, events: list[Event]) -> None:
        now = self.clock()
        if self.told or now < self._next:
            return
        self._next = now + self.every_seconds
        try:
            stats = os.statvfs(self.directory)
        except OSError:
            return
        if stats.f_bavail * stats.f_frsize < self.min_free_bytes:
            self.told = True
            self.report(f"the filesystem of the job's events ({os.path.dirname(self.directory)}) is full: "
                        "its phases and steps are lost until space is freed (counted in the run)")
