"""``tensorgauge run`` as a first-time user meets it: --find-batch-size's progress, --backends with a backend
missing, the extras the pytest plugin and the notebook magic need, and why the input split was not measured
under tensorgauge.monitor()."""

import subprocess
import sys
from pathlib import Path

import tomllib

from tensorgauge.hook.protocol import DIAGNOSE_ENV, Kind
from tensorgauge.store import Store

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20

# What the hook's batch finder reports, sent by a job without TensorFlow: two trials, then the search.
TRIALS_JOB = f"""
import time
from tensorgauge.hook.channel import channel
for batch in (32, 64):
    time.sleep(0.3)
    channel().emit({Kind.BATCH_TRIAL!r}, batch_size=batch, peak_bytes=(300 + batch) * {MiB}, steps=6,
                   step_seconds=0.01, examples_per_second=batch / 0.01, seconds=0.3, error=None)
channel().emit({Kind.BATCH_SEARCH!r}, budget_bytes=4096 * {MiB}, target_bytes=3276 * {MiB}, original_batch_size=32,
               recommended_batch_size=64, how="the trials", seconds=0.6, caveat="")
"""


def tg(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tensorgauge", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_find_batch_size_shows_a_line_per_trial_unless_quiet(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(TRIALS_JOB)
    store = str(tmp_path / "runs.db")
    done = tg("run", "--find-batch-size", "--max-memory", "4GiB", "--store", store, "--", sys.executable, str(job))
    assert done.returncode == 0, done.stderr
    assert "batch size 32: RSS peak 332.0 MiB, 3,200 examples/s" in done.stderr
    assert "batch size 64: RSS peak 364.0 MiB, 6,400 examples/s" in done.stderr
    assert "Recommended batch size: 64" in done.stdout
    quiet = tg("run", "-q", "--find-batch-size", "--max-memory", "4GiB", "--store", store, "--", sys.executable,
               str(job))
    assert quiet.returncode == 0 and quiet.stderr == "" and "Recommended batch size: 64" in quiet.stdout


def test_backends_checks_every_backend_before_running_any(tmp_path):
    """The job's Python imports nothing beyond the standard library (-S): TensorFlow and JAX are both missing
    for it, though installed for tensorgauge's own; nothing runs and nothing is stored."""
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    python.chmod(0o755)
    marker = tmp_path / "ran"
    job = tmp_path / "job.py"
    job.write_text(f"open({str(marker)!r}, 'w').close()\n")
    store = tmp_path / "runs.db"
    done = tg("run", "--backends", "tensorflow,jax", "--store", str(store), "--", str(python), str(job))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "tensorflow is not installed for the job's Python (pip install 'tensorgauge[tensorflow]')" in done.stderr
    assert "jax is not installed for the job's Python (pip install 'tensorgauge[jax]')" in done.stderr
    assert not marker.exists() and not store.exists()


def test_the_pytest_plugin_and_the_notebook_magic_have_extras_and_the_docs_name_them():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("pytest") for r in extras["pytest"])
    assert any(r.startswith("ipython") for r in extras["notebook"])
    install = (ROOT / "docs" / "getting-started.md").read_text().split("## Record a job")[0]
    assert "`pytest`" in install and "`notebook`" in install
    missing = subprocess.run([sys.executable, "-c", "import sys; sys.modules['pytest'] = None; "
                              "import tensorgauge.pytest_plugin"], capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "pip install 'tensorgauge[pytest]'" in missing.stderr


def _fit_without_a_diagnosis():
    """Events of a fit of 20 steps (more than the A/B waits for), from inside the job."""
    from tensorgauge.hook.agent import agent

    phase = agent().begin("fit", "fit")
    for _ in range(20):
        agent().step_begin()
        agent().step_end()
    agent().end(phase)


def test_monitor_says_the_input_split_is_not_run_in_process_not_that_a_flag_turned_it_off(tmp_path, monkeypatch):
    import tensorgauge
    from tensorgauge.analyse.run_report import RunReport

    monkeypatch.delenv(DIAGNOSE_ENV, raising=False)
    store = tmp_path / "runs.db"
    with tensorgauge.monitor(store=str(store)) as run:
        _fit_without_a_diagnosis()
    with Store.open(store) as opened:
        report = RunReport.load(opened, run.run_id)
    assert report.record.diagnosis == "in-process"
    why = report.input_split["why"]
    assert "tensorgauge.monitor()" in why and "--no-diagnose" not in why


def test_run_records_its_diagnosis_setting(tmp_path):
    store = str(tmp_path / "runs.db")
    assert tg("run", "-q", "--no-diagnose", "--store", store, "--", "true").returncode == 0
    assert tg("run", "-q", "--store", store, "--", "true").returncode == 0
    with Store.open(store) as opened:
        assert [r.diagnosis for r in opened.runs()] == ["off", "auto"]


def test_an_eager_loops_probe_says_why_it_was_skipped(monkeypatch):
    from tensorgauge.hook.eager_probe import skip_reason

    monkeypatch.delenv(DIAGNOSE_ENV, raising=False)  # as in tensorgauge.monitor()
    assert "--no-diagnose" not in skip_reason("") and "tensorgauge.monitor()" in skip_reason("")
    monkeypatch.setenv(DIAGNOSE_ENV, "off")  # as tensorgauge run --no-diagnose sets it
    assert "--no-diagnose" in skip_reason("")
