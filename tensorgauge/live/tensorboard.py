"""``tensorgauge run --tensorboard LOGDIR``: system metrics as TensorBoard scalars, written
live into ``LOGDIR/tensorgauge`` with TensorBoard's own event writer (the
``[tensorboard]`` extra; TensorFlow is not needed in the monitor).

Two step axes, matching what Keras' TensorBoard callback writes:
- ``tensorgauge/step/*`` once a second, at the global training step (all fit
  steps so far), like Keras' per-batch logs;
- ``tensorgauge/epoch/*`` at each epoch's end, at the epoch index, like
  ``epoch_loss``: the mean over the epoch.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tensorgauge.errors import TensorgaugeError
from tensorgauge.hook.protocol import PhaseBegin
from tensorgauge.live.state import LiveState
from tensorgauge.model import Event, RunRecord, Sample, payloads, shown_metrics
from tensorgauge.store.private import check_own

SUBDIR = "tensorgauge"
WRITE_SECONDS = 1.0


class TensorBoardWriter:
    """An :class:`~tensorgauge.monitoring.monitor.Exporter`: every shown sampled metric as a scalar."""

    def __init__(self, logdir: str, wall_t0: float | None = None):
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            raise TensorgaugeError("--tensorboard needs the [tensorboard] extra: "
                                   "pip install 'tensorgauge[tensorboard]'") from None
        self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
        path = os.path.join(logdir, SUBDIR)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise TensorgaugeError(f"cannot create {path}: {exc.strerror}") from None
        check_own(Path(path), "--tensorboard:", "the run's event files would be theirs to read or replace; give a "
                  "log folder of your own")
        self.writer = EventFileWriter(path, flush_secs=5)
        self.state = LiveState()
        self.wall_t0 = time.time() if wall_t0 is None else wall_t0  # wall clock at the run's t = 0
        self._next = 0.0
        self._epoch_sums: dict[str, float] = {}
        self._epoch_count = 0
        self._written_step: int | None = None

    def start(self, record: RunRecord) -> None:
        """Nothing to set up: the event file is open from the start."""

    def _write(self, tag_values: dict[str, float], step: int, t: float) -> None:
        summary = self._summary_pb2.Summary(value=[self._summary_pb2.Summary.Value(tag=tag, simple_value=value)
                                                   for tag, value in tag_values.items()])
        self.writer.add_event(self._event_pb2.Event(wall_time=self.wall_t0 + t, step=step, summary=summary))

    def observe(self, sample: Sample | None, events: list[Event]) -> None:
        if any(begin.get("phase_kind") == "epoch" for begin in payloads(events, PhaseBegin)):
            self._epoch_sums, self._epoch_count = {}, 0  # an epoch's mean starts at its beginning
        self.state.update(sample, events)
        if sample is not None:
            values = metrics(sample)
            for tag, value in values.items():
                self._epoch_sums[tag] = self._epoch_sums.get(tag, 0.0) + value
            self._epoch_count += 1
            if sample.t >= self._next:
                self._next = sample.t + WRITE_SECONDS
                self._write_step(values)
        for epoch, t in self.state.epoch_ends:
            if self._epoch_count:
                self._write({f"{SUBDIR}/epoch/{k}": v / self._epoch_count for k, v in self._epoch_sums.items()},
                            epoch, t)
            self._epoch_sums, self._epoch_count = {}, 0
        self.state.epoch_ends.clear()

    def _write_step(self, values: dict[str, float]) -> None:
        if self.state.steps_total:
            values["steps_per_second"] = self.state.step_rate
        if self.state.last_step_seconds is not None:
            values["step_seconds"] = self.state.last_step_seconds
        self._written_step = self.state.steps_total
        self._write({f"{SUBDIR}/step/{k}": v for k, v in values.items()}, self.state.steps_total, self.state.now)

    def close(self, timeout: float | None = None) -> None:
        """The last sample at the final step count, so the step axis ends where training did."""
        if self.state.sample is not None and self._written_step != self.state.steps_total:
            self._write_step(metrics(self.state.sample))
        self.writer.close()


def metrics(sample) -> dict[str, float]:
    """The scalars of one sample: each shown metric read (bytes as GiB: ``rss_bytes`` -> ``rss_gib``), the GPUs."""
    values: dict[str, float] = {}
    for metric in shown_metrics():
        value = getattr(sample, metric.name)
        if value is None:
            continue
        if metric.unit == "bytes":
            values[metric.exported.removesuffix("_bytes") + "_gib"] = value / 2**30
        else:
            values[metric.exported] = float(value)
    for g in sample.gpus:
        if g.util_percent is not None:
            values[f"gpu{g.index}_util_percent"] = g.util_percent
        if g.memory_used_bytes is not None:
            values[f"gpu{g.index}_memory_gib"] = g.memory_used_bytes / 2**30
    return values
