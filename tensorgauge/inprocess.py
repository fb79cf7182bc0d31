"""``tensorgauge.monitor()``: record the current Python process without the CLI.

For notebooks and scripts that cannot be started under ``tensorgauge run``.
A daemon thread samples this process every ``interval_seconds`` (here the
monitor shares the job's process, unlike ``tensorgauge run``); Keras and
TensorFlow are patched for phases as under the CLI. The run is in the store
like any other: ``tensorgauge show last``.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import threading

from tensorgauge.hook import install as install_hook
from tensorgauge.hook.channel import Channel, EventReader, process_cpu_seconds, set_channel
from tensorgauge.model import RunRecord
from tensorgauge.recorder import Recorder
from tensorgauge.runner import new_run_id
from tensorgauge.sampler import Sampler
from tensorgauge.sources.clock import MonotonicClock
from tensorgauge.sources.fingerprint import host_fingerprint
from tensorgauge.sources.nvml import open_gpus
from tensorgauge.sources.process_tree import ProcfsProcessTree
from tensorgauge.sources.system import PsutilSystem
from tensorgauge.store import Store


class monitor:
    """``with tensorgauge.monitor(name="nb") as run: model.fit(...)``; then ``run.run_id``."""

    def __init__(self, name: str | None = None, store: str | None = None, interval_seconds: float = 0.1):
        self.name, self.store_path, self.interval_seconds = name, store, interval_seconds
        self.run_id: str | None = None
        self._stop = threading.Event()

    def __enter__(self) -> monitor:
        self._store = Store.open(self.store_path, threads=True)
        fd, self._events_path = tempfile.mkstemp(prefix="tensorgauge-", suffix=".jsonl")
        os.close(fd)
        self._old_channel = set_channel(Channel(self._events_path))
        self._reader = EventReader(self._events_path)
        clock = MonotonicClock()
        self._t0 = clock.now()
        self._cpu0 = process_cpu_seconds()
        self.run_id = new_run_id()
        self._record = RunRecord(
            run_id=self.run_id, name=self.name, command=[sys.executable, *sys.argv],
            started_at=dt.datetime.now().astimezone().isoformat(timespec="milliseconds"),
            cwd=os.getcwd(), interval_seconds=self.interval_seconds, t0_monotonic=self._t0,
            env={"host": host_fingerprint()})
        self._store.save_run(self._record)
        self._recorder = Recorder(self._store, self._record, self._t0, clock)
        tree = ProcfsProcessTree(os.getpid())
        first = tree.read()
        self._sampler = Sampler(tree, PsutilSystem(), open_gpus(), clock, self._t0,
                                cpu_baseline=first.cpu_seconds if first else 0.0)
        self._lock = threading.Lock()
        install_hook()
        self._thread = threading.Thread(target=self._loop, name="tensorgauge-monitor", daemon=True)
        self._thread.start()
        return self

    def _tick(self, force: bool = False) -> None:
        with self._lock:
            sample = self._sampler.sample()
            self._recorder.add([sample] if sample else [], self._reader.read_new(), force=force)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_seconds):
            try:
                self._tick()
            except Exception:  # a full disk must not take the job down
                return

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._stop.set()
        self._thread.join()
        self._tick(force=True)
        record = self._record
        record.wall_seconds = self._sampler.clock.now() - self._t0
        record.cpu_seconds_total = process_cpu_seconds() - self._cpu0
        record.complete = True
        record.exit_code = 0 if exc_type is None else 1
        self._store.save_run(record)
        self._store.close()
        self._sampler.gpus.close()
        set_channel(self._old_channel)
        try:
            os.unlink(self._events_path)
        except OSError:
            pass
        return False
