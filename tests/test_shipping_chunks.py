"""A recording's samples reach PostgreSQL as compressed chunks encoded by its shipper, the last one growing
transaction by transaction: every sample read back once and in order, a chunk row per minute of samples
(real server, the shipper driven by hand)."""

from __future__ import annotations

import time

from tensorgauge.model import RunRecord, Sample
from tensorgauge.store import Store
from tensorgauge.store.schema import CHUNK_SAMPLES
from tensorgauge.store.shipping import Shipper, open_for_recording


def _samples(first: int, count: int) -> list[Sample]:
    return [Sample(t=(first + i) / 10, cpu_seconds=(first + i) * 0.18, cores_busy=1.8, rss_bytes=(1 << 30) + (first + i) * 4096,
                   threads=40, processes=1, cpu_percent=[90.0, 91.0]) for i in range(count)]


def _chunk_rows(url: str, run_id: str) -> list[tuple[float, int]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        return admin.execute("SELECT first_t, count FROM sample_chunks WHERE run_id = %s ORDER BY first_t",
                             (run_id,)).fetchall()


def test_the_shipper_stores_chunks_growing_the_last_until_it_is_full(postgres_url, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setenv("TENSORGAUGE_SHIP_SECONDS", "3600")  # shipped below by hand, not by the thread
    run_id = f"chunks-{time.monotonic_ns()}"
    store = open_for_recording(postgres_url)
    try:
        store.save_run(RunRecord(run_id=run_id, command=["x"], started_at="2026-01-01T00:00:00+00:00"))
        shipper = store.shipper
        assert shipper is not None
        shipped = 0
        for _ in range(14):  # 14 transactions of 50 samples (5 s at 10 Hz): 700 samples
            store.add(run_id, _samples(shipped, 50), [])
            shipped += 50
            with store._lock:
                shipper.ship(store)
            rows = _chunk_rows(postgres_url, run_id)
            assert sum(count for _, count in rows) == shipped  # each sample stored once
            assert [count for _, count in rows[:-1]] == [CHUNK_SAMPLES] * (len(rows) - 1)  # only the last grows
            assert len(rows) == shipped // CHUNK_SAMPLES + (shipped % CHUNK_SAMPLES > 0)
    finally:
        store.close()
    with Store.open(postgres_url, create=False) as reader:
        assert reader.samples(run_id) == _samples(0, 700)  # in order, every field as sampled


def test_a_second_shipper_of_the_run_adds_chunks_and_leaves_the_first_ones_whole(postgres_url, tmp_path,
                                                                               monkeypatch):
    """A spool shipped again by another process (its monitor died) does not know the open chunk: it adds its
    own after it, nothing lost or doubled."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setenv("TENSORGAUGE_SHIP_SECONDS", "3600")
    run_id = f"chunks-{time.monotonic_ns()}"
    store = open_for_recording(postgres_url)
    try:
        store.save_run(RunRecord(run_id=run_id, command=["x"], started_at="2026-01-01T00:00:00+00:00"))
        store.add(run_id, _samples(0, 30), [])
        with store._lock:
            store.shipper.ship(store)
            store.add(run_id, _samples(30, 20), [])
            again = Shipper(store.shipper.spool, run_id, created=True)
            again.ship(store)
    finally:
        store.close()
    assert _chunk_rows(postgres_url, run_id) == [(0.0, 30), (3.0, 20)]
    with Store.open(postgres_url, create=False) as reader:
        assert reader.samples(run_id) == _samples(0, 50)


def test_a_recording_reads_its_run_back_on_one_connection(postgres_url, tmp_path, monkeypatch):
    """A recording's store connects for each use; its end-of-run analysis reads on one connection, not one
    per query, and stores its result on another (no slot held while it computes): 1,000 workers ending at
    once share 100 connection slots."""
    from tensorgauge.analyse.run_report import RunReport

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    run_id = f"chunks-{time.monotonic_ns()}"
    store = open_for_recording(postgres_url)
    try:
        store.save_run(RunRecord(run_id=run_id, command=["x"], started_at="2026-01-01T00:00:00+00:00",
                                 complete=True, exit_code=0, wall_seconds=5.0))
        store.add(run_id, _samples(0, 50), [])
        assert store.drain(60.0)
        before = store.backend.connections_made
        report = RunReport.load(store, run_id)
        assert store.backend.connections_made == before + 2
        assert report.summary.samples == 50
    finally:
        store.close()
