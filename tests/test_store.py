import sqlite3

import pytest

from tensorgauge.errors import StoreError, UnknownRunError
from tensorgauge.model import Event, GpuReading, RunRecord, Sample
from tensorgauge.store import SCHEMA_VERSION, Store


def record(run_id, started="2026-01-01T00:00:00", name=None):
    return RunRecord(run_id=run_id, command=["python", "x.py"], started_at=started, name=name)


def test_round_trip_samples_events_and_record(tmp_path):
    store = Store.open(tmp_path / "runs.db")
    rec = record("20260101-000000-abcd", name="first")
    store.save_run(rec)
    samples = [Sample(t=0.1 * i, cpu_seconds=0.05 * i, cores_busy=0.5 if i else None, rss_bytes=1000 + i,
                      threads=4, processes=1, cpu_percent=[10.0, 20.0],
                      gpus=[GpuReading(index=0, util_percent=5.0)] if i == 2 else []) for i in range(3)]
    events = [Event(t=0.2, pid=7, kind="phase_begin", data={"id": 1, "name": "fit"})]
    store.add(rec.run_id, samples, events)
    store.close()

    again = Store.open(tmp_path / "runs.db", create=False)
    assert again.run("first") == rec
    assert again.samples(rec.run_id) == samples
    assert again.events(rec.run_id) == events
    assert again.peaks() == {rec.run_id: (1002, 3)}


def test_refs_prefix_last_and_ambiguity(tmp_path):
    store = Store.open(tmp_path / "runs.db")
    store.save_run(record("20260101-000000-aaaa", "2026-01-01T00:00:00"))
    store.save_run(record("20260101-000000-aabb", "2026-01-01T00:00:01"))
    assert store.run("last").run_id == "20260101-000000-aabb"
    assert store.run("20260101-000000-aaa").run_id == "20260101-000000-aaaa"
    with pytest.raises(UnknownRunError, match="matches 2 runs"):
        store.run("20260101")
    with pytest.raises(UnknownRunError, match="no run 'zzz'"):
        store.run("zzz")
    with pytest.raises(UnknownRunError):
        store.run("%")  # LIKE wildcards are literal


def test_delete_removes_everything_of_one_run_only(tmp_path):
    store = Store.open(tmp_path / "runs.db")
    for run_id in ("a1", "b2"):
        store.save_run(record(run_id))
        store.add(run_id, [Sample(t=0, cpu_seconds=0, cores_busy=None, rss_bytes=1, threads=1, processes=1)], [])
    store.delete_run("a1")
    assert [r.run_id for r in store.runs()] == ["b2"]
    assert store.samples("a1") == [] and len(store.samples("b2")) == 1


def test_corrupt_file_is_a_clear_error_and_left_untouched(tmp_path):
    path = tmp_path / "runs.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a usable tensorgauge database"):
        Store.open(path)
    assert path.read_bytes() == b"this is not sqlite" * 100


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="upgrade tensorgauge"):
        Store.open(path)


def test_missing_store_without_create(tmp_path):
    with pytest.raises(StoreError, match="no run store"):
        Store.open(tmp_path / "none.db", create=False)
    assert not (tmp_path / "none.db").exists()


def test_unwritable_location(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create the store's folder"):
        Store.open(blocker / "sub" / "runs.db")
    with pytest.raises(StoreError, match="is a directory"):
        Store.open(tmp_path)


def test_a_damaged_record_is_named_and_skipped_by_the_listing_and_removable(tmp_path, capsys):
    from tensorgauge.cli import main
    from tensorgauge.model import RunRecord

    store = Store.open(tmp_path / "runs.db")
    store.save_run(RunRecord(run_id="20261126-080000-aaaa", command=["a"], started_at="2026-11-26T08:00:00+00:00"))
    store.conn.execute("INSERT INTO runs VALUES ('20261126-090000-bbbb', '2026', '{not json')")
    store.conn.commit()
    with pytest.raises(StoreError, match="damaged run record"):
        store.run("20261126-090000-bbbb")
    damaged: list = []
    assert [r.run_id for r in store.runs(damaged)] == ["20261126-080000-aaaa"]
    assert damaged[0][0] == "20261126-090000-bbbb" and "damaged run record" in damaged[0][1]
    assert main(["runs", "--store", str(tmp_path / "runs.db")]) == 0
    out, err = capsys.readouterr()
    assert "20261126-080000-aaaa" in out and "skipped run 20261126-090000-bbbb" in err and "Traceback" not in err
    assert main(["rm", "--store", str(tmp_path / "runs.db"), "20261126-090000"]) == 0  # by a prefix of its id
    assert "removed 20261126-090000-bbbb" in capsys.readouterr().out
    assert [r.run_id for r in Store.open(tmp_path / "runs.db").runs()] == ["20261126-080000-aaaa"]


def test_a_version_1_store_is_migrated_and_keeps_its_runs(tmp_path):
    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE runs (run_id TEXT PRIMARY KEY, started_at TEXT NOT NULL, record TEXT NOT NULL);
        CREATE TABLE samples (run_id TEXT NOT NULL, t REAL NOT NULL, cpu_seconds REAL NOT NULL, cores_busy REAL,
            rss_bytes INTEGER NOT NULL, threads INTEGER, processes INTEGER, read_bytes INTEGER, write_bytes INTEGER,
            uss_bytes INTEGER, pss_bytes INTEGER, mem_used_bytes INTEGER, mem_available_bytes INTEGER,
            cpu_percent TEXT, gpus TEXT);
        CREATE TABLE events (run_id TEXT NOT NULL, t REAL NOT NULL, pid INTEGER, kind TEXT NOT NULL, data TEXT);
        INSERT INTO runs VALUES ('old', '2026', '{"run_id": "old", "command": ["x"], "started_at": "2026"}');
        INSERT INTO samples (run_id, t, cpu_seconds, rss_bytes) VALUES ('old', 0.1, 0.05, 123);
        PRAGMA user_version = 1;""")
    conn.close()
    store = Store.open(path)
    assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    (sample,) = store.samples("old")
    assert sample.rss_bytes == 123 and sample.runnable is None
    store.add("old", [Sample(t=0.2, cpu_seconds=0.1, cores_busy=None, rss_bytes=1, threads=1, processes=1,
                             runnable=3)], [])
    assert store.samples("old")[-1].runnable == 3


def test_a_store_lacking_declared_columns_gains_them_and_rows_decode_by_name(tmp_path):
    """Columns come from the Sample declaration: a store in any older layout (here columns in
    another order, and some missing) gains what it lacks on open and reads each value by name."""
    from tensorgauge.store.schema import SAMPLE_COLUMNS

    path = tmp_path / "runs.db"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE runs (run_id TEXT PRIMARY KEY, started_at TEXT NOT NULL, record TEXT NOT NULL);
        CREATE TABLE samples (run_id TEXT NOT NULL, gpus TEXT, runnable INTEGER, rss_bytes INTEGER NOT NULL,
            cpu_percent TEXT, t REAL NOT NULL, cpu_seconds REAL NOT NULL, threads INTEGER, processes INTEGER);
        CREATE TABLE events (run_id TEXT NOT NULL, t REAL NOT NULL, pid INTEGER, kind TEXT NOT NULL, data TEXT);
        INSERT INTO runs VALUES ('old', '2026', '{"run_id": "old", "command": ["x"], "started_at": "2026"}');
        INSERT INTO samples VALUES ('old', '[{"index": 0, "util_percent": 40.0}]', 7, 123, '[10.0, 20.0]', 0.1, 0.05,
                                    4, 1);
        PRAGMA user_version = 2;""")
    conn.close()
    store = Store.open(path)
    present = {row[1] for row in store.conn.execute("PRAGMA table_info(samples)")}
    assert {c.name for c in SAMPLE_COLUMNS} <= present
    (sample,) = store.samples("old")
    assert (sample.t, sample.cpu_seconds, sample.rss_bytes, sample.threads, sample.runnable) == (0.1, 0.05, 123, 4, 7)
    assert sample.cpu_percent == [10.0, 20.0] and sample.gpus[0].util_percent == 40.0 and sample.uss_bytes is None
