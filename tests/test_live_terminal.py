"""``run --live`` in a terminal: the job's own output scrolls above the panel instead of being
overwritten by it. Checked on a real terminal emulator (tmux, its screen read back with
``capture-pane``), on pseudo-terminals (what the job sees, its exit code, ``-q`` and no ``--live``
leaving the job the terminal itself), and piece by piece."""

import io
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from tensorgauge.live.view import LiveView
from tensorgauge.model import RunRecord
from tensorgauge.monitoring.job_output import JobOutput, LineSplitter, shown

# What a Keras fit prints, without TensorFlow: epochs, a progress bar redrawn with carriage returns,
# a line on stderr, then the job's last line.
EPOCHS = """\
import sys, time
for epoch in range(1, 4):
    print(f"Epoch {epoch}/3", flush=True)
    for step in range(1, 11):
        sys.stdout.write(f"\\r{step}/10 [{'=' * step}{'.' * (10 - step)}] - loss: {1 / (epoch * step):.4f}")
        sys.stdout.flush()
        time.sleep(0.03)
    sys.stdout.write(" - done\\n")
    print(f"note on stderr {epoch}", file=sys.stderr, flush=True)
print("the job's last line", flush=True)
"""
TMUX = shutil.which("tmux")


def test_a_redrawn_line_shows_its_last_state():
    assert shown("\r1/10 [=.........]\r2/10 [==........]") == "2/10 [==........]"
    assert shown("3/10 [===]\r") == "3/10 [===]"  # a carriage return alone erases nothing
    assert shown("abc\b\bX") == "aX"
    assert shown("plain") == "plain"


def test_lines_split_across_reads_and_multibyte_characters():
    splitter = LineSplitter()
    assert splitter.feed(b"Epoch 1/3\n1/10") == ["Epoch 1/3"]
    assert splitter.partial == "1/10"
    assert splitter.feed(b"\r2/10 \xe2\x94") == [] and splitter.partial == "2/10 "  # half of '━'
    assert splitter.feed(b"\x81 done\nlast") == ["2/10 \u2501 done"]
    assert splitter.end() == ["last"] and splitter.end() == []


def set_size(fd: int, width: int, rows: int = 30) -> None:
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, width, 0, 0))


def test_the_job_writes_to_a_terminal_of_the_real_ones_size_in_order():
    master, terminal = os.openpty()  # the terminal the panel is drawn on
    set_size(terminal, 100)
    lines, partials = [], []
    output = JobOutput(lines.extend, partials.append, (1, 2), terminal)
    child = subprocess.Popen([sys.executable, "-c", "import os, sys, time\n"
                              "print(sys.stdout.isatty(), sys.stderr.isatty(), os.get_terminal_size().columns)\n"
                              "for i in range(3):\n"
                              "    print('out', i, flush=True); print('err', i, file=sys.stderr, flush=True)\n"
                              "sys.stdout.write('\\r5/10\\r6/10'); sys.stdout.flush()\n"
                              "deadline = time.monotonic() + 30\n"
                              "while os.get_terminal_size().columns == 100 and time.monotonic() < deadline:\n"
                              "    time.sleep(0.02)\n"
                              "print(); print('resized to', os.get_terminal_size().columns)\n"
                              "sys.exit(3)"], **output.popen_args())
    output.start()
    deadline = time.monotonic() + 30.0
    while "6/10" not in partials and time.monotonic() < deadline:  # the job has read its size, and writes on
        time.sleep(0.02)
    set_size(terminal, 90)  # the user widens or narrows the window: the job's terminal follows
    assert child.wait(timeout=30) == 3
    output.close()
    os.close(master)
    os.close(terminal)
    assert lines == ["True True 100", "out 0", "err 0", "out 1", "err 1", "out 2", "err 2", "6/10", "resized to 90"]
    assert "6/10" in partials and partials[-1] == ""  # drawn as the line being written, then cleared


def test_a_job_is_never_held_up_when_its_lines_cannot_be_printed():
    """Printing fails (stderr closed under the monitor): the terminal is still read, so the job's
    writes never block; it writes 4 MiB, far more than a terminal buffers."""
    def broken(lines):
        raise OSError("stderr closed")

    master, terminal = os.openpty()
    output = JobOutput(broken, lambda text: None, (1, 2), terminal)
    child = subprocess.Popen([sys.executable, "-c", "import sys\nfor _ in range(65536): print('x' * 63)"],
                             **output.popen_args())
    output.start()
    assert child.wait(timeout=60) == 0
    output.close()
    os.close(master)
    os.close(terminal)


def test_live_view_prints_the_jobs_lines_above_the_panel_and_draws_its_current_line():
    out = io.StringIO()
    view = LiveView(Console(file=out, force_terminal=True, width=120))
    view.start(RunRecord(run_id="run-1", command=["x"], started_at="2026", env={"host": {"cores_allowed": 2.0}}))
    view.job_lines(["Epoch 1/3", "\x1b[1m10/10\x1b[0m done"])
    view.job_lines(["a bell\x07 and a C1 CSI\x9b2J, dropped"])
    view.job_partial("3/10 [===.......]")
    view.live.refresh()
    view.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert text.index("Epoch 1/3") < text.index("10/10 done") < text.rindex("3/10 [===.......]") < text.rindex("run ")
    assert "a bell and a C1 CSI2J, dropped" in text and "\x07" not in out.getvalue()


def run_in_pty(args: list[str], env: dict) -> tuple[int, str]:
    """``tensorgauge ARGS`` with stdin, stdout and stderr a pseudo-terminal: its exit code and what it wrote."""
    master, slave = os.openpty()
    child = subprocess.Popen([sys.executable, "-m", "tensorgauge", *args], stdin=slave, stdout=slave, stderr=slave,
                             env=env, start_new_session=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return child.wait(timeout=60), b"".join(chunks).decode(errors="replace")


TTY_NAMES = "import os, sys; print('ttys', os.ttyname(0), os.ttyname(1), os.ttyname(2), flush=True); sys.exit(5)"


@pytest.mark.parametrize("flags", [["--live"], ["--live", "-q"], [], ["-q"]])
def test_only_live_passes_the_job_output_through_and_exit_codes_stand(store_path, flags):
    code, text = run_in_pty(["run", *flags, "--", sys.executable, "-c", TTY_NAMES], dict(os.environ))
    assert code == 5
    stdin, stdout, stderr = re.search(r"ttys (\S+) (\S+) (\S+)", text).groups()
    if "--live" in flags:  # a terminal of its own, read by the monitor; stdin stays the real one
        assert stdout == stderr != stdin
    else:  # the terminal itself, as without tensorgauge
        assert stdout == stderr == stdin


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")
def test_in_tmux_the_jobs_last_line_and_the_panel_are_both_on_screen(store_path, tmp_path):
    job = tmp_path / "fit.py"
    job.write_text(EPOCHS)
    socket = f"tg-test-{os.getpid()}"
    command = (f"{sys.executable} -m tensorgauge run --live -- {sys.executable} {job}; echo EXIT=$?; sleep 60")
    tmux = [TMUX, "-L", socket, "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "35", command], check=True, env=os.environ)
    try:
        screen, deadline = "", time.monotonic() + 60
        while "EXIT=" not in screen and time.monotonic() < deadline:
            time.sleep(0.3)
            screen = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    (Path(tmp_path) / "screen.txt").write_text(screen)
    lines = screen.splitlines()
    assert "EXIT=0" in lines
    for epoch in (1, 2, 3):
        assert f"Epoch {epoch}/3" in lines and f"note on stderr {epoch}" in lines
        assert f"10/10 [==========] - loss: {1 / (epoch * 10):.4f} - done" in lines
    assert lines.index("Epoch 1/3") < lines.index("the job's last line") < lines.index("EXIT=0")
    frames = [i for i, line in enumerate(lines) if re.match(r"run +\d{8}-\d{6}-\w+ ", line)]
    assert len(frames) == 1, screen  # one panel, not a pile of old frames
    panel = lines[frames[0]:]
    assert any(line.startswith("cores ") for line in panel) and any(line.startswith("phase ") for line in panel)
    assert lines.index("the job's last line") < frames[0]  # the job's output above the panel
