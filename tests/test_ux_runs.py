"""``tensorgauge runs`` in a store that --try-fixes and pytest --tensorgauge filled: newest first, a limit,
filters by name and job, and each run's trial runs counted (or, with --all, listed) under it."""

import subprocess
import sys

from tensorgauge.cli import main
from tensorgauge.hook.protocol import Kind
from tensorgauge.model import RunRecord
from tensorgauge.store import Store


def record(run_id, minute, name=None, parent=None, job=None):
    return RunRecord(run_id=run_id, command=["python", "train.py"], started_at=f"2026-11-26T08:{minute:02d}:00+00:00",
                     complete=True, exit_code=0, wall_seconds=1.0, name=name, parent_run_id=parent, job_id=job)


def fill(path, records):
    with Store.open(path) as store:
        for r in records:
            store.import_run(r, [], [])


def listed(capsys, store, *args):
    assert main(["runs", "--store", str(store), *args]) == 0
    return capsys.readouterr().out


def test_runs_lists_the_newest_first_up_to_a_limit_and_says_how_many_more(tmp_path, capsys):
    store = tmp_path / "runs.db"
    fill(store, [record(f"run{i:02d}", i) for i in range(25)])
    out = listed(capsys, store)
    assert out.index("run24") < out.index("run23") and "run05" in out and "run04" not in out  # 20 by default
    assert "5 older runs not shown" in out
    out = listed(capsys, store, "--limit", "3")
    assert [f"run{i}" in out for i in (24, 23, 22, 21)] == [True, True, True, False] and "22 older runs" in out
    everything = listed(capsys, store, "--limit", "0")
    assert "run00" in everything and "not shown" not in everything


def test_runs_picks_by_name_and_by_job(tmp_path, capsys):
    store = tmp_path / "runs.db"
    fill(store, [record("a1", 1, name="nightly resnet", job="job-7"), record("a2", 2, name="try-fixes: baseline"),
                 record("a3", 3, name="nightly bert", job="job-8")])
    out = listed(capsys, store, "--name", "nightly")
    assert "a1" in out and "a3" in out and "a2" not in out
    out = listed(capsys, store, "--name", "try-fixes: *")
    assert "a2" in out and "a1" not in out
    assert "a3" in listed(capsys, store, "--job", "job-8") and "a1" not in listed(capsys, store, "--job", "job-8")
    assert "No runs match." in listed(capsys, store, "--name", "nothing like it")
    assert main(["runs", "--store", str(store), "--limit", "-1"]) == 2  # one line, no traceback
    assert "must be 0 or more" in capsys.readouterr().err


def test_trial_runs_are_counted_under_their_parent_and_listed_with_all(tmp_path, capsys):
    store = tmp_path / "runs.db"
    fill(store, [record("base", 1, name="try-fixes: baseline"),
                 *[record(f"fix{i}", 2 + i, name=f"try-fixes: {fix}", parent="base")
                   for i, fix in enumerate(("parallel_map", "prefetch", "cache"))],
                 record("later", 9)])
    out = listed(capsys, store)
    assert "base" in out and "fix0" not in out and "└ 3 trial runs" in out and "runs --all" in out
    expanded = listed(capsys, store, "--all")
    lines = expanded.splitlines()
    rows = [next(i for i, line in enumerate(lines) if name in line) for name in ("later", "base", "fix0", "fix1", "fix2")]
    assert rows == sorted(rows)  # newest first; the trials under their parent, in the order they ran
    assert "└ fix0" in expanded


FAKE_FIT = f"""
from tensorgauge.hook.channel import channel
channel().emit({Kind.FIT_CONFIG!r}, backend="tensorflow", dataset=True, run_eagerly=False, jit_compile="False")
channel().emit({Kind.TRY_WINDOW!r}, step_seconds=[0.01] * 30)
"""


def test_try_fixes_runs_name_the_baseline_as_their_parent(tmp_path, capsys):
    """A job that reports a fit with a tf.data input (no TensorFlow): three fixes are timed, each a run."""
    store = tmp_path / "runs.db"
    job = tmp_path / "job.py"
    job.write_text(FAKE_FIT)
    assert main(["run", "--try-fixes", "--store", str(store), "--", sys.executable, str(job)]) == 0
    with Store.open(store) as opened:
        runs = opened.runs()
    base = next(r for r in runs if r.name == "try-fixes: baseline")
    fixes = [r for r in runs if r is not base]
    assert len(fixes) == 3 and {r.parent_run_id for r in fixes} == {base.run_id} and base.parent_run_id is None
    capsys.readouterr()
    out = listed(capsys, store)
    assert "└ 3 trial runs" in out and fixes[0].run_id not in out


TESTS = """
def test_one():
    assert True

def test_two():
    assert True

def test_three():
    assert True
"""


def test_a_pytest_sessions_tests_are_counted_under_its_first_tests_run(tmp_path):
    store = tmp_path / "runs.db"
    (tmp_path / "test_three.py").write_text(TESTS)
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tensorgauge",
                               "--tensorgauge-store", str(store), "test_three.py"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stdout
    tg = [sys.executable, "-m", "tensorgauge", "runs", "--store", str(store)]
    out = subprocess.run(tg, capture_output=True, text=True, timeout=120).stdout
    assert out.count("pytest test_three.py") == 2 and out.count("└ 2 trial runs") == 2  # names are cut at 24
    everything = subprocess.run([*tg, "--all"], capture_output=True, text=True, timeout=120).stdout
    assert everything.count("pytest test_three.py") == 6
