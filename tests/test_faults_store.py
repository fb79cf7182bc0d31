"""Hostile bundles and stores (issue 34): what a crafted file may make the tool decode, numbers
too long to convert, planted folders and stores, secrets in store locations. Each command runs
as its own process: its exit code, its one line, and (for the decoded size) its peak memory."""

import base64
import json
import os
import struct
import subprocess
import sys
import time

import pytest
import zstandard

from tensorgauge.analyse.run_report import RunReport, analysis_key
from tensorgauge.cli import main
from tensorgauge.model import RunRecord
from tensorgauge.series import SCALARS, SampleSeries
from tensorgauge.store import Store

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRAFTED_SAMPLES, CRAFTED_CPUS, CRAFTED_CHUNKS = 100_000, 640, 3  # each chunk within a header's bounds


# Launches the command from a small process and prints its peak RSS: a child forked from the test's own
# process starts its ru_maxrss at this process's RSS (Linux keeps a forked mm's high-water mark across
# exec), 436 MB once TensorFlow had been imported here by an earlier test.
LAUNCHER = """
import os, resource, sys
limit = int(sys.argv[1])
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.execv(sys.executable, [sys.executable, "-m", "tensorgauge", *sys.argv[2:]])
_, status, usage = os.wait4(pid, 0)
sys.__stdout__.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss << 10}")
"""


def tensorgauge(*args: str, memory_limit: int = 3 << 30) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in bytes) of ``python -m tensorgauge ARGS`` in a process of its own
    (its address space capped, so that a regression fails with MemoryError, not by filling the machine)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, str(memory_limit), *args], capture_output=True,
                          env=env, timeout=600)
    code, peak = (int(x) for x in done.stdout.split())
    return code, done.stderr.decode(errors="replace"), peak


def zero_chunk(samples: int, cpus: int) -> bytes:
    """A chunk of ``samples`` samples of ``cpus`` CPUs, every value 0: ~20 KB that decode to 0.5 GB."""
    columns = [[name, "delta0", samples * 8] for name in SCALARS]
    columns += [["cpu_percent", "delta0", samples * cpus * 8], ["cpu_count", "delta0", samples * 8]]
    head = json.dumps({"count": samples, "cpus": cpus, "gpu_index": [], "gpu_names": [],
                       "columns": columns}).encode()
    writer = zstandard.ZstdCompressor().compressobj()
    total = sum(c[2] for c in columns)
    zeros = bytes(1 << 20)
    frame = b"".join(writer.compress(zeros) for _ in range(total >> 20))
    frame += writer.compress(bytes(total & ((1 << 20) - 1))) + writer.flush()
    return b"TGC1" + struct.pack("<I", len(head)) + head + frame


def crafted_record() -> RunRecord:
    return RunRecord(run_id="zeros", command=["true"], started_at="2026-01-01T00:00:00+00:00",
                     wall_seconds=5.0, complete=True)


def test_a_bundle_that_decodes_past_the_bound_is_refused_before_decoding(tmp_path):
    """91 KB of chunks within their headers' bounds decoded to 4 GiB (``import`` 4.1 GiB; 8 chunks
    here took 52 s and 8.6 GB): every header is read first and the total bounded."""
    blob = base64.b64encode(zero_chunk(CRAFTED_SAMPLES, CRAFTED_CPUS)).decode()
    path = tmp_path / "zeros.json"
    path.write_text(json.dumps({"schema": "tensorgauge.bundle/2", "run": crafted_record().to_dict(),
                                "sample_chunks": [blob] * CRAFTED_CHUNKS, "events": []}))
    assert path.stat().st_size < 100_000
    code, err, peak = tensorgauge("import", "--store", str(tmp_path / "s.db"), str(path))
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "decode to 1.5 GiB (300,000 samples x 640 CPUs), more than a bundle's may (1.0 GiB)" in err
    assert peak < 400 << 20  # not the 1.5 GB it declares
    assert not Store.open(tmp_path / "s.db").runs()


def test_a_shown_window_is_bounded_by_what_its_chunks_decode_to(tmp_path):
    """A run whose chunks put 300,000 samples of 640 CPUs in its first 5 s: ``show --from 0 --to 5``
    took 39 s and 3.1 GB (here, with 8 chunks, 224 s until the kernel killed it at 23 GB)."""
    record = crafted_record()
    store = Store.open(tmp_path / "s.db")
    analysis = (analysis_key(record), RunReport.build(record, SampleSeries.empty(), []).analysis())
    blob = zero_chunk(CRAFTED_SAMPLES, CRAFTED_CPUS)
    store.import_run(record, SampleSeries.empty(), [], analysis=analysis,
                     chunk_rows=[(0.0, 5.0, CRAFTED_SAMPLES, 0, blob)] * CRAFTED_CHUNKS)
    store.close()
    for command in (["show", "zeros", "--from", "0", "--to", "5"],
                    ["report", "zeros", "--from", "0", "--to", "5", "-o", str(tmp_path / "r.html")]):
        code, err, peak = tensorgauge(*command, "--store", str(tmp_path / "s.db"))
        assert code == 2, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert ("samples from 0 s to 5 s decode to more than 128.0 MiB (at least 100,000 samples x 640 CPUs, "
                "500.5 MiB)") in err
        assert "shorter stretch" in err
        assert peak < 400 << 20
    assert tensorgauge("show", "zeros", "--store", str(tmp_path / "s.db"))[0] == 0  # the run itself still shows


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A short recorded run ``work``, its bundle, and a named baseline of it."""
    folder = tmp_path_factory.mktemp("recorded")
    store = folder / "runs.db"
    assert main(["run", "-q", "--store", str(store), "--name", "work", "--", sys.executable, "-c",
                 "import time; time.sleep(0.3)"]) == 0
    assert main(["export", "--store", str(store), "work", "-o", str(folder / "work.json")]) == 0
    assert main(["baseline", "--store", str(store), "save", "base", "work"]) == 0
    return store, folder / "work.json", next((folder / "baselines").glob("base*.json"))


@pytest.mark.parametrize("digits, field, said", [
    (5000, "exit_code", "holds an integer too long to be a figure of a run (more than 4300 digits)"),
    (400, "wall_seconds", "run.wall_seconds is not a number"),  # parsed, but past any float
])
def test_an_integer_of_thousands_of_digits_is_refused_by_import_check_and_compare(recorded, tmp_path, capsys,
                                                                                  digits, field, said):
    """A 5,000-digit integer gave a traceback from all three (and check's exit 1 said "regression")."""
    store, bundle, baseline = recorded
    doc = json.loads(bundle.read_text())
    doc["run"][field] = 10 ** (digits - 1)
    sys.set_int_max_str_digits(0)  # the test writes it; tensorgauge reads it under Python's default bound
    try:
        text = json.dumps(doc)
    finally:
        sys.set_int_max_str_digits(4300)
    hostile = tmp_path / "hostile.json"
    hostile.write_text(text)
    original = baseline.read_text()
    baseline.write_text(text)
    try:
        for command in (["import", str(hostile)], ["check", "work", "--against", "base"], ["compare", "work",
                                                                                             str(hostile)]):
            capsys.readouterr()
            assert main([*command, "--store", str(store if command[0] != "import" else tmp_path / "i.db")]) == 2
            err = capsys.readouterr().err
            assert said in err and len(err.strip().splitlines()) == 1, (command, err)
    finally:
        baseline.write_text(original)


NOBODY = 65534  # another user, as root can make one
JOB = "open('ran', 'w').close()"


def _record(store, *options):
    return main(["run", "-q", "--store", str(store), *options, "--", sys.executable, "-c", JOB])


@pytest.mark.parametrize("plant", ["world-writable", "another user's", "another user's -wal"])
def test_a_store_planted_in_a_shared_folder_is_not_recorded_into(tmp_path, monkeypatch, capsys, plant):
    """Another user pre-created the store as a 0666 file: the runs went into it."""
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "shared" / "runs.db"
    store.parent.mkdir()
    Store.open(store).close()  # a valid store, as a planted one would be
    planted = store if plant != "another user's -wal" else tmp_path / "shared" / "runs.db-wal"
    planted.touch()
    if plant == "world-writable":
        planted.chmod(0o666)
    else:
        if os.geteuid() != 0:
            pytest.skip("making a file another user's takes root")
        os.chown(planted, NOBODY, NOBODY)
    assert _record(store) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "give a store of your own with --store" in err
    assert ("can be written by other users (mode 0666)" if plant == "world-writable" else
            "belongs to another user") in err
    assert not (tmp_path / "ran").exists()
    assert main(["runs", "--store", str(store)]) == 0  # reading it is still fine


@pytest.mark.parametrize("plant", ["symlink", "0777 folder", "another user's folder", "another user's checkpoints"])
def test_a_planted_default_checkpoint_folder_is_refused(tmp_path, monkeypatch, capsys, plant):
    """Another user planted ``checkpoints/<key>`` beside a shared store (a link to their folder, or a
    folder all can write): the job's checkpoint went there."""
    from tensorgauge.commands._recording import default_checkpoint_dir

    monkeypatch.chdir(tmp_path)
    store = tmp_path / "shared" / "runs.db"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    folder = default_checkpoint_dir(store.parent, [sys.executable, "-c", JOB])
    folder.parent.mkdir(parents=True)
    if plant == "symlink":
        folder.symlink_to(theirs)
    elif plant == "0777 folder":
        folder.mkdir()
        folder.chmod(0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("making a folder another user's takes root")
        folder.mkdir()
        os.chown(folder if plant == "another user's folder" else folder.parent, NOBODY, NOBODY)
    assert _record(store, "--max-memory", "1GiB") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "remove it, or give --checkpoint DIR" in err
    assert {"symlink": "is a symbolic link", "0777 folder": "can be written by other users (mode 0777)"}.get(
        plant, "belongs to another user (nobody)") in err
    assert not (tmp_path / "ran").exists() and not list(theirs.iterdir())


def test_a_checkpoint_folder_of_another_user_is_refused_and_ones_own_is_used(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "runs.db"
    assert _record(store, "--max-memory", "1GiB") == 0  # the default folder, made by the tool: used
    made = next((tmp_path / "checkpoints").iterdir())
    assert made.is_dir() and made.stat().st_mode & 0o777 == 0o700
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: others can write, but not take or replace what is not theirs
    assert _record(store, "--max-memory", "1GiB", "--checkpoint", str(sticky)) == 0
    if os.geteuid() != 0:
        pytest.skip("making a folder another user's takes root")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.chown(foreign, NOBODY, NOBODY)
    capsys.readouterr()
    assert _record(store, "--max-memory", "1GiB", "--checkpoint", str(foreign)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert f"--checkpoint: {foreign} belongs to another user (nobody)" in err


@pytest.mark.parametrize("url", [
    "postgresql://me:s3cretpw@[bad/runs",  # libpq quotes the whole URI
    "postgresql://me:s3c@retpw@127.0.0.1:1/runs",  # an '@' in the password: libpq takes 'retpw@...' as the host
    "postgresql://me:s3c/retpw@127.0.0.1:1/runs",  # a '/' in it: libpq takes 'me' as the host
    "postgresql://me:s3cret%zzpw@127.0.0.1:1/runs",  # a bad escape: libpq quotes the password
    "postgresql://me@127.0.0.1:1/runs?password=s3cretpw&bogus=1",
])
def test_a_malformed_postgres_url_never_shows_its_password(url, capsys):
    """libpq's error for a malformed URL echoed it whole, password included."""
    pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")
    for command in (["runs"], ["show", "x"], ["run", "-q", "--", "true"]):
        assert main([command[0], "--store", url, *command[1:]]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "***" in err, err
        for piece in ("s3c", "retpw", "zzpw"):
            assert piece not in err, err


def test_a_libpq_key_value_string_is_refused_not_made_a_file(tmp_path, monkeypatch, capsys):
    """``host=... password=...`` was taken as a SQLite path: a file named with the password."""
    monkeypatch.chdir(tmp_path)
    conninfo = "host=127.0.0.1 port=1 dbname=runs password=s3cretpw"
    assert main(["run", "-q", "--store", conninfo, "--", sys.executable, "-c", JOB]) == 2
    monkeypatch.setenv("TENSORGAUGE_STORE", conninfo)
    assert main(["runs"]) == 2
    err = capsys.readouterr().err
    assert err.count("give a postgresql://USER@HOST/DB URL") == 2 and len(err.strip().splitlines()) == 2
    assert "s3cretpw" not in err
    assert os.listdir(tmp_path) == []  # no store made, no job run
    assert main(["runs", "--store", str(tmp_path / "host=a.db")]) == 0  # a file name with '=' in it is a path


def test_rm_of_a_run_still_recording_is_refused_and_the_run_goes_on(tmp_path, capsys):
    """``rm`` of a live run ended its recording half-way ("no run ... (the run is stored ...)")."""
    store, ready = tmp_path / "runs.db", tmp_path / "ready"
    job = f"import pathlib, time; pathlib.Path({str(ready)!r}).write_text(''); time.sleep(2)"
    monitor = subprocess.Popen([sys.executable, "-m", "tensorgauge", "run", "-q", "--store", str(store), "--name",
                                "live", "--", sys.executable, "-c", job], env=dict(os.environ, PYTHONPATH=ROOT),
                               stderr=subprocess.PIPE, text=True)
    for _ in range(400):
        if ready.exists() and Store.open(store, create=False).runs():
            break
        time.sleep(0.05)
    assert main(["rm", "--store", str(store), "live"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is still being recorded" in err and "stop it first" in err
    _, monitor_err = monitor.communicate(timeout=60)
    assert monitor.returncode == 0 and monitor_err == ""
    (record,) = Store.open(store).runs()
    assert record.complete and record.name == "live"
    assert main(["rm", "--store", str(store), "live"]) == 0  # ended: removed
    assert Store.open(store).runs() == []


def test_a_run_name_of_bytes_no_encoding_reads_is_shown_reported_exported_and_removed(tmp_path):
    """``--name $'\\xff'`` (argv decoded with surrogateescape): show, report, export and rm raised
    UnicodeEncodeError."""
    store = str(tmp_path / "runs.db")
    env = dict(os.environ, PYTHONPATH=ROOT)

    def tg(*args):
        return subprocess.run([sys.executable, "-m", "tensorgauge", *args], env=env, capture_output=True,
                              cwd=tmp_path)

    assert tg("run", "-q", "--store", store, "--name", b"\xff", "--", sys.executable, "-c", "pass").returncode == 0
    for command in (["show"], ["show", "--json", "-"], ["report", "-o", "r.html"], ["export", "-o", "e.json"]):
        done = tg(command[0], "--store", store, b"\xff", *command[1:])
        assert done.returncode == 0 and b"Traceback" not in done.stderr, (command, done.stderr)
    assert json.loads((tmp_path / "e.json").read_text())["run"]["name"] == "\udcff"
    assert "\\xff" in tg("show", "--store", store, b"\xff").stdout.decode()  # shown escaped
    missing = tg("show", "--store", store, b"\xfe")
    assert missing.returncode == 2 and missing.stderr.decode().count("\n") == 1 and b"no run" in missing.stderr
    assert tg("rm", "--store", store, b"\xff").returncode == 0
    assert Store.open(store).runs() == []


def _sibling_fits(count: int, wall: float = 8.87) -> RunReport:
    """A run whose job opened ``count`` fit phases side by side and closed none (as a job writing its own
    events can: the store keeps the first 50,000 of them)."""
    from tensorgauge.model import Event, Sample

    events = [Event(t=0.1 + i * 1e-5, pid=1, kind="phase_begin",
                    data={"id": i + 1, "name": "fit", "phase_kind": "fit", "cpu": 0.0, "rss": 1000})
              for i in range(count)]
    samples = [Sample(t=0.1 * i, cpu_seconds=0.05 * i, cores_busy=0.5, rss_bytes=10 << 20, threads=1, processes=1)
               for i in range(int(wall * 10) + 1)]
    record = RunRecord(run_id="siblings", command=["python", "x.py"], started_at="2026-01-01T00:00:00+00:00",
                       wall_seconds=wall, exit_code=0, complete=True, cpu_seconds_total=0.05 * int(wall * 10))
    return RunReport.build(record, samples, events)


def test_many_sibling_phases_give_figures_within_the_run():
    """500k sibling phases gave "fit (122h22m, 4963118% of the run)" and "the fit ran None steps"."""
    import io

    from rich.console import Console

    from tensorgauge.render.terminal import render_run

    out = io.StringIO()
    render_run(Console(file=out, width=200), _sibling_fits(50_000))
    text = out.getvalue()
    assert "Most of the time went to fit (8.77 s, 99% of the run, 4.35 CPU-s)." in text
    assert "None" not in text and "no step of the fit was recorded (the A/B waits for 11)" in text


def test_fits_of_two_workers_side_by_side_count_their_time_once_and_their_cpu_each():
    from tensorgauge.analyse.account import account
    from tensorgauge.model import Phase, Summary

    fits = [Phase("fit", "fit", 1.0, 9.0, None, pid, cpu_seconds=6.0, cores_busy_peak=1.0) for pid in (1, 2)]
    summary = Summary(cpu_seconds=13.0, cores_busy_mean=1.3, cores_busy_peak=2.0, rss_peak_bytes=1 << 30,
                      uss_peak_bytes=None, threads_peak=4, processes_peak=2, samples=100)
    lines = account(fits, summary, 10.0, 2.0)
    assert "Most of the time went to fit (8.00 s, 80% of the run, 12.00 CPU-s)." in lines


def test_a_real_postgres_store_is_named_without_its_password(postgres_url, tmp_path):
    """Recording into a server's store (it takes any password): every line names it with the password masked."""
    user_part, host_part = postgres_url.split("://", 1)[1].split("@", 1)
    url = f"postgresql://{user_part}:s3c%40re%2Ftpw@{host_part}"  # the password s3c@re/tpw, spelt as a URL must
    done = subprocess.run([sys.executable, "-m", "tensorgauge", "run", "--store", url, "--name", "masked", "--",
                           sys.executable, "-c", "pass"], env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                          text=True)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "recording run" in said and "***" in said, said
    assert "s3c" not in said and "tpw" not in said, said
