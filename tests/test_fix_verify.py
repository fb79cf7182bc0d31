"""``tensorgauge fix`` on real runs of tests/jobs/fixable.py (copied into a folder of the test's own): the patch
at the sites the hook recorded, --verify's reruns and their judgement, --apply with the original kept, a
second fix with nothing left to do, and a file changed since the run refused."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("libcst")
JOB = Path(__file__).parent / "jobs" / "fixable.py"


def tg(tg_cmd, *args, cwd=None):
    return subprocess.run([*tg_cmd, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture
def job(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(JOB, folder / "train.py")
    return folder


def recorded(tg_cmd, job, name, *args):
    done = tg(tg_cmd, "run", "-q", "--name", name, "--", sys.executable, "train.py", *args, cwd=job)
    assert done.returncode == 0, done.stderr


def fixes(tg_cmd, job, *args) -> dict:
    done = tg(tg_cmd, "fix", *args, "--json", "-", cwd=job)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_an_input_bound_run_is_patched_verified_applied_and_then_has_nothing_left(store_path, tg_cmd, job):
    recorded(tg_cmd, job, "input")
    doc = fixes(tg_cmd, job, "input")
    assert doc["schema"] == "tensorgauge.fix/1"
    proposed = {f["fix"]: f for f in doc["fixes"] if not f["refused"]}
    assert set(proposed) == {"cache", "parallel_map", "prefetch"}
    assert proposed["cache"]["where"] == "train.py:32"
    assert "-    dataset = dataset.map(scale)  # serial: one element at a time\n" in proposed["cache"]["diff"]
    assert "+    dataset = dataset.map(scale).cache()  # serial: one element at a time\n" in proposed["cache"]["diff"]
    assert "+dataset = dataset.batch(16).prefetch(tf.data.AUTOTUNE)\n" in doc["patch"]
    assert (job / "train.py").read_text() == JOB.read_text()  # printed, not written

    verified = fixes(tg_cmd, job, "input", "--verify", "--only", "cache")
    [cache] = [f for f in verified["fixes"] if not f["refused"]]
    check = cache["verified"]
    assert check["before"]["training_seconds"] > 0 and check["after"]["training_seconds"] > 0
    assert check["gain"] == pytest.approx(check["before"]["training_seconds"] / check["after"]["training_seconds"],
                                          rel=0.01)
    assert check["training_unchanged"] is True, check["training_why"]  # seeded alike: the same losses
    assert len(check["runs"]) == 2
    runs = tg(tg_cmd, "runs", cwd=job).stdout
    assert all(run_id in runs for run_id in check["runs"])
    assert (job / "train.py").read_text() == JOB.read_text()  # the reruns' copies are gone, the file as it was
    assert sorted(p.name for p in job.iterdir()) == ["train.py"]

    applied = tg(tg_cmd, "fix", "input", "--apply", "--only", "cache", cwd=job)
    assert applied.returncode == 0, applied.stderr
    assert "patched train.py (the original kept as" in applied.stdout
    assert ".cache()" in (job / "train.py").read_text()
    assert (job / "train.py.orig").read_text() == JOB.read_text()
    again = tg(tg_cmd, "fix", "input", cwd=job)
    assert again.returncode == 0, again.stderr
    assert "applied already" in again.stdout and ".cache()" not in again.stdout.split("applied already")[0]


def test_a_run_eagerly_fit_loses_run_eagerly_and_its_finding_on_reruns_cut_at_20_steps(store_path, tg_cmd, job):
    recorded(tg_cmd, job, "eager", "--eager")
    doc = fixes(tg_cmd, job, "eager", "--verify", "--steps", "20")
    [edit] = [f for f in doc["fixes"] if not f["refused"]]
    assert edit["fix"] == "no_run_eagerly" and edit["where"] == "train.py:37"
    assert '+    model.compile(optimizer="sgd", loss="mse")\n' in edit["diff"]
    check = edit["verified"]
    assert check["finding_gone"] is True  # the rerun's fit ran a graph: no eager_execution
    assert check["training_unchanged"] is True, check["training_why"]  # within the stated tolerance
    assert "1 epoch losses" in check["training_why"]  # the fit cut in its first epoch, on both sides
    for run_id in check["runs"]:
        shown = json.loads(tg(tg_cmd, "show", run_id, "--json", cwd=job).stdout)
        assert [p["steps"] for p in shown["phases"] if p["kind"] == "fit"] == [20]
        assert shown["exit_code"] == 0


def test_a_file_changed_since_the_run_is_refused_and_left_as_it_is(store_path, tg_cmd, job):
    recorded(tg_cmd, job, "changed", "--eager")
    script = job / "train.py"
    script.write_text(script.read_text() + "\n# edited after the run\n")
    doc = fixes(tg_cmd, job, "changed")
    [refusal] = doc["fixes"]
    assert refusal["refused"] and "changed since the run" in refusal["why"]
    assert tg(tg_cmd, "fix", "changed", "--apply", cwd=job).returncode == 0
    assert script.read_text().endswith("# edited after the run\n") and not (job / "train.py.orig").exists()


def test_a_run_without_call_sites_and_bad_options_are_one_line(store_path, tg_cmd, job):
    done = tg(tg_cmd, "run", "-q", "--no-hook", "--name", "bare", "--", sys.executable, "-c", "pass", cwd=job)
    assert done.returncode == 0
    refused = tg(tg_cmd, "fix", "bare", cwd=job)
    assert refused.returncode == 2 and "has no call sites" in refused.stderr and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    bad = tg(tg_cmd, "fix", "bare", "--verify", "--repeat", "0", cwd=job)
    assert bad.returncode == 2 and "at least 1" in bad.stderr
    unknown = tg(tg_cmd, "fix", "no-such-run", cwd=job)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
