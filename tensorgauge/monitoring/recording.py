"""One run being recorded, the same way under ``tensorgauge run`` and ``tensorgauge.monitor()``: its
record saved as it starts, the monitor loop feeding the store writer, and at its end the recording's
own figures (samples taken and lost, events skipped and dropped, what went wrong) put in the record
and the record saved, the store given a bounded wait to take it all.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
from collections.abc import Callable
from typing import Any

from tensorgauge.errors import TensorgaugeError
from tensorgauge.model import RunRecord
from tensorgauge.monitoring.monitor import EventSource, Monitor
from tensorgauge.monitoring.options import STORE_WAIT_SECONDS
from tensorgauge.monitoring.recorder import Recorder
from tensorgauge.monitoring.sampler import Sampler
from tensorgauge.monitoring.writer import StoreWriter
from tensorgauge.sources import Clock
from tensorgauge.store import Store


def new_run_id() -> str:
    return f"{dt.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def working_folder() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the working folder was deleted
        return None


def now_iso() -> str:
    """Local time now, with its offset, to the millisecond."""
    return dt.datetime.now().astimezone().isoformat(timespec="milliseconds")


def new_record(run_id: str, command: list[str], t0: float, started_at: str | None = None,
               cwd: str | None = None, **fields: Any) -> RunRecord:
    """The record of a run that started at ``t0`` on the monitor's clock (``started_at``: now) in ``cwd``
    (this working folder). Its samples' memory counts shared pages once (the process trees' readings)."""
    fields.setdefault("memory_measure", "rss_shared_once")
    return RunRecord(run_id=run_id, command=list(command), started_at=started_at or now_iso(),
                     cwd=cwd or working_folder(), t0_monotonic=t0, **fields)


class Recording:
    """A run from its record's first save to its last: :meth:`monitor` builds the loop, :meth:`settle`
    waits for the store and fills the recording's figures, :meth:`finish` saves the record and closes
    the writer. The store is written on a thread of its own (:class:`StoreWriter`): the job never waits
    on it."""

    def __init__(self, store: Store, record: RunRecord, clock: Clock):
        self.record = record
        self.writer = StoreWriter(store)
        self.writer.save_run(record)
        self.recorder = Recorder(self.writer, record, record.t0_monotonic or 0.0, clock)
        self.loop: Monitor | None = None

    def monitor(self, sampler: Sampler, events: EventSource, interval_seconds: float,
                report: Callable[[str], None] | None = None, **options: Any) -> Monitor:
        """The monitor loop of this run (its sampler, the job's events: a
        :class:`~tensorgauge.hook.channel.EventReader`), run by the caller."""
        self.loop = Monitor(sampler, self.recorder, events, interval_seconds=interval_seconds,
                            report=report, **options)
        return self.loop

    def settle(self, wait_seconds: float = STORE_WAIT_SECONDS) -> bool:
        """After the loop: the store given up to ``wait_seconds`` to take what was recorded (True if it did),
        and the recording's own figures in the record."""
        stored = self.writer.flush(wait_seconds)
        record, loop = self.record, self.loop
        record.samples_taken = loop.samples_taken if loop else 0
        record.samples_lost = self.writer.state.samples_lost or None
        events = loop.events if loop else None
        problems = [loop.warning if loop else None, self.writer.state.error, getattr(events, "tampered", None)]
        record.recording_error = "; ".join(p for p in problems if p) or None
        # lines that were no events (the reader's) and events that did not match the protocol (the recorder's)
        record.events_skipped = self.recorder.events_skipped + getattr(events, "skipped", 0) or None
        record.events_dropped = self.recorder.events_dropped or None
        return stored

    def conclude(self, wall_seconds: float, cpu_seconds: float, wait_seconds: float = STORE_WAIT_SECONDS) -> bool:
        """The end of the run filled in, the same for ``run`` and ``monitor()``: the store given up to
        ``wait_seconds`` (True if it took everything), the recording's figures, the run's wall and CPU time."""
        stored = self.settle(wait_seconds)
        self.record.wall_seconds = wall_seconds
        self.record.cpu_seconds_total = cpu_seconds
        return stored

    def close_out(self, stored: bool, wait_seconds: float = STORE_WAIT_SECONDS) -> str | None:
        """The record saved, the writer closed; what the user must hear about the recording, or None:
        the run was removed while it was recorded (what was written since is deleted), or the store
        did not take everything. ``stored``: what :meth:`conclude` returned."""
        writer = self.writer
        stored = self.finish(wait_seconds) and stored and not writer.state.samples_lost
        if writer.removed:
            try:  # what was written between the removal and the writer seeing it
                writer.store.delete_run(self.record.run_id)
            except TensorgaugeError:
                pass
            return "the run was removed (tensorgauge rm) while it was recorded: nothing more was stored"
        if not stored and (self.loop is None or self.loop.warning is None):
            taken = self.loop.samples_taken if self.loop else 0
            return (f"the store did not take everything ({writer.state.error}); "
                    f"{writer.state.samples_lost} of {taken} samples were lost")
        return None

    def finish(self, wait_seconds: float = STORE_WAIT_SECONDS) -> bool:
        """The record saved, the writer closed: True if the store took what was left within ``wait_seconds``.
        What a spooled store lost as it closed (held in memory, its server not answering) is then put in the
        record where the run waits: its spool, local, never waiting on the server."""
        self.writer.save_run(self.record)
        closed = self.writer.close(wait_seconds)
        lost, store = self.writer.state.samples_lost or None, self.writer.store
        if lost != self.record.samples_lost and hasattr(store, "held_in_memory"):
            self.record.samples_lost = lost
            self.record.recording_error = self.record.recording_error or self.writer.state.error
            try:
                store.save_run(self.record)
            except TensorgaugeError:
                pass
        return closed
