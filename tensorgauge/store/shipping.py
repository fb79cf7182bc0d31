"""A recording into PostgreSQL that never waits for it: every batch goes first into the run's local
:class:`~.spool.Spool`, and a thread of its own ships the spool to the store every
:data:`SHIP_SECONDS` (``$TENSORGAUGE_SHIP_SECONDS``; less often while the store is slow to answer), on a
connection made for that transaction and let go after it. A store that refuses (too many clients, starting
up, down) is tried again later, waiting longer each time (with jitter, so a fleet does not come back all at
once); nothing is lost meanwhile.
At the run's end it is tried every :data:`DRAIN_RETRY_SECONDS`, so a store back up is not missed (every
:data:`DRAIN_BUSY_RETRY_SECONDS` at most while it refuses for want of free connection slots). Once it has
the run, the spools earlier runs on this machine left for it are shipped too, for
:data:`LEFTOVER_SECONDS` at most (also once during the run, and by ``tensorgauge ship``: :func:`ship_spools`).

Exactly once, in order: one transaction ships the oldest batches, the run's latest record, and the last
batch number shipped (table ``tensorgauge_shipped``); the spool drops them only after it committed, and
a spool shipped again (the monitor died between the two) skips what the store already has.

Samples travel as compressed chunks (:mod:`.chunks`), encoded here: the server stores one small row per
transaction instead of a row per sample that it would later read back to compress. The run's last chunk
grows with each transaction (it is replaced) until it holds :data:`~.schema.CHUNK_SAMPLES`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tensorgauge.errors import StoreError, StoreUnreachable
from tensorgauge.model import Event, RunRecord, Sample
from tensorgauge.store.postgres import PostgresBackend, busy, slow
from tensorgauge.store.runs import (
    _INSERT_CHUNK,
    _INSERT_EVENT,
    _UPSERT_RUN,
    EVENT_COLUMNS,
    SAMPLE_COLUMNS,
    Store,
    _row,
    _samples,
)
from tensorgauge.store.schema import CHUNK_SAMPLES
from tensorgauge.store.spool import Spool, empty_spools, remove_spool, spool_folder, waiting_spools

if TYPE_CHECKING:
    from tensorgauge.series import SampleSeries

SHIP_SECONDS = 5.0  # a fleet of N workers makes N / SHIP_SECONDS connections a second at most
SHIP_ENV = "TENSORGAUGE_SHIP_SECONDS"
SHIP_BATCHES = 200  # batches (0.5 s each) one transaction ships at most
SHIP_LATENCY_FACTOR = 10  # a slow store is shipped to less often: after a transaction of L s, again in 10 L s
SHIP_MAX_SECONDS = 60.0  # ... at most
START_CONNECT_SECONDS = 3  # before the job: how long the store has to answer before its data go to the spool
SHIP_CONNECT_SECONDS = 10  # then, on the shipper's thread (off the job's path): a busy server's answer is awaited
RETRY_MAX_SECONDS = 10.0
DRAIN_RETRY_SECONDS = 1.0  # at a run's end, waiting on the store is all that is left: it is tried this often
# ... at most, while it refuses for want of free connection slots: every refused try costs the server a
# process, and a thousand workers ending at once would otherwise knock every second.
DRAIN_BUSY_RETRY_SECONDS = 4.0
CLOSE_WAIT_SECONDS = 5.0  # at close, the longest wait for the shipper's transaction under way
DRAIN_STALL_SECONDS = 15.0  # at a run's end: its spool is shipped while the store takes a transaction this often
# ... this many times as long while the store refuses for lack of free connection slots: it is serving others.
# 30 workers on 10 slots of a 2-core machine, each ending at once: one waited over 15 s for a slot in 1 run of 3.
BUSY_STALL_FACTOR = 4
LEFTOVER_SECONDS = 10.0  # at a run's end, once the store has it: how long the spools earlier runs left are shipped
# Once the store took the whole run, the reads of its analysis try again this long a store that refuses them
# for now (its slots taken, or too busy to answer in time: the fleet's other workers are ending too).
SESSION_WAIT_SECONDS = 30.0


def open_for_recording(url: str) -> SpooledStore:
    """The store at ``url`` to record a run into: :class:`StoreError` (at once) for what the user must fix
    (a wrong password, no such database, a bad URL); a server that refuses or does not answer only
    delays the data, never the job."""
    try:
        backend = PostgresBackend(url, create=True, hold=False, connect_seconds=START_CONNECT_SECONDS)
        why = None
    except StoreUnreachable as exc:
        backend = PostgresBackend(url, create=True, hold=False, connect_seconds=START_CONNECT_SECONDS,
                                  connect_now=False)
        why = str(exc)
    backend.connect_seconds = SHIP_CONNECT_SECONDS
    store = SpooledStore(backend)
    store.ship_error = why
    return store


class OpenChunk(NamedTuple):
    """The run's last chunk as shipped, not yet full: its samples, and its first sample's time (its row is
    found by it)."""

    first_t: float
    series: SampleSeries


class Shipper:
    """Ships one spool into a store, a transaction at a time (see the module's docstring)."""

    def __init__(self, spool: Spool, run_id: str, created: bool = False):
        self.spool, self.run_id = spool, run_id
        self.created = created  # the run's record is in the store: later records only update it
        self.removed = False  # ... and it was removed there (tensorgauge rm): ship no more
        self.record_dirty = not created
        self.shipped_samples = 0
        self.latencies: list[float] = []  # seconds each shipping transaction took (connecting included)
        self.shipped_at = 0.0  # when (monotonic) a transaction last committed
        self.in_flight_since: float | None = None  # when the transaction under way began, None between them
        self.open_chunk: OpenChunk | None = None  # the run's last chunk in the store, still growing
        self._open_chunk_after: OpenChunk | None = None  # ... once the transaction under way commits

    def ship(self, store: Store) -> bool:
        """The oldest batches and the latest record in one transaction; True when more wait."""
        if self.removed:
            return False
        batches = self.spool.pending(SHIP_BATCHES)
        dirty, self.record_dirty = self.record_dirty, False
        record = self.spool.record() if dirty else None
        began = self.in_flight_since = time.monotonic()
        try:
            self._open_chunk_after = self.open_chunk
            last = self._commit(store, batches, record)
            self.shipped_at = time.monotonic()
            self.latencies.append(self.shipped_at - began)
        except BaseException:
            self.record_dirty = self.record_dirty or dirty
            raise
        finally:
            self.in_flight_since = None
        if last is not None:
            self.spool.shipped(last)
            self.open_chunk = self._open_chunk_after
        self.created = self.created or record is not None
        self.shipped_samples += sum(len(s) for _, s, _ in batches)
        return len(batches) == SHIP_BATCHES

    def _commit(self, store: Store, batches: list, record: dict | None) -> int | None:
        """One transaction: the batches the store does not have yet, the record; the last batch number."""
        run_id = self.run_id
        with store._writing() as db:
            if record is not None:
                if self.created:
                    self.removed = db.execute("UPDATE runs SET started_at = ?, record = ? WHERE run_id = ?",
                                              (record["started_at"], json.dumps(record), run_id)) == 0
                else:
                    db.execute(_UPSERT_RUN, (run_id, record["started_at"], json.dumps(record)))
            if not batches or self.removed:
                return batches[-1][0] if batches else None
            done = db.query("INSERT INTO tensorgauge_shipped (run_id, seq) VALUES (?, 0) ON CONFLICT (run_id) "
                            "DO UPDATE SET seq = tensorgauge_shipped.seq RETURNING seq", (run_id,))[0][0]  # row locked
            fresh = [b for b in batches if b[0] > done]
            samples = [row for _, rows, _ in fresh for row in rows]
            events = [(run_id, *row) for _, _, rows in fresh for row in rows]
            if samples:
                self._open_chunk_after = self._insert_chunks(db, store, samples)
            if events:
                db.executemany(_INSERT_EVENT, events)
            last = batches[-1][0]
            db.execute("UPDATE tensorgauge_shipped SET seq = ? WHERE run_id = ?", (max(last, done), run_id))
            return last

    def _insert_chunks(self, db, store: Store, rows: list[tuple]) -> OpenChunk | None:
        """The sample rows as chunks, the open chunk grown by them (its row replaced); the chunk left open."""
        from tensorgauge.series import SampleSeries
        from tensorgauge.store import chunks

        series = SampleSeries.from_samples(_samples(rows, store.location))
        if self.open_chunk is not None and db.execute(
                "DELETE FROM sample_chunks WHERE run_id = ? AND first_t = ? AND count = ?",
                (self.run_id, self.open_chunk.first_t, len(self.open_chunk.series))):
            series = SampleSeries.concat([self.open_chunk.series, series])
        parts = chunks.split(series)
        db.executemany(_INSERT_CHUNK, [(self.run_id, *part) for part in parts])
        first_t, _, count, _, _ = parts[-1]
        return OpenChunk(first_t, series.take(slice(len(series) - count, None))) if count < CHUNK_SAMPLES else None

    def empty(self) -> bool:
        return self.removed or (self.spool.waiting()[0] == 0 and not self.record_dirty)

    def stalled_seconds(self, since: float) -> float:
        """How long nothing has been shipped, counted from ``since`` (monotonic) at the earliest: 0 while a
        transaction is under way (a slow store is answering), else the time since the last commit (refused
        connections are no progress)."""
        if self.in_flight_since is not None:
            return 0.0
        return time.monotonic() - max(since, self.shipped_at)


class SpooledStore(Store):
    """A :class:`Store` whose ``add`` and ``save_run`` go into a local spool, shipped by a thread; it also
    ships the spools earlier runs on this machine left for the same store (their monitor ended first)."""

    shipper_type = Shipper  # what ships the run's spool (a test gives a fake one)

    def __init__(self, backend: PostgresBackend):
        super().__init__(backend)
        self.ship_seconds = float(os.environ.get(SHIP_ENV) or SHIP_SECONDS)
        self.shipper: Shipper | None = None
        self.ship_error: str | None = None
        self._lock = threading.Lock()  # one transaction on the backend at a time
        self._wake = threading.Event()
        self._stop = False
        self._draining = False  # the run has ended: refusals are retried every DRAIN_RETRY_SECONDS
        self._took_all = False  # ... and the store took all of it: it answers, though maybe busy
        self._thread: threading.Thread | None = None
        self._told_refused = False
        self._leftovers_until: float | None = None  # the run is in: ship the leftovers until then (monotonic)
        self._leftovers_done = threading.Event()

    @property
    def session_wait_seconds(self) -> float:
        """:data:`SESSION_WAIT_SECONDS` once the store has taken the whole run, else not at all."""
        return SESSION_WAIT_SECONDS if self._took_all else 0.0

    @property
    def removed(self) -> bool:
        return bool(self.shipper and self.shipper.removed)

    @property
    def latencies(self) -> list[float]:
        return self.shipper.latencies if self.shipper else []

    @property
    def where(self) -> str:
        """Where the run's data wait: this host and the spool file."""
        return f"{socket.gethostname()}:{self.shipper.spool.path if self.shipper else '-'}"

    def _shipper(self, run_id: str) -> Shipper:
        if self.shipper is None:
            try:
                spool = Spool(spool_folder(self.data_dir) / f"{run_id}.db", self.location, run_id,
                              hold_when_refused=True)
            except StoreError as exc:  # no folder for it: the run is held in memory until shipped
                spool = Spool(None, refused=str(exc))
            if spool.path is not None and spool.on_disk:
                _lock_file(spool.path)  # held while this process lives: no other ships it meanwhile
            self.shipper = self.shipper_type(spool, run_id)
            self._thread = threading.Thread(target=self._loop, name="tensorgauge-shipper", daemon=True)
            self._thread.start()
        return self.shipper

    # -- the writer's side: local, never waits on the server ------------------------

    def add(self, run_id: str, samples: list[Sample], events: list[Event]) -> None:
        if (samples or events) and not self.removed:
            spool = self._shipper(run_id).spool
            spool.append([_row(SAMPLE_COLUMNS, s) for s in samples], [_row(EVENT_COLUMNS, e) for e in events])
            self._tell_refused(spool)

    def save_run(self, record: RunRecord, create: bool = True) -> bool:
        if self.removed:
            return False
        shipper = self._shipper(record.run_id)
        shipper.spool.set_record(record.to_dict())
        shipper.record_dirty = True
        self._tell_refused(shipper.spool)
        return True

    def _tell_refused(self, spool: Spool) -> None:
        """Where the disk refused the spool and the run is held in memory: shipped now (what is in memory
        dies with the monitor), not in :data:`SHIP_SECONDS`, unless the store is refusing (its retries keep
        their pace); and said once."""
        if spool.held() == (0, 0) and not spool.record_held:
            return
        if self.ship_error is None:
            self._wake.set()
        if not self._told_refused:
            self._told_refused = True
            if self.notify is not None:
                self.notify(f"{spool.refused}: the run's data are held in memory until the store takes them")

    def held_in_memory(self) -> tuple[int, int, bool]:
        """(samples, events, whether its latest record) of the run the disk refused and the store does not
        have yet."""
        if self.shipper is None:
            return 0, 0, False
        spool = self.shipper.spool
        return *spool.held(), spool.record_held and self.shipper.record_dirty

    def reconnect(self) -> bool:
        return True  # the spool always answers

    def drain(self, timeout_seconds: float, stall_seconds: float = DRAIN_STALL_SECONDS) -> bool:
        """Ship now and wait until the spool is empty (True): as long as the store takes a transaction at
        least every ``stall_seconds`` (:data:`BUSY_STALL_FACTOR` times that while it refuses for lack of free
        connection slots), for ``timeout_seconds`` at most (False: the rest waits in the spool). A backlog
        the store is taking is shipped to its end; a store that refuses costs the stall window."""
        shipper = self.shipper
        if shipper is None:
            return True
        began = time.monotonic()
        self._draining = True
        self._wake.set()  # at once; then every DRAIN_RETRY_SECONDS at most while the store refuses
        while time.monotonic() < began + timeout_seconds and not self._shipped_all():
            serving = self._serving_others()
            if shipper.stalled_seconds(began) >= stall_seconds * (BUSY_STALL_FACTOR if serving else 1):
                break
            time.sleep(0.05)
        self._took_all = self._shipped_all()
        if self._took_all:
            self._drain_leftovers(min(began + timeout_seconds, time.monotonic() + LEFTOVER_SECONDS))
        else:  # the run's end is over: a transaction under way settles before what is left is counted
            self._stop_shipping()
        return self._took_all

    def _drain_leftovers(self, until: float) -> None:
        """The store has the run: the spools earlier runs left for it shipped by the shipper's thread, until
        ``until`` (monotonic) at most; what is left then waits for the next run."""
        own = self.shipper.spool.path if self.shipper else None
        if until <= time.monotonic() or not any(path != own for _, path, _ in
                                                waiting_spools(self.data_dir, self.location)):
            return
        self._leftovers_done.clear()
        self._leftovers_until = until
        self._wake.set()
        self._leftovers_done.wait(max(0.0, until - time.monotonic()))

    def _serving_others(self) -> bool:
        """Whether the store's last refusal says it is up and serving others: its connection slots taken, or
        a connection that timed out once it had taken a transaction of this run (overloaded, not gone)."""
        error = self.ship_error
        return error is not None and (busy(error) or (slow(error) and bool(self.shipper and self.shipper.shipped_at)))

    def _shipped_all(self) -> bool:
        """Nothing left to ship, and no transaction under way (it holds the lock; the store may refuse it,
        and what it took from the spool is then waiting again)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return self.shipper is None or self.shipper.empty()
        finally:
            self._lock.release()

    def _stop_shipping(self) -> None:
        """The shipper's thread stopped: its transaction under way given :data:`CLOSE_WAIT_SECONDS`."""
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(CLOSE_WAIT_SECONDS)

    def close(self) -> None:
        self._stop_shipping()
        if self.shipper is not None and self._lock.acquire(timeout=CLOSE_WAIT_SECONDS):
            try:
                self.shipper.spool.close(remove=self.shipper.empty())
            finally:
                self._lock.release()
        # else a transaction hangs (a server that stopped answering mid-way): the spool stays as it is on
        # disk, crash-safe, for the next run to ship; this process does not wait on it
        super().close()

    # -- the shipper's thread -------------------------------------------------------------

    def _loop(self) -> None:
        pause = self.ship_seconds
        leftovers_done = False
        while not self._stop:
            self._wake.wait(pause * random.uniform(0.8, 1.2))
            self._wake.clear()
            if self._stop:
                break  # closing: what the store last answered stands
            try:
                with self._lock:
                    while not self._stop and self.shipper is not None and self.shipper.ship(self):
                        pass  # a backlog: all of it, a transaction at a time
                self.ship_error = None
                pause = self.ship_seconds if self._draining else self._pace()
            except StoreError as exc:
                self.ship_error = str(exc)
                longest = RETRY_MAX_SECONDS if not self._draining else \
                    DRAIN_BUSY_RETRY_SECONDS if self._serving_others() else DRAIN_RETRY_SECONDS
                pause = min(longest, max(pause, 0.5) * 2)
                if self._leftovers_until is not None:  # the store stopped answering: the leftovers wait
                    self._leftovers_until = None
                    self._leftovers_done.set()
                continue
            if self._leftovers_until is not None:  # the run's end: the store has all of it
                self._leftovers_at_end(self._leftovers_until)
            elif not leftovers_done:  # once while the job runs, yielding to the run's own end
                leftovers_done = True
                self._ship_leftovers(lambda: self._stop or self._draining)

    def _pace(self) -> float:
        """Seconds to the next transaction while the job runs: :data:`SHIP_SECONDS`, or
        :data:`SHIP_LATENCY_FACTOR` times as long as the last took, while the store is slow to take them
        (every worker of a fleet then connects less often, and holds a connection a tenth of its time at
        most). At the run's end the spool is shipped without such pauses."""
        latency = self.shipper.latencies[-1] if self.shipper and self.shipper.latencies else 0.0
        return min(SHIP_MAX_SECONDS, max(self.ship_seconds, SHIP_LATENCY_FACTOR * latency))

    def _leftovers_at_end(self, until: float) -> None:
        """The spools earlier runs left, shipped until ``until`` (monotonic); then :meth:`drain` is told."""
        self._ship_leftovers(lambda: self._stop or time.monotonic() > until)
        self._leftovers_until = None
        self._leftovers_done.set()

    def _ship_leftovers(self, stop: Callable[[], bool]) -> None:
        """Ship the spools other runs left for this store on this machine, until ``stop()``."""
        try:
            ship_spools(self, stop, skip=self.shipper.spool.path if self.shipper else None, lock=self._lock)
        except Exception:  # noqa: BLE001 (another run's spool: never stop shipping this run's)
            pass


def ship_spools(store: Store, stop: Callable[[], bool] = lambda: False, skip: Path | None = None,
                lock: contextlib.AbstractContextManager | None = None,
                shipped: Callable[[str, int], None] | None = None) -> int:
    """Ship the spools runs left on this machine for ``store`` (but ``skip``, and those another process
    holds: a live monitor's own), each in order and exactly once, a transaction at a time (each under
    ``lock``) until ``stop()``; ``shipped(run id, samples)`` is told of each spool shipped whole. Returns
    how many spools still wait."""
    _remove_empty(store.data_dir)
    left = 0
    for run_id, path, _ in waiting_spools(store.data_dir, store.location):
        if path == skip:
            continue
        if stop() or not _lock_file(path):
            left += 1
            continue
        try:
            samples = _ship_spool(store, Spool(path), run_id, stop, lock or contextlib.nullcontext())
        finally:
            _unlock_file(path)
        if samples is None:
            left += 1
        elif shipped is not None:
            shipped(run_id, samples)
    return left


def _remove_empty(data_dir: Path) -> None:
    """The spool files holding nothing (see :func:`~.spool.empty_spools`) that no process holds, removed."""
    for path in empty_spools(data_dir):
        if _lock_file(path):
            try:
                remove_spool(path)
            finally:
                _unlock_file(path)


def _ship_spool(store: Store, spool: Spool, run_id: str, stop: Callable[[], bool],
                lock: contextlib.AbstractContextManager) -> int | None:
    """One spool into ``store``, its file removed once all of it is there: the samples shipped, or None
    while some still wait (``stop()``)."""
    shipper = Shipper(spool, run_id)
    empty = False
    try:
        while True:
            with lock:
                more = shipper.ship(store)
            if not more or stop():
                break
        empty = shipper.empty()
    finally:
        spool.close(remove=empty)
    return shipper.shipped_samples if empty else None


_LOCKS: dict[Path, int] = {}


def _lock_file(path: Path) -> bool:
    """Hold ``path`` locked (flock) for this process; False when another process holds it."""
    import fcntl

    if path in _LOCKS:  # this process's own (another recording in it): not a leftover
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # shipped and removed meanwhile
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _LOCKS[path] = fd
    return True


def _unlock_file(path: Path) -> None:
    """Let go of a spool :func:`_lock_file` holds (shipped, or left for later)."""
    fd = _LOCKS.pop(path, None)
    if fd is not None:
        os.close(fd)
