"""``tensorgauge.monitor()``: record the current Python process without the CLI.

For notebooks and scripts that cannot be started under ``tensorgauge run``.
A daemon thread runs the :class:`~.monitor.Monitor` loop on this process
(here the monitor shares the job's process, unlike ``tensorgauge run``); Keras
and TensorFlow are patched for phases as under the CLI. The run is in the
store like any other: ``tensorgauge show last``. If recording fails (a full
disk), the job goes on, a warning says so, and the run is left incomplete.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import threading
import warnings

from tensorgauge.hook import install as install_hook
from tensorgauge.hook.channel import Channel, EventReader, process_cpu_seconds, set_channel
from tensorgauge.model import RunRecord
from tensorgauge.monitoring.limits import check_interval
from tensorgauge.monitoring.monitor import Monitor, Sources
from tensorgauge.monitoring.recorder import Recorder
from tensorgauge.monitoring.run_files import RunFiles
from tensorgauge.monitoring.runner import STORE_WAIT_SECONDS, _cwd, new_run_id
from tensorgauge.monitoring.sampler import Sampler
from tensorgauge.monitoring.writer import StoreWriter
from tensorgauge.store import Store


class monitor:
    """``with tensorgauge.monitor(name="nb") as run: model.fit(...)``; then ``run.run_id``."""

    def __init__(self, name: str | None = None, store: str | None = None, interval_seconds: float = 0.1,
                 sources: Sources | None = None):
        self.name, self.store_path = name, store
        self.interval_seconds = check_interval(interval_seconds, "interval_seconds")
        self.sources = sources or Sources()
        self.run_id: str | None = None
        self.warning: str | None = None
        self._stop = threading.Event()

    def __enter__(self) -> monitor:
        self._store = Store.open(self.store_path)
        self.run_id = new_run_id()
        self._files = RunFiles(self.run_id)
        self._old_channel = set_channel(Channel(self._files.events_path))
        clock = self.sources.clock
        self._t0 = clock.now()
        self._cpu0 = process_cpu_seconds()
        self._record = RunRecord(
            run_id=self.run_id, name=self.name, command=[sys.executable, *sys.argv],
            started_at=dt.datetime.now().astimezone().isoformat(timespec="milliseconds"),
            cwd=_cwd(), interval_seconds=self.interval_seconds, t0_monotonic=self._t0,
            env={"host": self.sources.host()})
        self._writer = StoreWriter(self._store)  # the job's thread never waits on the store
        self._writer.save_run(self._record)
        tree, _ = self.sources.watch_tree(os.getpid(), self.run_id, None)
        first = tree.read()
        self._gpus = self.sources.open_gpus()
        self._monitor = Monitor(
            Sampler(tree, self.sources.system, self._gpus, clock, self._t0,
                    cpu_baseline=first.cpu_seconds if first else 0.0),
            Recorder(self._writer, self._record, self._t0, clock), EventReader(self._files.events_path),
            interval_seconds=self.interval_seconds, report=self._warn)
        install_hook()
        self._thread = threading.Thread(target=self._monitor.run, args=(self._stop.wait,),
                                        name="tensorgauge-monitor", daemon=True)
        self._thread.start()
        return self

    def _warn(self, line: str) -> None:
        self.warning = self.warning or line
        warnings.warn(f"tensorgauge: {line}", RuntimeWarning, stacklevel=2)

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        self._thread.join()  # the loop ends with its last, forced tick
        record = self._record
        record.wall_seconds = self.sources.clock.now() - self._t0
        record.cpu_seconds_total = process_cpu_seconds() - self._cpu0
        record.exit_code = 0 if exc_type is None else 1
        try:
            self._writer.flush(STORE_WAIT_SECONDS)
            record.samples_taken = self._monitor.samples_taken
            record.samples_lost = self._writer.state.samples_lost or None
            record.recording_error = self._monitor.warning or self._writer.state.error
            record.complete = self._monitor.warning is None  # samples are missing after a failed tick
            self._writer.save_run(record)
            if not self._writer.close(STORE_WAIT_SECONDS):
                self._warn(f"the run's end was not stored ({self._writer.state.error})")
        finally:
            self._store.close()
            self._gpus.close()
            set_channel(self._old_channel)
            self._files.remove()
