"""The CLI's contract: exit codes, one-line errors, JSON schema, run/runs/show/rm."""

import json
import sqlite3
import statistics
import sys

import pytest

from tensorgauge.cli import main
from tensorgauge.store import Store

PY = sys.executable


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_run_records_a_plain_python_job_and_passes_its_exit_code(store_path, tmp_path, capsys):
    out, own = tmp_path / "run.json", tmp_path / "own.txt"
    code = ("import json, sys, time\nt = time.time()\nwhile time.process_time() < 0.6: sum(range(1000))\n"
            f"open({str(own)!r}, 'w').write(json.dumps([time.process_time(), time.time() - t]))\nsys.exit(3)")
    assert main(["run", "--name", "spin", "--json", str(out), "--", PY, "-c", code]) == 3
    doc = json.loads(out.read_text())
    assert doc["schema"] == "tensorgauge.run/1" and doc["name"] == "spin" and doc["exit_code"] == 3
    assert doc["complete"] is True and doc["signal"] is None and doc["command"][:2] == [PY, "-c"]
    cpu, spun = json.loads(own.read_text())  # the job's own count: a loaded machine stretches the wall time, not this
    assert doc["wall_seconds"] >= spun
    summary = doc["summary"]
    assert cpu <= summary["cpu_seconds"] < cpu + 2.0 and summary["rss_peak_bytes"] > 1 << 20
    assert 0.0 < summary["cores_busy_mean"] <= 1.3  # one thread spinning
    assert summary["samples"] >= 4
    assert [g["name"] for g in summary["gpu"]] == doc["env"]["host"]["gpus"]  # none without an NVIDIA driver
    assert doc["phases"] == [] and doc["findings"] == [] and doc["budget"] is None
    host = doc["env"]["host"]
    assert host["cores_logical"] >= 1 and host["cpus_allowed"] and host["ram_bytes"] > 0
    assert "run" in capsys.readouterr().err  # progress lines go to stderr


def test_samples_are_dense_and_carry_per_cpu_and_memory(store_path):
    assert main(["run", "-q", "--interval", "0.05", "--", PY, "-c", "import time; time.sleep(1)"]) == 0
    store = Store.open(store_path)
    samples = store.samples(store.run("last").run_id)
    assert len(samples) >= 12  # ~20 at 0.05 s
    gaps = [b.t - a.t for a, b in zip(samples, samples[1:])]
    assert statistics.median(gaps) < 0.08 and max(gaps) < 1.0  # the interval asked for (0.1 s by default)
    assert samples[-1].cpu_percent is not None
    assert samples[0].mem_available_bytes > 0  # machine memory: the first sample, then once a second
    span_seconds = samples[-1].t - samples[0].t
    assert 1 <= sum(s.mem_available_bytes is not None for s in samples) <= 2 + span_seconds
    assert samples[-1].threads >= 1 and samples[-1].processes == 1


def test_signal_death_gives_128_plus_n(store_path):
    assert main(["run", "-q", "--", PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]) == 137
    record = Store.open(store_path).run("last")
    assert record.signal == 9 and record.exit_code is None and record.complete and not record.oom_killed


def test_process_tree_includes_children(store_path):
    code = ("import subprocess, sys\n"
            "subprocess.run([sys.executable, '-c', 'import time\\n"
            "while time.process_time() < 1.5: pass'])")  # 1.5 s of CPU, however busy the machine
    assert main(["run", "-q", "--", PY, "-c", code]) == 0
    store = Store.open(store_path)
    record = store.run("last")
    assert max(s.processes for s in store.samples(record.run_id)) == 2
    assert record.cpu_seconds_total > 1.2  # the child's CPU counts


@pytest.mark.parametrize("argv, message", [
    (["run"], "nothing to run"),
    (["run", "--"], "nothing to run"),
    (["run", "--", "no-such-command-xyz"], "command not found: no-such-command-xyz"),
    (["run", "--", "./no/such/file"], "command not found"),
    (["run", "--interval", "0", "--", "true"], "interval must be between"),
    (["run", "--interval", "fast", "--", "true"], "not a number of seconds"),
    (["show", "nope"], "no run store"),
    (["bogus"], "invalid choice"),
    (["run", "--max-memory", "0", "--", "true"], "more than zero"),
    (["run", "--max-memory", "150%", "--", "true"], "between 0% and 100%"),
    (["run", "--max-memory", "4XB", "--", "true"], "unknown unit 'XB'"),
    (["run", "--max-memory=-2GiB", "--", "true"], "is not a size"),
    (["run", "--max-memory", "10MiB", "--", "true"], "the interpreter itself needs"),
    (["run", "--max-cpus", "512", "--", "true"], "more than the"),
    (["run", "--max-cpus", "0", "--", "true"], "at least 0.01 CPUs"),
    (["run", "--max-cpus", "1e-300", "--", "true"], "at least 0.01 CPUs"),
    (["run", "--max-memory", "1GiB", "--checkpoint", "/proc/nope", "--", "true"], "--checkpoint: cannot make"),
    (["run", "--stop-grace", "nan", "--", "true"], "grace period must be between"),
    (["compare", "nope.json", "last"], "no run store"),
    (["export", "last"], "the following arguments are required: -o/--output"),
    (["import", "/no/such/bundle.json"], "cannot read /no/such/bundle.json"),
    (["devices", "/no/such/model.keras"], "no such file or directory"),
])
def test_bad_input_is_one_line_and_exit_2(store_path, capsys, argv, message):
    assert main(argv) == 2
    assert message in one_line_error(capsys)
    assert not store_path.exists()  # nothing was created for a failed command


def test_unknown_run_and_rm(store_path, capsys):
    assert main(["run", "-q", "--name", "keep", "--", "true"]) == 0
    assert main(["run", "-q", "--name", "drop", "--", "true"]) == 0
    capsys.readouterr()
    assert main(["show", "zzz"]) == 2
    assert "no run 'zzz'" in one_line_error(capsys)
    assert main(["rm", "drop", "zzz"]) == 2  # nothing removed when one ref is bad
    one_line_error(capsys)
    assert len(Store.open(store_path).runs()) == 2
    assert main(["rm", "drop"]) == 0
    assert [r.name for r in Store.open(store_path).runs()] == ["keep"]


def test_corrupt_store_is_refused_and_not_damaged(tmp_path, capsys):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"\x00garbage" * 64)
    for verb, *rest in (["runs"], ["show", "x"], ["run", "-q", "--", "true"]):
        assert main([verb, "--store", str(bad), *rest]) == 2
        assert "not a usable tensorgauge database" in one_line_error(capsys)
    assert bad.read_bytes() == b"\x00garbage" * 64


def test_unwritable_store(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", "--store", str(blocker / "runs.db"), "--", "true"]) == 2
    assert "cannot create the store's folder" in one_line_error(capsys)


def test_runs_show_and_json_to_stdout(store_path, capsys):
    assert main(["runs"]) == 0
    assert "No runs recorded yet" in capsys.readouterr().out
    assert main(["run", "-q", "--name", "listed", "--", PY, "-c", "print('hi')"]) == 0
    capsys.readouterr()
    assert main(["runs"]) == 0
    listing = capsys.readouterr().out
    assert "listed" in listing and "exit 0" in listing
    assert main(["show", "listed", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["name"] == "listed" and doc["exit_code"] == 0
    assert main(["show", "listed"]) == 0
    text = capsys.readouterr().out
    assert doc["run_id"] in text and "No TensorFlow phases" in text


def test_concurrent_writer_does_not_break_reads(store_path):
    assert main(["run", "-q", "--", "true"]) == 0
    conn = sqlite3.connect(store_path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_failing_store_stops_recording_not_the_job(store_path, capsys, monkeypatch):
    from tensorgauge.errors import StoreError
    from tensorgauge.store import Store as RealStore

    def full_disk(self, *args, **kwargs):
        raise StoreError("database or disk is full")

    monkeypatch.setattr(RealStore, "add", full_disk)
    assert main(["run", "--", PY, "-c", "import time, sys; time.sleep(0.3); sys.exit(4)"]) == 4
    err = capsys.readouterr().err
    assert "warning: the store" in err and "disk is full" in err and "Traceback" not in err
    record = RealStore.open(store_path).run("last")
    assert record.exit_code == 4 and record.complete
    assert record.samples_lost == record.samples_taken > 0 and "disk is full" in record.recording_error
    assert main(["show", "last"]) == 0
    assert f"recording: 0 of {record.samples_taken} samples stored" in capsys.readouterr().out


def test_env_fingerprint(capsys):
    assert main(["env", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["schema"] == "tensorgauge.env/1"
    assert env["host"]["cores_allowed"] > 0
    assert not env["host"]["gpus"] or env["host"]["nvidia_driver"]  # GPUs are listed only where a driver is
    assert env["job"]["python"] == sys.version.split()[0] and env["job"]["affinity_cpus"] >= 1
    assert main(["env"]) == 0
    assert "host.cores_allowed" in capsys.readouterr().out


def test_diagnose_under_a_tf_config_warns_of_tensorflows_crash(store_path, capsys, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}}')
    assert main(["run", "--diagnose", "--", PY, "-c", "pass"]) == 0
    assert "crashed a worker as that window ended" in " ".join(capsys.readouterr().err.split())  # folded at 132
    assert main(["run", "-q", "--diagnose", "--", PY, "-c", "pass"]) == 0
    assert capsys.readouterr().err == ""  # -q: nothing of tensorgauge's own
