"""``compare --job`` reads a job's workers a few queries for all of them, not a set per worker (on fakes:
runs recorded through the Recorder into a SQLite store, queries counted by SQLite's trace callback)."""

from __future__ import annotations

import io

from rich.console import Console

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.analyse.straggler import straggler, worker_row
from tensorgauge.commands.compare import _worker_rows
from tensorgauge.model import RunRecord, Sample
from tensorgauge.monitoring.recorder import Recorder
from tensorgauge.render.compare import render_job
from tensorgauge.store import Store
from tensorgauge.testing import FakeClock

JOB = "fleet"


def _record_worker(store: Store, i: int) -> None:
    """One worker's run: a fit of 40 steps (worker 3 twice as slow), 10 Hz samples, a profiled window on the
    even workers (their all-reduce and input time per step)."""
    clock = FakeClock(100.0)
    record = RunRecord(run_id=f"run-{i:03d}", command=["python", "train.py"], started_at="2026-11-27T10:00:00+00:00",
                       t0_monotonic=100.0, job_id=JOB, env={"host": {"hostname": f"node{i}", "cores_allowed": 2.0},
                                                            "worker": {"worker": f"worker:{i}"}})
    store.save_run(record)
    recorder = Recorder(store, record, 100.0, clock)
    recorder.add([], [{"t": clock.now(), "pid": 7, "kind": "phase_begin", "id": 1, "name": "fit",
                       "phase_kind": "fit", "cpu": 0.0, "rss": 1 << 30}])
    step = 0.02 if i == 3 else 0.01
    for k in range(8):
        clock.advance(0.5)
        samples = [Sample(t=clock.now() - 100.0 - 0.5 + j / 10, cpu_seconds=k + j / 10, cores_busy=1.5,
                          rss_bytes=1 << 30, threads=8, processes=1) for j in range(5)]
        recorder.add(samples, [{"t": clock.now(), "pid": 7, "kind": "steps", "phase": 1,
                                "seconds": [step * (1 + (n % 3) / 100) for n in range(5)]}], force=True)
    raw = [{"t": clock.now(), "pid": 7, "kind": "phase_end", "id": 1, "cpu": 8.0, "rss": 1 << 30}]
    if i % 2 == 0:
        raw.insert(0, {"t": clock.now(), "pid": 7, "kind": "input_probe", "step_seconds": [step] * 4,
                       "collective_seconds": 0.004 * (1 + i % 4), "input_work_seconds": 0.002})
    recorder.add([], raw, force=True)
    record.complete, record.wall_seconds, record.exit_code = True, clock.now() - 100.0, 0
    store.save_run(record)


def _job(path, workers: int) -> list[RunRecord]:
    with Store.open(path) as store:
        for i in range(workers):
            _record_worker(store, i)
        records = [r for r in store.runs() if r.job_id == JOB]
        for r in records:
            RunReport.load(store, r.run_id)  # analysed once and stored, as `tensorgauge run` does at its end
    return records


def _counted_rows(path, records: list[RunRecord]) -> tuple[list, int]:
    statements: list[str] = []
    with Store.open(path, create=False) as store:
        store.backend.conn.set_trace_callback(statements.append)
        rows = _worker_rows(store, records)
    return rows, len([s for s in statements if s.lstrip().upper().startswith("SELECT")])


def _text(rows, show_all: bool) -> str:
    out = io.StringIO()
    render_job(Console(file=out, width=160), JOB, sorted(rows, key=lambda w: w.worker), straggler(rows), show_all)
    return out.getvalue()


def test_the_jobs_workers_read_at_once_are_the_rows_each_run_gives(tmp_path):
    path = tmp_path / "runs.db"
    records = _job(path, 24)
    rows, _ = _counted_rows(path, records)
    with Store.open(path, create=False) as store:
        each = [worker_row(RunReport.load(store, r.run_id)) for r in records]
    assert rows == each
    assert any(r.allreduce_seconds_per_step for r in rows) and all(r.step_seconds_p50 for r in rows)
    assert _text(rows, False) == _text(each, False)  # distribution and slowest workers
    assert _text(rows, True) == _text(each, True)  # --all


def test_the_queries_do_not_grow_with_the_workers(tmp_path):
    counts = {}
    for workers in (3, 30):
        path = tmp_path / f"{workers}.db"
        records = _job(path, workers)
        rows, counts[workers] = _counted_rows(path, records)
        assert len(rows) == workers
    assert counts[3] == counts[30] <= 2, counts  # the analyses, the input_probe events


def test_a_run_without_a_stored_analysis_is_analysed_and_still_read(tmp_path):
    path = tmp_path / "runs.db"
    records = _job(path, 4)
    with Store.open(path) as store:
        store.backend.execute("DELETE FROM analyses WHERE run_id = ?", ("run-001",))
        before = {r.run_id: r for r in (worker_row(RunReport.load(store, x.run_id)) for x in records)}
        store.backend.execute("DELETE FROM analyses WHERE run_id = ?", ("run-002",))
    rows, _ = _counted_rows(path, records)
    assert {r.run_id: r for r in rows} == before
    with Store.open(path, create=False) as store:
        assert store.analysis("run-002") is not None  # analysed now, and kept
