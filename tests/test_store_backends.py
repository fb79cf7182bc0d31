"""Both store back ends hold the same runs (SQLite always; PostgreSQL where a server is
given), and many monitors writing into one store at once lose no sample."""

import subprocess
import sys

import pytest

from tensorgauge.errors import StoreError
from tensorgauge.model import Event, RunRecord, Sample
from tensorgauge.store import Store


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    return request.getfixturevalue("postgres_url")


def test_round_trip_on_both_back_ends(location):
    store = Store.open(location)
    run_id = f"rt-{id(store):x}"
    record = RunRecord(run_id=run_id, command=["python", "x.py"], started_at="2026-11-26T01:00:00+00:00",
                       name=f"name-{run_id}", env={"host": {"cores_allowed": 2.0}}, job_id="job-a")
    store.save_run(record)
    samples = [Sample(t=0.1 * i, cpu_seconds=0.05 * i, cores_busy=0.5, rss_bytes=(3 << 30) + i, threads=4,
                      processes=1, cpu_percent=[50.0, 10.0]) for i in range(5)]
    events = [Event(t=0.2, pid=9, kind="phase_begin", data={"id": 1, "name": "fit"}),
              Event(t=0.2, pid=9, kind="phase_end", data={"id": 1})]
    store.add(run_id, samples, events)
    record.complete = True
    store.save_run(record)  # a second write replaces the record
    again = Store.open(location, create=False)
    assert again.run(run_id) == record and again.run(f"name-{run_id}").job_id == "job-a"
    assert again.samples(run_id) == samples  # 3 GiB RSS survives: 64-bit columns
    assert again.samples(run_id, 0.15, 0.35) == samples[2:4]  # a window, read from the run's chunk
    assert len(again.sample_blobs(run_id)) == 1  # the finished run's rows, chunked
    again.save_analysis(run_id, "k1", {"phases": [{"name": "fit"}]})
    assert again.analysis(run_id) == ("k1", {"phases": [{"name": "fit"}]})
    assert [e.to_dict() for e in again.events(run_id)] == [e.to_dict() for e in events]  # in insertion order
    assert run_id in [r.run_id for r in again.runs()]
    with pytest.raises(StoreError, match="already in store"):
        again.import_run(record, samples, events)
    again.delete_run(run_id)
    assert again.samples(run_id) == [] and run_id not in [r.run_id for r in again.runs()]


@pytest.mark.skipif(__import__("importlib").util.find_spec("psycopg") is None,
                    reason="the [postgres] extra (psycopg) is not installed")
def test_a_postgres_url_that_does_not_answer(capsys):
    from tensorgauge.cli import main

    assert main(["runs", "--store", "postgresql://nobody:secret@127.0.0.1:9/none"]) == 2
    err = capsys.readouterr().err
    assert "cannot connect to postgresql://nobody:***@127.0.0.1:9/none" in err and "secret" not in err


JOB = "import time\nt = time.time()\nwhile time.time() - t < 1.5: time.sleep(0.01)\n"


def test_eight_concurrent_runs_lose_no_sample(location):
    procs = [subprocess.Popen([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", location,
                               "--name", f"concurrent-{i}", "--interval", "0.05", "--", sys.executable, "-c", JOB],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(8)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err for _, err in outputs]
    assert not any("warning" in err for _, err in outputs), [err for _, err in outputs]
    store = Store.open(location, create=False)
    runs = {r.name: r for r in store.runs() if (r.name or "").startswith("concurrent-")}
    newest = sorted(runs.values(), key=lambda r: r.started_at)[-8:]
    assert len(newest) == 8
    for record in newest:
        stored = store.samples(record.run_id)
        assert record.complete and record.samples_taken >= 10  # 1.5 s at 0.05 s: ~30 on an idle machine
        assert len(stored) == record.samples_taken  # every sample taken is in the store
