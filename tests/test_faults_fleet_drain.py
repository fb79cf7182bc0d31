"""The end of a run into PostgreSQL: its spool is shipped to the end while the store takes it, however long
the backlog, and given up on (kept on disk) once the store takes nothing for a while (on fakes: a spooled
store whose transactions are slow, or refused)."""

from __future__ import annotations

import time

from tensorgauge.errors import StoreUnreachable
from tensorgauge.model import Sample
from tensorgauge.store import shipping
from tensorgauge.store.shipping import Shipper, SpooledStore


class _Backend:
    """What a SpooledStore needs of its backend when its shipper is a fake: where it is, nothing more."""

    chunked = False
    read_only = False

    def __init__(self, folder):
        self.location, self.data_dir = "postgresql://fake/db", folder

    def close(self) -> None:
        pass


class _SlowShipper(Shipper):
    """A store that takes one batch a transaction, each taking ``seconds``."""

    seconds = 0.05
    committed: list[int] = []

    def _commit(self, store, batches, record):
        time.sleep(self.seconds)
        if not batches:
            return None
        self.committed.append(batches[0][0])
        return batches[0][0]


class _RefusingShipper(Shipper):
    def _commit(self, store, batches, record):
        raise StoreUnreachable("FATAL: sorry, too many clients already")


def _store(folder, shipper: type[Shipper], batches: int) -> SpooledStore:
    store = type("FakeSpooled", (SpooledStore,), {"shipper_type": shipper})(_Backend(folder))
    store.ship_seconds = 0.05
    for i in range(batches):
        store.add("run-1", [Sample(t=i * 0.5, cpu_seconds=float(i), cores_busy=1.0, rss_bytes=1 << 20, threads=1,
                                   processes=1)], [])
    return store


def _one_batch_a_transaction(monkeypatch) -> None:
    """A transaction ships one batch and says more wait, as a full one does: the shipper's thread ships
    the backlog back to back, as it does a real one (not one batch, then a pause, then the next)."""
    monkeypatch.setattr(shipping, "SHIP_BATCHES", 1)


def test_a_backlog_the_store_keeps_taking_is_shipped_to_its_end(tmp_path, monkeypatch):
    """40 transactions, one after another: twice the stall window, each well within it."""
    _one_batch_a_transaction(monkeypatch)
    _SlowShipper.committed = []
    store = _store(tmp_path, _SlowShipper, 40)
    try:
        assert store.drain(timeout_seconds=120.0, stall_seconds=1.0) is True
    finally:
        store.close()
    assert _SlowShipper.committed == list(range(1, 41))  # in order, each once
    assert not list((tmp_path / "spool").glob("*.db"))  # all shipped: the spool is gone


class _TimedShipper(_SlowShipper):
    """Each transaction takes 0.1 s; when each began is kept."""

    seconds = 0.1
    began: list[float] = []

    def _commit(self, store, batches, record):
        self.began.append(time.monotonic())
        return super()._commit(store, batches, record)


def test_while_the_job_runs_a_slow_store_is_shipped_to_less_often(tmp_path):
    """1,000 workers, each shipping every 5 s, were more connections than a busy server could set up: a
    worker whose transaction took L s waits 10 L s for the next (here 1 s, against 0.05 s when quick)."""
    timed = type("Timed", (_TimedShipper,), {"began": [], "committed": []})
    store = _store(tmp_path, timed, 4)
    try:
        deadline = time.monotonic() + 30.0
        while len(timed.began) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        store.close()
    gaps = [b - a for a, b in zip(timed.began, timed.began[1:])]
    assert len(gaps) >= 2 and min(gaps) >= 0.1 + 0.8 * 10 * 0.1  # the transaction, then 10 times it less jitter


def test_a_slow_transaction_is_progress(tmp_path, monkeypatch):
    """A transaction under way longer than the stall window is waited for: the store is answering."""
    _one_batch_a_transaction(monkeypatch)
    slow = type("VerySlow", (_SlowShipper,), {"seconds": 1.0, "committed": []})
    store = _store(tmp_path, slow, 2)
    try:
        assert store.drain(timeout_seconds=120.0, stall_seconds=0.5) is True
    finally:
        store.close()
    assert slow.committed == [1, 2]


def test_a_store_that_refuses_costs_the_stall_window_not_the_whole_wait(tmp_path):
    store = _store(tmp_path, _RefusingShipper, 5)
    began = time.monotonic()
    try:
        assert store.drain(timeout_seconds=120.0, stall_seconds=0.5) is False
        waited = time.monotonic() - began
    finally:
        store.close()
    assert waited < 60.0  # gave up on the stall, long before the 120 s bound
    assert store.shipper is not None and store.shipper.spool.path.exists()  # kept for the next run to ship


class _DownAtFirstShipper(Shipper):
    """A store that refuses until ``up_at`` (monotonic), then takes everything; its refusals are counted."""

    up_at = float("inf")
    refusals = 0

    def _commit(self, store, batches, record):
        if time.monotonic() < self.up_at:
            type(self).refusals += 1
            raise StoreUnreachable("connection refused")
        return batches[-1][0] if batches else None


def test_a_store_back_up_during_the_drain_is_tried_again_within_the_stall_window(tmp_path):
    """Refused twice while the job ran, the shipper would wait 4 s after its third refusal (the drain's first
    try); the run's end retries every second instead, so a store up 0.3 s into a 2 s stall window takes the
    run."""
    down = type("DownAtFirst", (_DownAtFirstShipper,), {"refusals": 0})
    store = _store(tmp_path, down, 3)
    try:
        deadline = time.monotonic() + 30.0
        while down.refusals < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert down.refusals >= 2
        down.up_at = time.monotonic() + 0.3
        assert store.drain(timeout_seconds=120.0, stall_seconds=2.5) is True
    finally:
        store.close()
    assert not list((tmp_path / "spool").glob("*.db"))


class _RefusedOnceShipper(Shipper):
    """A store whose first transaction is refused after a while (slots reserved); later ones commit."""

    committed: list[dict | None] = []
    tries = 0

    def _commit(self, store, batches, record):
        type(self).tries += 1
        if type(self).tries == 1:
            time.sleep(0.3)
            raise StoreUnreachable("FATAL: remaining connection slots are reserved")
        self.committed.append(record)
        return batches[-1][0] if batches else None


def test_the_drain_waits_for_the_transaction_under_way_to_commit(tmp_path):
    """While the last record is on its way, nothing waits in the spool: the run's end is not done until the
    store took it (a refusal puts it back)."""
    from tensorgauge.model import RunRecord

    shipper = type("RefusedOnce", (_RefusedOnceShipper,), {"committed": [], "tries": 0})
    store = _store(tmp_path, shipper, 0)
    store.save_run(RunRecord(run_id="run-1", command=["x"], started_at="2026-01-01T00:00:00+00:00", complete=True))
    try:
        assert store.drain(timeout_seconds=120.0, stall_seconds=5.0) is True
        assert [r["complete"] for r in shipper.committed if r] == [True]
    finally:
        store.close()


class _BusyAtFirstShipper(Shipper):
    """A store whose connection slots are all taken until ``free_at`` (monotonic): it serves others. Its
    refusals are counted."""

    free_at = float("inf")
    refusal = "FATAL: sorry, too many clients already"
    refusals = 0

    def _commit(self, store, batches, record):
        if time.monotonic() < self.free_at:
            type(self).refusals += 1
            raise StoreUnreachable(self.refusal)
        return batches[-1][0] if batches else None


def _refused_once(shipper: type[_BusyAtFirstShipper]) -> None:
    """Until the shipper's first try has been refused (its retries then wait 1 s, 2 s, ...)."""
    deadline = time.monotonic() + 30.0
    while shipper.refusals < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert shipper.refusals >= 1


def test_a_store_busy_with_other_workers_is_waited_for_longer_than_one_that_is_down(tmp_path):
    """30 workers ending at once on 10 slots: one waited over 15 s for a free slot (1 CI run in 3) and
    left its run in its spool. Refusals for lack of slots stretch the stall window fourfold (here 1 s to 4 s,
    against a retry 1.6-2.4 s after the drain's first); a store that does not answer still costs one."""
    busy = type("Busy", (_BusyAtFirstShipper,), {"refusals": 0})
    store = _store(tmp_path, busy, 3)
    try:
        _refused_once(busy)
        busy.free_at = time.monotonic() + 0.7
        assert store.drain(timeout_seconds=120.0, stall_seconds=1.0) is True
    finally:
        store.close()
    down = type("Down", (_BusyAtFirstShipper,), {"refusals": 0, "refusal": "connection refused"})
    store = _store(tmp_path / "down", down, 3)
    try:
        _refused_once(down)
        down.free_at = time.monotonic() + 3.0
        assert store.drain(timeout_seconds=120.0, stall_seconds=1.0) is False
    finally:
        store.close()
