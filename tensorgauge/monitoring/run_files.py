"""A run's private files: a directory only this user can enter (0700, made by the
monitor with ``mkdtemp``), holding the hook's events file and the stop request.

Nothing is opened by a name another user could have planted: the directory is
new and private, files are created with ``O_EXCL | O_NOFOLLOW``, and the job's
hook opens the events file without ``O_CREAT``, so a process that outlives the
run cannot bring it back once the directory is removed.
"""

from __future__ import annotations

import os
import shutil
import tempfile

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


class RunFiles:
    def __init__(self, run_id: str):
        self.directory = tempfile.mkdtemp(prefix=f"tensorgauge-{run_id}-")  # 0700, a name nobody could guess
        self.events_path = os.path.join(self.directory, "events.jsonl")
        self.stop_path = os.path.join(self.directory, "stop")
        if not create_private(self.events_path):
            raise OSError(f"cannot create {self.events_path}")

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
