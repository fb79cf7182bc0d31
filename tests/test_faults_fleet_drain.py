"""The end of a run into PostgreSQL: its spool is shipped to the end while the store takes it, however long
the backlog, and given up on (kept on disk) once the store takes nothing for a while (on fakes: a spooled
store whose transactions are slow, or refused)."""

from __future__ import annotations

import time

from tensorgauge.errors import StoreUnreachable
from tensorgauge.model import Sample
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


def test_a_backlog_the_store_keeps_taking_is_shipped_to_its_end(tmp_path):
    """20 transactions, one after another: far longer than the stall window, each well within it."""
    _SlowShipper.committed = []
    store = _store(tmp_path, _SlowShipper, 20)
    try:
        assert store.drain(timeout_seconds=120.0, stall_seconds=0.5) is True
    finally:
        store.close()
    assert _SlowShipper.committed == list(range(1, 21))  # in order, each once
    assert not list((tmp_path / "spool").glob("*.db"))  # all shipped: the spool is gone


def test_a_slow_transaction_is_progress(tmp_path):
    """A transaction under way longer than the stall window is waited for: the store is answering."""
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
