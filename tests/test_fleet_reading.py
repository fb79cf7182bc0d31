"""Reading a fleet: the spread of many workers instead of a line each, and pruning old runs."""

from __future__ import annotations

import io

from rich.console import Console

from tensorgauge.analyse.straggler import WorkerRow, spread
from tensorgauge.cli import main
from tensorgauge.model import RunRecord
from tensorgauge.render.compare import render_job
from tensorgauge.store import Store


def _row(i: int, step: float) -> WorkerRow:
    return WorkerRow(worker=f"worker:{i}", run_id=f"run-{i}", hostname=f"node{i}", fit_seconds=10.0, steps=100,
                     step_seconds_p50=step, cores_busy_mean=1.0, cores_allowed=2.0, cpu_model="x",
                     allreduce_seconds_per_step=None, input_work_seconds_per_step=None)


def test_a_thousand_workers_read_as_their_spread_and_the_slowest():
    rows = [_row(i, 0.010) for i in range(997)] + [_row(997, 0.015), _row(998, 0.030), _row(999, 0.020)]
    found = spread(rows, slowest=3)
    assert found.step_seconds_median == 0.010 and found.workers == 1000
    assert [(w.worker, round(r, 2)) for w, r in found.slowest] == [("worker:998", 3.0), ("worker:999", 2.0),
                                                                    ("worker:997", 1.5)]
    out = io.StringIO()
    render_job(Console(file=out, width=132), "fleet", rows, None)
    text = out.getvalue()
    assert "1000 workers" in text and "worker:998" in text and "+200%" in text
    assert len(text.splitlines()) < 20  # not a line per worker
    out = io.StringIO()
    render_job(Console(file=out, width=132), "fleet", rows, None, show_all=True)
    assert len(out.getvalue().splitlines()) > 1000


def _save(store: Store, run_id: str, started: str, job: str | None) -> None:
    store.save_run(RunRecord(run_id=run_id, command=["x"], started_at=started, job_id=job, complete=True))


def test_prune_removes_only_the_old_runs_of_the_job(tmp_path, capsys):
    path = tmp_path / "runs.db"
    with Store.open(path) as store:
        _save(store, "old-a", "2020-01-01T00:00:00+00:00", "a")
        _save(store, "old-b", "2020-01-01T00:00:00+00:00", "b")
        _save(store, "new-a", "2099-01-01T00:00:00+00:00", "a")
    assert main(["prune", "--older-than", "30d", "--job", "a", "--store", str(path)]) == 0
    assert "removed 1 runs of job a that started more than 30d ago" in capsys.readouterr().out
    with Store.open(path, create=False) as store:
        assert sorted(r.run_id for r in store.runs()) == ["new-a", "old-b"]
    assert main(["prune", "--older-than", "30d", "--store", str(path)]) == 0
    with Store.open(path, create=False) as store:
        assert [r.run_id for r in store.runs()] == ["new-a"]
    assert main(["prune", "--older-than", "30d", "--store", str(path)]) == 0
    assert "nothing removed" in capsys.readouterr().out


def test_prune_refuses_an_age_it_cannot_read_in_one_line(tmp_path, capsys):
    assert main(["prune", "--older-than", "30 days", "--store", str(tmp_path / "runs.db")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--older-than takes an age" in err


def test_prune_on_postgresql_keeps_other_runs(postgres_url, capsys):
    import time

    job = f"prune-{time.monotonic_ns()}"
    with Store.open(postgres_url) as store:
        _save(store, f"{job}-old", "2020-01-01T00:00:00+00:00", job)
        _save(store, f"{job}-new", "2099-01-01T00:00:00+00:00", job)
        others = {r.run_id for r in store.runs() if r.job_id != job}
    assert main(["prune", "--older-than", "2w", "--job", job, "--store", postgres_url]) == 0
    assert f"removed 1 runs of job {job}" in capsys.readouterr().out
    with Store.open(postgres_url, create=False) as store:
        left = {r.run_id for r in store.runs()}
    assert f"{job}-new" in left and f"{job}-old" not in left and others <= left
