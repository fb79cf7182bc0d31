"""Signals to `tensorgauge run` that are the job's, on real processes: SIGTSTP, SIGTTIN or SIGTTOU sent to
tensorgauge stop the job, as a shell's job would stop, while tensorgauge samples on; SIGCONT to tensorgauge
resumes it. At a terminal, Ctrl-Z stops the job and gives the terminal to tensorgauge, so that Ctrl-C still
ends it. SIGUSR1 and SIGUSR2 (a scheduler's warning before a time limit) reach the job."""

import os
import signal
import subprocess
import sys
import termios
import threading
import time

import pytest
from conftest import alive, text_once_written

from tensorgauge.store import Store

PY = sys.executable
# Runs until GO exists: its end is the test's to choose.
JOB = ("import os, pathlib, time\n"
       "pathlib.Path(READY).write_text(str(os.getpid()))\n"
       "while not pathlib.Path(GO).exists():\n"
       "    time.sleep(0.02)\n")
BOUND_SECONDS = 60  # for each awaited condition, on a slow and busy machine
SAMPLES_WHILE_STOPPED = 20


def state(pid: int) -> str:
    """The process's state letter in /proc ('T': stopped); '' once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + BOUND_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"not within {BOUND_SECONDS} s: {what}"
        time.sleep(0.02)


def start(tg_cmd, tmp_path, job: str = JOB, **popen):
    """`tensorgauge run` of ``job`` (:data:`JOB`): (the monitor, the job's pid)."""
    job = job.replace("READY", repr(str(tmp_path / "ready"))).replace("GO", repr(str(tmp_path / "go")))
    monitor = subprocess.Popen([*tg_cmd, "run", "--no-hook", "--name", "held", "--", PY, "-c", job], **popen)
    return monitor, int(text_once_written(tmp_path / "ready", monitor, timeout=BOUND_SECONDS))


def stop_all(monitor, job_pid: int) -> None:
    """Whatever is left of a failed test ended (the job resumed first, so that it can die)."""
    for pid in (job_pid, monitor.pid):
        if alive(pid):
            for sig in (signal.SIGCONT, signal.SIGKILL):
                os.kill(pid, sig)
    monitor.wait()


@pytest.mark.parametrize("sig", [signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU], ids=lambda s: s.name)
def test_a_stop_signal_to_tensorgauge_stops_the_job_which_is_sampled_on_until_sigcont(store_path, tg_cmd, tmp_path,
                                                                                     sig):
    """The job stopped (state T), the monitor running and its samples arriving, with the job's CPU still;
    SIGCONT to the monitor resumes the job, and the run ends as it would have, exit 0."""
    monitor, job_pid = start(tg_cmd, tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        monitor.send_signal(sig)
        wait_until(lambda: state(job_pid) == "T", "the job stopped")
        assert state(monitor.pid) not in ("T", "")
        store = Store.open(store_path)
        run_id = store.run("held").run_id
        before = store.sample_count(run_id)
        wait_until(lambda: store.sample_count(run_id) >= before + SAMPLES_WHILE_STOPPED, "samples while stopped")
        assert state(job_pid) == "T"  # nothing resumed it
        monitor.send_signal(signal.SIGCONT)
        wait_until(lambda: state(job_pid) not in ("T", "t"), "the job resumed")
        (tmp_path / "go").write_text("")
        code = monitor.wait(timeout=BOUND_SECONDS)
    finally:
        stop_all(monitor, job_pid)
    stderr = monitor.stderr.read()
    assert code == 0, stderr
    assert f"the job is stopped ({sig.name}) and still recorded: kill -CONT {monitor.pid} resumes it" in stderr
    record = store.run(run_id)
    assert record.exit_code == 0 and record.signal is None
    # Taken while it was stopped (well after the stop was seen): its CPU time did not move.
    stopped = store.samples(run_id)[before + SAMPLES_WHILE_STOPPED // 2:before + SAMPLES_WHILE_STOPPED]
    assert len({s.cpu_seconds for s in stopped}) == 1


def in_terminal(tg_cmd, tmp_path):
    """:func:`start` with a pseudo-terminal as tensorgauge's controlling terminal (it in the foreground, as
    started from a shell): (the monitor, the job's pid, the terminal's master side, what it printed)."""
    master, slave = os.openpty()

    def own_terminal():  # in the child: a session of its own, whose controlling terminal this is
        os.setsid()
        import fcntl

        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    monitor, job_pid = start(tg_cmd, tmp_path, stdin=slave, stdout=slave, stderr=slave, preexec_fn=own_terminal)
    os.close(slave)
    printed: list[bytes] = []

    def drain():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            printed.append(data)

    threading.Thread(target=drain, daemon=True).start()
    return monitor, job_pid, master, printed


def test_ctrl_z_at_a_terminal_stops_the_job_and_ctrl_c_still_ends_it(store_path, tg_cmd, tmp_path):
    """Ctrl-Z stops the job, and the terminal is tensorgauge's while it is stopped; SIGCONT gives it back to
    the running job; after a second Ctrl-Z, Ctrl-C reaches the stopped job through tensorgauge and ends it."""
    monitor, job_pid, master, printed = in_terminal(tg_cmd, tmp_path)
    try:
        wait_until(lambda: os.tcgetpgrp(master) == job_pid, "the terminal handed to the job")
        os.write(master, b"\x1a")  # Ctrl-Z: SIGTSTP to the terminal's foreground group, the job's
        wait_until(lambda: state(job_pid) == "T", "the job stopped by Ctrl-Z")
        wait_until(lambda: os.tcgetpgrp(master) == monitor.pid, "the terminal taken back while the job is stopped")
        monitor.send_signal(signal.SIGCONT)
        wait_until(lambda: state(job_pid) not in ("T", "t") and os.tcgetpgrp(master) == job_pid,
                   "the job running again, the terminal its own")
        os.write(master, b"\x1a")
        wait_until(lambda: state(job_pid) == "T" and os.tcgetpgrp(master) == monitor.pid, "stopped again")
        os.write(master, b"\x03")  # Ctrl-C: to tensorgauge, which passes it on (with a SIGCONT)
        code = monitor.wait(timeout=BOUND_SECONDS)
    finally:
        stop_all(monitor, job_pid)
        os.close(master)
    said = b"".join(printed).decode(errors="replace")
    assert code == 128 + signal.SIGINT, said
    assert f"the job is stopped (SIGTSTP) and still recorded: kill -CONT {monitor.pid} resumes it, Ctrl-C ends it" \
        in " ".join(said.split())
    assert Store.open(store_path).run("held").signal == signal.SIGINT


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGUSR2], ids=lambda s: s.name)
def test_a_user_signal_to_tensorgauge_reaches_the_job(store_path, tg_cmd, tmp_path, sig):
    """The job's handler runs (it checkpoints, say) and the job, and the run, go on to their normal end."""
    got = tmp_path / "got"
    handler = f"import signal; signal.signal({int(sig)}, lambda n, f: pathlib.Path({str(got)!r}).write_text(str(n)))\n"
    job = JOB.replace("import os, pathlib, time\n", f"import os, pathlib, time\n{handler}")
    monitor, job_pid = start(tg_cmd, tmp_path, job, stderr=subprocess.PIPE, text=True)
    try:
        monitor.send_signal(sig)
        wait_until(got.exists, f"the job's {sig.name} handler ran")
        (tmp_path / "go").write_text("")
        code = monitor.wait(timeout=BOUND_SECONDS)
    finally:
        stop_all(monitor, job_pid)
    assert code == 0, monitor.stderr.read()
    assert got.read_text() == str(int(sig)) and Store.open(store_path).run("held").exit_code == 0
