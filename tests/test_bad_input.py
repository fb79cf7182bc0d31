"""Bad input and hostile files: one clear line and exit 2, found before the job runs, and no
stored run damaged."""

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import time

import pytest

from tensorgauge.cli import main
from tensorgauge.store import Store
from tensorgauge.store.postgres import redact

PY = sys.executable


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_an_unwritable_json_is_found_before_the_job_runs(store_path, tmp_path, capsys):
    marker = tmp_path / "ran"
    code = main(["run", "--json", str(tmp_path / "no" / "such" / "run.json"), "--", PY, "-c",
                 f"open({str(marker)!r}, 'w')"])
    assert code == 2 and "no folder" in one_line(capsys) and not marker.exists()


def test_outputs_onto_the_store_itself_are_refused(store_path, capsys):
    assert main(["run", "-q", "--name", "keep", "--", "true"]) == 0
    before = store_path.read_bytes()
    link = store_path.parent / "innocent.json"
    os.link(store_path, link)  # a hard link: the store under another name
    for command in (["export", "keep", "-o", str(store_path)], ["report", "keep", "-o", str(store_path)],
                    ["export", "keep", "-o", str(store_path) + "-wal"], ["report", "keep", "-o", str(link)],
                    ["run", "-q", "--json", str(link), "--", "true"]):
        assert main(command) == 2, command
        assert "is the run store itself" in one_line(capsys)
    assert Store.open(store_path).run("keep").name == "keep" and len(store_path.read_bytes()) == len(before)


def test_import_of_a_device_or_a_folder_is_one_line(store_path, tmp_path, capsys):
    started = time.monotonic()
    assert main(["import", "/dev/zero"]) == 2
    assert "not a regular file" in one_line(capsys) and time.monotonic() - started < 5
    assert main(["import", str(tmp_path)]) == 2
    assert "not a regular file" in one_line(capsys)


def test_a_foreign_sqlite_file_is_refused_and_left_untouched(tmp_path, capsys):
    foreign = tmp_path / "app.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    before = foreign.read_bytes()
    for command in (["runs"], ["run", "-q", "--", "true"]):
        assert main([*command[:1], "--store", str(foreign), *command[1:]]) == 2
        assert "not a tensorgauge store" in one_line(capsys)
    assert foreign.read_bytes() == before


def test_a_read_only_store_can_be_read_and_is_refused_for_recording_before_the_job_starts():
    """A store its reader may not write (a copy on a shared drive): read as it is, changed in nothing;
    `run` into it says so and exits 2 before the job starts (it used to run and lose every sample)."""
    import tempfile
    from pathlib import Path

    tmp_path = Path(tempfile.mkdtemp(prefix="tensorgauge-ro-"))  # outside pytest's private folder
    tmp_path.chmod(0o755)
    store = tmp_path / "ro" / "runs.db"
    assert main(["run", "-q", "--store", str(store), "--name", "mine", "--", "true"]) == 0
    store.chmod(0o444)
    store.parent.chmod(0o555)
    before = store.read_bytes()
    as_user: list[str] = []
    if os.geteuid() == 0:  # root may write anything: read it as an ordinary user
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv to drop to another user")
        as_user = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    try:
        result = subprocess.run([*as_user, PY, "-m", "tensorgauge", "show", "mine", "--store", str(store)],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and "mine" in result.stdout, result.stderr
        result = subprocess.run([*as_user, PY, "-m", "tensorgauge", "run", "--store", str(store), "--", "true"],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and "is read-only" in result.stderr, result.stderr
        assert "recording run" not in result.stderr and result.stderr.count("\n") == 1
        assert store.read_bytes() == before
    finally:
        store.parent.chmod(0o755)
        shutil.rmtree(tmp_path)


def test_the_store_is_private_to_its_owner(store_path):
    assert main(["run", "-q", "--", "true"]) == 0
    assert stat.S_IMODE(store_path.stat().st_mode) == 0o600


def test_a_name_that_several_runs_share_says_which_it_picked(store_path, capsys):
    for _ in range(2):
        assert main(["run", "-q", "--name", "twice", "--", "true"]) == 0
    newest = Store.open(store_path).runs()[-1].run_id
    capsys.readouterr()
    assert main(["show", "twice"]) == 0
    err = capsys.readouterr().err
    assert "2 runs are named 'twice': this is the newest, " + newest in err


def test_a_run_removed_while_recorded_stays_removed(store_path, tmp_path, tg_cmd):
    ready = tmp_path / "ready"
    job = f"import pathlib, time; pathlib.Path({str(ready)!r}).write_text(''); time.sleep(1.5)"
    monitor = subprocess.Popen([*tg_cmd, "run", "-q", "--name", "live", "--", PY, "-c", job])
    store = Store.open(store_path)
    for _ in range(200):
        if ready.exists() and any(r.name == "live" for r in store.runs()):
            break
        time.sleep(0.05)
    # `rm` refuses a run still recording (tests/test_faults_store.py); a store written by an older one, or a
    # run whose monitor went quiet for long, can lose it all the same:
    store.delete_run(next(r.run_id for r in store.runs() if r.name == "live"))
    assert monitor.wait(timeout=30) == 0
    assert [r for r in store.runs() if r.name == "live"] == []
    # Nothing of it is left: what was written before the writer saw the removal is removed at the run's end.
    assert store.conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 0
    assert store.conn.execute("SELECT COUNT(*) FROM sample_chunks").fetchone()[0] == 0


def test_a_password_is_never_printed():
    assert redact("postgresql://me:secret@db/runs") == "postgresql://me:***@db/runs"
    assert redact("postgresql://db/runs?sslmode=require&password=secret&x=1") == \
        "postgresql://db/runs?sslmode=require&password=***&x=1"


@pytest.mark.parametrize("url", [
    "postgresql://me@db/runs?sslmode=require&sslpassword=hunter22",
    "postgresql://me@db/runs?SSLPASSWORD=hunter22",
    "postgresql://me@db/runs?ssl%70assword=hunter22",  # libpq decodes the name: masked by its value
    "postgresql://me@db/runs?sslkey=/home/me/hunter22.key&x=1",
])
def test_every_secret_in_a_url_is_masked(url, capsys):
    pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")
    assert "hunter22" not in redact(url)
    main(["runs", "--store", url.replace("@db/", "@127.0.0.1:1/")])  # nothing listens: the error names the URL
    assert "hunter22" not in capsys.readouterr().err
