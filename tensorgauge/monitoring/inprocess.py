"""``tensorgauge.monitor()``: record the current Python process without the CLI.

For notebooks and scripts that cannot be started under ``tensorgauge run``.
A daemon thread runs the :class:`~.monitor.Monitor` loop on this process
(here the monitor shares the job's process, unlike ``tensorgauge run``); Keras
and TensorFlow are patched for phases as under the CLI. The run is in the
store like any other: ``tensorgauge show last``. If recording fails (a full
disk), the job goes on, a warning says so, and the run is left incomplete.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Sequence

from tensorgauge.hook import install as install_hook
from tensorgauge.hook.channel import Channel, process_cpu_seconds, set_channel
from tensorgauge.hook.protocol import DIAGNOSE_ENV, diagnosis_mode
from tensorgauge.monitoring.limits import check_interval, check_run_name
from tensorgauge.monitoring.monitor import EXPORTER_CLOSE_SECONDS, Exporter, Sources
from tensorgauge.monitoring.recording import Recording, new_record, new_run_id
from tensorgauge.monitoring.run_files import RunFiles
from tensorgauge.monitoring.sampler import Sampler
from tensorgauge.store import Store


class monitor:
    """``with tensorgauge.monitor(name="nb") as run: model.fit(...)``; then ``run.run_id``."""

    def __init__(self, name: str | None = None, store: str | None = None, interval_seconds: float = 0.1,
                 sources: Sources | None = None, parent_run_id: str | None = None,
                 exporters: Sequence[Exporter] = ()):
        """``exporters``: outputs of the live run (:class:`~.monitor.Exporter`; e.g.
        :class:`tensorgauge.testing.InMemoryExporter`), started with it and closed at its end."""
        self.name, self.store_path, self.parent_run_id = check_run_name(name, "name"), store, parent_run_id
        self.exporters = list(exporters)
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
        record = new_record(self.run_id, [sys.executable, *sys.argv], self._t0, name=self.name,
                            interval_seconds=self.interval_seconds, env={"host": self.sources.host()},
                            diagnosis=diagnosis_mode(os.environ.get(DIAGNOSE_ENV)) or "in-process", parent_run_id=self.parent_run_id)
        self._recording = Recording(self._store, record, clock)  # the job's thread never waits on the store
        for exporter in self.exporters:
            exporter.start(record)
        tree, _ = self.sources.watch_tree(os.getpid(), self.run_id, None)
        first = tree.read()
        self._gpus = self.sources.open_gpus()
        loop = self._recording.monitor(Sampler(tree, self.sources.system, self._gpus, clock, self._t0,
                                               cpu_baseline=first.cpu_seconds if first else 0.0),
                                       self._files.events, self.interval_seconds, report=self._warn,
                                       observers=self.exporters)
        install_hook()
        self._thread = threading.Thread(target=loop.run, args=(self._stop.wait,), name="tensorgauge-monitor",
                                        daemon=True)
        self._thread.start()
        return self

    def _warn(self, line: str) -> None:
        self.warning = self.warning or line
        warnings.warn(f"tensorgauge: {line}", RuntimeWarning, stacklevel=2)

    def __exit__(self, exc_type, exc, tb) -> None:
        window = sys.modules.get("tensorgauge.hook.input_window")  # loaded with Keras' features, if at all
        if window is not None:  # a short fit's A/B, held for a later fit's rounds: measured within the run
            window.flush_deferred()
        self._stop.set()
        self._thread.join()  # the loop ends with its last, forced tick
        recording = self._recording
        record = recording.record
        record.exit_code = 0 if exc_type is None else 1
        try:
            stored = recording.conclude(self.sources.clock.now() - self._t0, process_cpu_seconds() - self._cpu0)
            record.complete = recording.loop is None or recording.loop.warning is None  # else samples are missing
            problem = recording.close_out(stored)
            if problem:
                self._warn(problem)
        finally:
            for exporter in self.exporters:
                try:
                    exporter.close(EXPORTER_CLOSE_SECONDS)
                except Exception as error:  # an output's failure must not fail the job's code
                    self._warn(f"{type(exporter).__name__} failed to close: {type(error).__name__}: {error}")
            self._store.close()
            self._gpus.close()
            set_channel(self._old_channel)
            self._files.remove()
