"""The monitor as a separate process: signals, a killed monitor, the hook's side effects."""

import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import time

import pytest
from conftest import alive, text_once_written

from tensorgauge.errors import UnknownRunError
from tensorgauge.store import Store

PY = sys.executable


def wait_for(path, timeout=20.0):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("wrapped", [False, True])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT])
def test_a_signal_to_the_monitor_reaches_the_whole_tree_and_the_run_finishes(store_path, tg_cmd, tmp_path, sig,
                                                                             wrapped):
    """Also under a wrapper (`sh -c`, `bash train.sh`): the real job is a grandchild and gets it too."""
    ready, got = tmp_path / "ready", tmp_path / "got"
    job = ("import signal, sys, time, pathlib\n"
           f"def on_signal(n, f): pathlib.Path({str(got)!r}).write_text(str(n)); sys.exit(0)\n"
           f"signal.signal({int(sig)}, on_signal)\n"
           f"pathlib.Path({str(ready)!r}).write_text('')\n"
           "time.sleep(60)\n")
    command = ["sh", "-c", f"{PY} -c {shlex.quote(job)}; exit 0"] if wrapped else [PY, "-c", job]
    monitor = subprocess.Popen([*tg_cmd, "run", "-q", "--", *command])
    wait_for(ready)
    monitor.send_signal(sig)
    code = monitor.wait(timeout=20)
    assert got.read_text() == str(int(sig))  # the real job got it, whoever its parent
    assert code == 0 or (wrapped and code == 128 + sig)  # the shell itself may die of it
    record = Store.open(store_path).run("last")
    assert record.complete


@pytest.mark.parametrize("keep", [False, True])
def test_killed_monitor_keeps_samples_marks_incomplete_and_takes_the_tree_down(store_path, tg_cmd, tmp_path, keep):
    """SIGKILL of the monitor: the job's whole tree (a shell and its child) is gone within a second,
    unless --keep-job-on-failure; what was committed stays, the run is marked incomplete."""
    ready, done, pids = tmp_path / "ready", tmp_path / "done", tmp_path / "pids"
    folder = tmp_path / "folder"
    inner = ("import os, time, pathlib\n"
             f"pathlib.Path({str(folder)!r}).write_text(os.path.dirname(os.environ['TENSORGAUGE_EVENTS']))\n"
             f"pathlib.Path({str(pids)!r}).write_text(str(os.getpid()))\n"
             f"pathlib.Path({str(ready)!r}).write_text('')\n"
             "time.sleep(5)\n"  # the samples committed (every 0.5 s) before it ends, on a slow machine too
             f"pathlib.Path({str(done)!r}).write_text('finished')\n")
    wrapper = f"{PY} -c {shlex.quote(inner)}; echo after"  # the real job is a grandchild of the monitor
    monitor = subprocess.Popen([*tg_cmd, "run", "-q", *(["--keep-job-on-failure"] if keep else []), "--",
                                "sh", "-c", wrapper])
    wait_for(ready)
    store = Store.open(store_path)
    committed = 0
    for _ in range(100):  # until the monitor has committed a few samples (every 0.5 s)
        time.sleep(0.05)
        try:
            committed = len(store.samples(store.run("last").run_id))
        except UnknownRunError:  # the writer has not saved the run's record yet
            continue
        if committed >= 3:
            break
    monitor.kill()
    monitor.wait()
    killed_at = time.monotonic()
    grandchild = int(pids.read_text())
    if keep:
        wait_for(done)  # asked to: the job was not taken down with the monitor
    else:
        while alive(grandchild) and time.monotonic() - killed_at < 1.0:
            time.sleep(0.02)
        assert not alive(grandchild), "the job outlived its monitor"
        time.sleep(1.5)
        assert not done.exists()
        assert not os.path.exists(folder.read_text())  # the run's private files (in /dev/shm) are not left
    record = store.run("last")
    assert not record.complete and record.exit_code is None
    assert len(store.samples(record.run_id)) >= committed >= 3  # nothing committed was lost
    result = subprocess.run([*tg_cmd, "show", "last", "--json"], capture_output=True, text=True)
    assert result.returncode == 0 and json.loads(result.stdout)["complete"] is False


def test_hook_imports_nothing_heavy_and_keeps_the_users_sitecustomize(store_path, tg_cmd, tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE_RAN = True\n")
    out = tmp_path / "out.json"
    job = ("import sys, json, builtins\n"
           "heavy = [m for m in ('tensorflow', 'keras', 'numpy', 'psutil', 'rich') if m in sys.modules]\n"
           f"json.dump({{'heavy': heavy, 'user_site': getattr(builtins, 'USER_SITE_RAN', False), "
           f"'hooked': 'tensorgauge.hook.imports' in sys.modules}}, open({str(out)!r}, 'w'))\n")
    env = {**os.environ, "PYTHONPATH": str(own)}
    subprocess.run([*tg_cmd, "run", "-q", "--", PY, "-c", job], env=env, check=True)
    assert json.loads(out.read_text()) == {"heavy": [], "user_site": True, "hooked": True}


def test_no_hook_leaves_the_job_alone(store_path, tg_cmd, tmp_path):
    out = tmp_path / "out"
    job = f"import sys; open({str(out)!r}, 'w').write(str('tensorgauge' in sys.modules))"
    subprocess.run([*tg_cmd, "run", "-q", "--no-hook", "--", PY, "-c", job], check=True)
    assert out.read_text() == "False"


def test_python_dash_m_entry_point(tg_cmd):
    result = subprocess.run([*tg_cmd, "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("tensorgauge ")


def test_a_deleted_working_folder_and_a_closed_stderr_do_not_end_the_monitor(store_path, tg_cmd, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    job = "import time, sys; time.sleep(0.5); sys.exit(3)"
    code = ("import os, subprocess, sys\n"
            f"os.chdir({str(gone)!r}); os.rmdir({str(gone)!r})\n"
            f"sys.exit(subprocess.call({[*tg_cmd, 'run', '--', PY, '-c', job]!r}, stderr=subprocess.DEVNULL "
            "if False else open(os.devnull, 'w')))\n")
    assert subprocess.run([PY, "-c", code], timeout=60).returncode == 3
    closed = subprocess.run(f"{shlex.join([*tg_cmd, 'run', '--', PY, '-c', job])} 2>&-", shell=True, timeout=60)
    assert closed.returncode == 3  # stderr closed: the job's code, not a crash of ours
    runs = Store.open(store_path).runs()
    assert [r.exit_code for r in runs] == [3, 3] and runs[0].cwd is None


def test_malformed_event_lines_from_the_job_are_skipped_and_counted(store_path, tg_cmd):
    job = ("import json, os, time\n"
           "fd = os.open(os.environ['TENSORGAUGE_EVENTS'], os.O_WRONLY | os.O_APPEND)\n"
           "for line in ('{\"t\": NaN, \"kind\": \"phase_begin\"}', '{\"t\": 1, \"kind\": \"phase_begin\", \"id\": [1]}',"
           " '{\"t\": 1, \"kind\": \"steps\", \"seconds\": \"many\"}', '[1, 2]', 'garbage'):\n"
           "    os.write(fd, (line + '\\n').encode())\n"
           "time.sleep(0.3)\n"
           "raise SystemExit(5)\n")
    result = subprocess.run([*tg_cmd, "run", "--", PY, "-c", job], capture_output=True, text=True, timeout=60)
    assert result.returncode == 5 and "Traceback" not in result.stderr
    record = Store.open(store_path).run("last")
    assert record.events_skipped == 5 and record.exit_code == 5  # the two that are not even JSON objects too
    shown = subprocess.run([*tg_cmd, "show", "last"], capture_output=True, text=True)
    assert "5 lines from the job were not valid events" in shown.stdout


def test_runs_shows_every_id_whole_beside_a_long_name(store_path, tg_cmd):
    subprocess.run([*tg_cmd, "run", "-q", "--name", "n" * 200, "--", "true"], check=True)
    subprocess.run([*tg_cmd, "run", "-q", "--", "true"], check=True)
    listing = subprocess.run([*tg_cmd, "runs"], capture_output=True, text=True).stdout
    for record in Store.open(store_path).runs():
        assert record.run_id in listing


def test_run_files_go_to_ram_only_where_it_has_room(tmp_path):
    from tensorgauge.monitoring.run_files import private_parent

    assert private_parent(str(tmp_path), min_free=0) == str(tmp_path)
    assert private_parent(str(tmp_path), min_free=1 << 62) is None  # no room: the disk's temporary directory
    assert private_parent(str(tmp_path / "missing"), min_free=0) is None


def _started(tg_cmd, tmp_path, job: str, *options: str):
    ready = tmp_path / "ready"
    monitor = subprocess.Popen([*tg_cmd, "run", "-q", *options, "--", PY, "-c",
                                job.replace("READY", repr(str(ready)))])
    return monitor, int(text_once_written(ready, monitor))


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_period(store_path, tg_cmd, tmp_path):
    job = ("import os, pathlib, signal, time\n"
           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "pathlib.Path(READY).write_text(str(os.getpid()))\n"
           "time.sleep(60)\n")
    monitor, _ = _started(tg_cmd, tmp_path, job, "--stop-grace", "1")
    sent = time.monotonic()
    monitor.send_signal(signal.SIGTERM)
    assert monitor.wait(timeout=20) == 128 + signal.SIGKILL
    assert 0.9 <= time.monotonic() - sent < 8  # the grace period, then SIGKILL
    assert Store.open(store_path).run("last").signal == signal.SIGKILL


def test_a_stopped_job_gets_the_signal_it_was_sent(store_path, tg_cmd, tmp_path):
    """kill -STOP on the job, then SIGTERM to tensorgauge: the job is woken to take it (it used to hang)."""
    got = tmp_path / "got"
    job = ("import os, pathlib, signal, sys, time\n"
           f"signal.signal(signal.SIGTERM, lambda n, f: (pathlib.Path({str(got)!r}).write_text('term'), sys.exit(3)))\n"
           "pathlib.Path(READY).write_text(str(os.getpid()))\n"
           "time.sleep(60)\n")
    monitor, pid = _started(tg_cmd, tmp_path, job)
    os.kill(pid, signal.SIGSTOP)
    time.sleep(0.2)
    monitor.send_signal(signal.SIGTERM)
    assert monitor.wait(timeout=20) == 3 and got.read_text() == "term"


@pytest.mark.parametrize("cgroup", [True, False])
def test_a_setsid_child_is_reached_by_a_signal_to_tensorgauge(store_path, tg_cmd, tmp_path, monkeypatch, cgroup):
    """A child in a session of its own is outside the job's process group: reached through the cgroup, or
    the job's descendants without one."""
    if not cgroup:
        monkeypatch.setenv("TENSORGAUGE_NO_CGROUP", "1")
    job = ("import os, pathlib, subprocess, time\n"
           "child = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
           "pathlib.Path(READY).write_text(str(child.pid))\n"
           "child.wait()\n")
    monitor, child = _started(tg_cmd, tmp_path, job)
    monitor.send_signal(signal.SIGTERM)
    monitor.wait(timeout=20)
    deadline = time.monotonic() + 2
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(child), "the setsid child outlived the SIGTERM"


def test_a_job_flooding_its_events_keeps_its_samples_and_a_readable_run(store_path, tg_cmd):
    """300,000 event lines at once (about 30 MB): the samples keep their time, the run ends with the
    job, and the store keeps at most what a run keeps."""
    from tensorgauge.monitoring.recorder import MAX_EVENTS

    job = ("import os, time\n"
           "fd = os.open(os.environ['TENSORGAUGE_EVENTS'], os.O_WRONLY | os.O_APPEND)\n"
           "line = '{\"t\": %r, \"pid\": 1, \"kind\": \"phase_begin\", \"id\": 1, \"name\": \"x\", "
           "\"phase_kind\": \"fit\"}\\n' % time.monotonic()\n"
           "os.write(fd, (line * 300_000).encode())\n"
           "time.sleep(3)\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert subprocess.run([*tg_cmd, "run", "-q", "--", PY, "-c", job], timeout=120).returncode == 0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    store = Store.open(store_path)
    record = store.run("last")
    assert record.samples_taken >= 0.9 * record.wall_seconds / record.interval_seconds, record
    # The run's end is not held for the flood: it reads at most 8 MiB more, not the 30 MB, and keeps 50,000
    # events. Held as the CPU the tool and its job used (6.9 s here, most of it reading the flood and analysing
    # the 50,000 phases kept), which a loaded machine stretches less than the wall time (9-13 s for a 3.2 s job).
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 15
    assert record.events_dropped and record.events_dropped >= 300_000 - MAX_EVENTS
    assert len(store.events(record.run_id)) <= MAX_EVENTS + 10


def test_events_written_after_the_job_truncates_its_events_file_are_read(store_path, tg_cmd):
    job = ("import json, os, time\n"
           "path = os.environ['TENSORGAUGE_EVENTS']\n"
           "def say(i):\n"
           "    with open(path, 'a') as f:\n"
           "        f.write(json.dumps({'t': time.monotonic(), 'pid': 1, 'kind': 'phase_begin', 'id': i, "
           "'name': f'p{i}', 'phase_kind': 'fit'}) + '\\n')\n"
           "say(1); time.sleep(0.5)\n"
           "open(path, 'w').close(); say(2); time.sleep(0.5)\n")
    assert subprocess.run([*tg_cmd, "run", "-q", "--", PY, "-c", job], timeout=60).returncode == 0
    store = Store.open(store_path)
    names = [e.data["name"] for e in store.events(store.run("last").run_id) if e.kind == "phase_begin"]
    assert names == ["p1", "p2"]


def test_a_long_imported_id_and_name_leave_each_runs_outcome_whole():
    import io

    from rich.console import Console

    from tensorgauge.model import RunRecord
    from tensorgauge.render.terminal import render_runs

    records = [RunRecord(run_id="r" * 64, name="n" * 200, command=["python", "x" * 300],
                         started_at="2026-11-26T08:00:00+00:00", complete=True, signal=9, wall_seconds=1.0),
               RunRecord(run_id="short", command=["true"], started_at="2026-11-26T08:00:00+00:00", complete=True,
                         exit_code=0, oom_killed=True, wall_seconds=1.0)]
    console = Console(file=io.StringIO(), width=160)  # a 64-character id took the width of every other column
    render_runs(console, records, {})
    text = console.file.getvalue()
    assert "r" * 20 in text and "1.00 s" in text and "signal 9" in text and "exit 0 (OOM killer)" in text
