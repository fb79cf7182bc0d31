"""The monitor as a separate process: signals, a killed monitor, the hook's side effects."""

import json
import os
import signal
import subprocess
import sys
import time

from tensorgauge.store import Store

PY = sys.executable


def wait_for(path, timeout=20.0):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_sigterm_to_the_monitor_is_forwarded_and_the_run_finished(store_path, tg_cmd, tmp_path):
    ready, got = tmp_path / "ready", tmp_path / "got"
    job = ("import signal, sys, time, pathlib\n"
           f"def on_term(*a): pathlib.Path({str(got)!r}).write_text('term'); sys.exit(0)\n"
           "signal.signal(signal.SIGTERM, on_term)\n"
           f"pathlib.Path({str(ready)!r}).write_text('')\n"
           "time.sleep(60)\n")
    monitor = subprocess.Popen([*tg_cmd, "run", "-q", "--", PY, "-c", job])
    wait_for(ready)
    monitor.send_signal(signal.SIGTERM)
    assert monitor.wait(timeout=20) == 0
    assert got.read_text() == "term"
    record = Store.open(store_path).run("last")
    assert record.complete and record.exit_code == 0


def test_killed_monitor_keeps_samples_marks_incomplete_and_spares_the_job(store_path, tg_cmd, tmp_path):
    ready, done = tmp_path / "ready", tmp_path / "done"
    job = ("import time, pathlib\n"
           f"pathlib.Path({str(ready)!r}).write_text('')\n"
           "time.sleep(1.5)\n"
           f"pathlib.Path({str(done)!r}).write_text('finished')\n")
    monitor = subprocess.Popen([*tg_cmd, "run", "-q", "--", PY, "-c", job])
    wait_for(ready)
    store = Store.open(store_path)
    committed = 0
    for _ in range(100):  # until the monitor has committed a few samples (every 0.5 s)
        time.sleep(0.05)
        committed = len(store.samples(store.run("last").run_id))
        if committed >= 3:
            break
    monitor.kill()
    monitor.wait()
    wait_for(done)  # the job was not taken down with the monitor
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
