"""Writing to the store on a thread of its own, so that the sampling loop (and with
it the budget watchdog, signal forwarding and the job's end) never waits on storage.

Batches of samples and events go through a bounded queue; the run record is kept
as its latest version only. A store that is locked or busy (another writer, a
long import, a slow PostgreSQL link, a PostgreSQL server restarting: connected
again) is retried until it answers; a store that
fails otherwise (a full disk) loses those batches, and the writer counts what
was lost and says why, for the run's record.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

from tensorgauge.errors import StoreError, StoreUnreachable
from tensorgauge.model import Event, RunRecord, Sample

MAX_BATCHES = 2400  # 20 minutes of commits every 0.5 s held in memory while the store does not answer
RETRY_SECONDS = 0.2
RECONNECT_MAX_SECONDS = 2.0  # the longest wait between two attempts to reach a store's server again
_BUSY = ("locked", "busy")


@dataclass
class _Batch:
    run_id: str
    samples: list[Sample]
    events: list[Event]


@dataclass
class WriterState:
    """What the writer did: for the run's record and for ``show``."""

    samples_written: int = 0
    samples_lost: int = 0
    events_lost: int = 0
    error: str | None = None  # the first failure that lost data
    waited_seconds: float = 0.0  # time spent writing, waits for a locked or busy store included


class StoreWriter:
    """``add`` and ``save_run`` as on a :class:`~tensorgauge.store.Store`, without waiting for it."""

    def __init__(self, store, max_batches: int = MAX_BATCHES):
        self.store = store
        self.state = WriterState()
        self._queue: queue.Queue[_Batch | threading.Event | None] = queue.Queue(maxsize=max_batches)
        self._record: dict | None = None  # the latest run record not yet written
        self._created = False
        self.removed = False  # the run was removed (tensorgauge rm) while recorded: write no more of it
        self._record_lock = threading.Lock()
        self._deadline: float | None = None  # once set, a busy store is waited for until then only
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="tensorgauge-writer", daemon=True)
        self._thread.start()

    # -- the monitor's side: never blocks -------------------------------------------

    def add(self, run_id: str, samples: list[Sample], events: list[Event]) -> None:
        if not samples and not events:
            return
        try:
            self._queue.put_nowait(_Batch(run_id, list(samples), list(events)))
        except queue.Full:
            self._lose(len(samples), len(events), "the store did not answer for too long: the queue was full")

    def save_run(self, record: RunRecord) -> None:
        with self._record_lock:
            self._record = record.to_dict()  # a snapshot: the monitor goes on changing the record
        try:
            self._queue.put_nowait(None)  # a wake-up: the record is written before the next batch
        except queue.Full:
            pass

    def flush(self, timeout_seconds: float) -> bool:
        """Wait until everything queued so far is written (or lost); False after ``timeout_seconds``."""
        self._deadline = time.monotonic() + timeout_seconds
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout_seconds + 1.0)

    def close(self, timeout_seconds: float) -> bool:
        """Write what is queued and stop; True when all of it was written in ``timeout_seconds``. A spooled
        store ships its backlog in the time left, as long as its store takes a transaction every
        :data:`~tensorgauge.store.shipping.DRAIN_STALL_SECONDS`."""
        began = time.monotonic()
        flushed = self.flush(timeout_seconds)
        self._stop = True
        self._queue.put(None)
        self._thread.join(1.0)
        if not flushed:
            left = [b for b in list(self._queue.queue) if isinstance(b, _Batch)]
            self._lose(sum(len(b.samples) for b in left), sum(len(b.events) for b in left),
                       f"the store did not answer within {timeout_seconds:g} s of the job's end")
        drain = getattr(self.store, "drain", None)  # a spooled store: its data wait on this machine
        if drain is not None and not drain(max(0.0, began + timeout_seconds - time.monotonic())):
            self._lose_held()
            if self.state.error is None:
                self.state.error = (f"the store did not take the run in time ({self.store.ship_error or 'busy'}): "
                                    f"its data wait in {self.store.where}; the next 'tensorgauge run' into the "
                                    "store from this machine ships them as it ends, 'tensorgauge ship' does now")
            return False
        return flushed and self._record is None

    def _lose_held(self) -> None:
        """What a spooled store held in memory (its disk refused it) and its store did not take: lost with
        this process (the run's last record among it: the run will read as cut short)."""
        samples, events, record = self.store.held_in_memory()
        if samples or events or record:
            what = "samples" if not record else "the run's last record" + (" and samples" if samples or events else "")
            self._lose(samples, events, f"the store did not take the run in time ({self.store.ship_error or 'busy'}) "
                                        f"and what the disk under its spool refused ({what}), held in memory, "
                                        "is lost")

    # -- the writer's thread ----------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop:
            try:
                item = self._queue.get(timeout=0.5)
            except queue.Empty:
                item = None
            self._write_record()
            if isinstance(item, _Batch):
                self._write(item)
            elif isinstance(item, threading.Event):
                self._write_record()
                item.set()

    def _write_record(self) -> None:
        with self._record_lock:
            snapshot, self._record = self._record, None
        if snapshot is None or self.removed:
            return
        create = not self._created  # the first save makes the run; later ones only update it
        saved: list[bool] = []
        if self._with_retry(lambda: saved.append(self.store.save_run(RunRecord.from_dict(snapshot), create=create))):
            self._created = True
            self.removed = saved[-1] is False
            return
        with self._record_lock:
            if self._record is None:
                self._record = snapshot  # keep it for the next try

    def _write(self, batch: _Batch) -> None:
        if self.removed:
            return
        if self._with_retry(lambda: self.store.add(batch.run_id, batch.samples, batch.events)):
            self.state.samples_written += len(batch.samples)
        else:
            self._lose(len(batch.samples), len(batch.events), self.state.error or "the store failed")

    def _with_retry(self, write) -> bool:
        """Write, retrying while the store is locked or busy, or its server does not answer (connecting
        again, waiting longer each time up to :data:`RECONNECT_MAX_SECONDS`), until the deadline once
        one is set. Meanwhile the batches wait in the queue (:data:`MAX_BATCHES`)."""
        began = time.monotonic()
        pause = RETRY_SECONDS
        try:
            while True:
                try:
                    write()
                    return True
                except StoreError as exc:
                    unreachable = isinstance(exc, StoreUnreachable)
                    busy = unreachable or any(word in str(exc).lower() for word in _BUSY)
                    if not busy or (self._deadline is not None and time.monotonic() > self._deadline):
                        if self.state.error is None:
                            self.state.error = str(exc)
                        return False
                    if unreachable:
                        reconnect = getattr(self.store, "reconnect", None)
                        if reconnect is not None and reconnect():
                            continue  # write again at once
                        time.sleep(pause)
                        pause = min(RECONNECT_MAX_SECONDS, pause * 2)
                    else:
                        time.sleep(RETRY_SECONDS)
        finally:
            self.state.waited_seconds += time.monotonic() - began

    def _lose(self, samples: int, events: int, reason: str) -> None:
        self.state.samples_lost += samples
        self.state.events_lost += events
        if self.state.error is None:
            self.state.error = reason
