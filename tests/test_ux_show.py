"""``show`` as a first-time user meets it: piped into another program, after a job that raised, after
--find-batch-size; and ``bench``'s short times."""

import io
import json
import subprocess
import sys

from rich.console import Console

from tensorgauge.model import Event, RunRecord, Sample
from tensorgauge.store import Store

MiB = 1 << 20


def stored_run(path, run_id="r1", events=(), exit_code=1, name=None):
    """A run of 5 s in the store at ``path``, with ``events``, recorded without a job."""
    samples = [Sample(t=i * 0.1, cpu_seconds=i * 0.1, cores_busy=1.0, rss_bytes=(100 + i * 20) * MiB, threads=4,
                      processes=1) for i in range(50)]
    record = RunRecord(run_id=run_id, command=["python", "train.py"], started_at="2026-11-26T08:00:00+00:00",
                       complete=True, exit_code=exit_code, wall_seconds=5.0, name=name,
                       env={"host": {"cores_allowed": 2}})
    with Store.open(path) as store:
        store.import_run(record, samples, list(events))


OOM = [Event(0.5, 1, "phase_begin", {"id": 1, "name": "fit", "phase_kind": "fit"}),
       Event(4.0, 1, "phase_end", {"id": 1, "error": "ResourceExhaustedError"}),
       Event(4.1, 1, "job_error", {"type": "ResourceExhaustedError", "module": "tensorflow.python.framework.errors_impl",
                                   "message": "OOM when allocating tensor with shape[4096,4096,64] and type float"})]


def show(store, *args):
    """``tensorgauge show`` in a process of its own, its stdout a pipe."""
    return subprocess.run([sys.executable, "-m", "tensorgauge", "show", *args, "--store", str(store)],
                          capture_output=True, text=True, timeout=120)


def test_show_piped_leaves_every_finding_line_whole(tmp_path):
    store = tmp_path / "runs.db"
    stored_run(store, events=OOM)
    shown = show(store, "r1")
    assert shown.returncode == 0, shown.stderr
    findings = json.loads(show(store, "r1", "--json").stdout)["findings"]
    fixes = [f"fix: {f['fix']}" for f in findings]
    assert any(len(fix) > 140 for fix in fixes)  # longer than the 132 columns piped output had
    lines = [line.strip() for line in shown.stdout.splitlines()]
    for fix in fixes:
        assert fix in lines  # one line: never '663.2 \nMiB', never a command cut in two


def test_show_names_the_exception_that_ended_the_job(tmp_path):
    store = tmp_path / "runs.db"
    stored_run(store, events=[Event(1.0, 1, "job_error", {"type": "ValueError", "module": "builtins",
                                                          "message": "could not convert string to float: 'n/a'"})])
    out = show(store, "r1").stdout
    assert "ended    by ValueError: could not convert string to float: 'n/a'" in out
    stored_run(store, run_id="r2", events=OOM)
    header = show(store, "r2").stdout.split("Phases")[0]
    assert "ended    by ResourceExhaustedError: OOM when allocating" in header and "out of memory" in header


SEARCH = {"budget_bytes": 4096 * MiB, "target_bytes": int(0.8 * 4096 * MiB), "original_batch_size": 32,
          "recommended_batch_size": 256, "largest_within_budget": 256, "per_example_bytes": 2 * MiB,
          "fixed_bytes": 300 * MiB, "how": "the fitted line, verified by a trial", "seconds": 118.0,
          "caveat": "A larger batch takes fewer, larger steps."}


def batch_search_events():
    events, t = [], 0.5
    for i, batch in enumerate((32, 64, 128, 256)):
        events += [Event(t, 1, "phase_begin", {"id": i + 1, "name": f"batch size trial {batch}", "phase_kind": "custom"}),
                   Event(t + 1.0, 1, "phase_end", {"id": i + 1}),
                   Event(t + 1.0, 1, "batch_trial", {"batch_size": batch, "peak_bytes": (300 + 2 * batch) * MiB,
                                                     "steps": 6, "step_seconds": 0.01 * batch / 32,
                                                     "examples_per_second": 3200.0, "seconds": 1.0, "error": None})]
        t += 1.0
    return events + [Event(t, 1, "batch_search", SEARCH)]


def test_show_of_a_batch_size_search_prints_its_recommendation_and_calls_the_trials_trials(tmp_path):
    store = tmp_path / "runs.db"
    stored_run(store, events=batch_search_events(), exit_code=0)
    out = show(store, "r1").stdout
    assert "Recommended batch size: 256" in out and "Batch size trials" in out
    assert "your own phases" not in out
    assert "the batch-size trials (--find-batch-size)" in out


def test_bench_shows_a_time_under_a_second_in_ms():
    from tensorgauge.render.compare import render_bench

    console = Console(file=io.StringIO(), width=120)
    render_bench(console, {"save and load": {"value": 0.045, "unit": "s", "seconds": 0.045, "group": "io"},
                           "numpy matmul": {"value": 12.345, "unit": "GFLOP/s", "seconds": 0.2, "group": "numpy"}},
                 "r1")
    text = console.file.getvalue()
    assert "45.0 ms" in text and "0.0 s" not in text and "12.3 GFLOP/s" in text


def test_the_benchmark_suites_progress_shows_a_time_under_a_second_in_ms():
    from tensorgauge.bench.suite import _result

    assert _result(0.045, "s") == "45.0 ms" and _result(2.5, "s") == "2.5 s"
