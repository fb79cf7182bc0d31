"""The other processes' load the input A/B reads around its rounds: the job's own worker processes are the
job's, a process that is not its descendant is another's."""

import os
import subprocess
import sys
import time

import psutil
import pytest

from tensorgauge.hook import machine_load

# Spins for ``seconds`` once it has written its pid to the file ``ready`` (a Python's start takes a second on a
# busy machine).
SPIN = ("import os, time\nwith open({ready!r}, 'w') as f: f.write(str(os.getpid()))\nt = time.time()\n"
        "while time.time() - t < {seconds}: pass\n")


def _pid_once_written(path, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while not (path.exists() and (text := path.read_text())):
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.01)
    return int(text)


def _over(seconds: float, pid: int) -> tuple[float, float, float]:
    """(the job's cores, the other processes' cores, the spinner ``pid``'s own cores) over ``seconds``."""
    spinner = psutil.Process(pid)
    begin, spun = machine_load.mark(), sum(spinner.cpu_times()[:2])
    time.sleep(seconds)
    end, spun = machine_load.mark(), sum(spinner.cpu_times()[:2]) - spun
    load = machine_load.other_cores(begin, end)
    assert begin is not None and end is not None and load is not None
    wall = end[0] - begin[0]
    return (end[2] - begin[2]) / wall, load, spun / wall


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc/stat (Linux)")
def test_a_busy_worker_process_is_the_jobs_and_a_stranger_is_another_load(tmp_path):
    """Held as the cores counted as the job's: the machine's other load (another test's job, a neighbour)
    moves what is left to the others, not this. Each spinner is measured once it spins, against the cores
    the kernel gave it: beside a hog and another test's job it may get well under one."""
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(ready=str(tmp_path / "child"), seconds=3.0)])
    own_with_child, _, child_cores = _over(1.0, _pid_once_written(tmp_path / "child"))  # a data-loading worker
    child.wait()
    # A process this one did not start (a double fork: its parent exits, init adopts it).
    stranger = SPIN.format(ready=str(tmp_path / "stranger"), seconds=3.0)
    subprocess.run([sys.executable, "-c", "import os, subprocess, sys\n"
                    f"subprocess.Popen([sys.executable, '-c', {stranger!r}], start_new_session=True)\n"],
                   check=True)
    own_with_stranger, others_with_stranger, stranger_cores = _over(1.0, _pid_once_written(tmp_path / "stranger"))
    assert child_cores > 0.1 and stranger_cores > 0.1, (child_cores, stranger_cores)
    assert own_with_child == pytest.approx(child_cores, abs=0.1), (own_with_child, child_cores)
    assert own_with_stranger < min(0.1, stranger_cores / 2), (own_with_stranger, stranger_cores)
    assert others_with_stranger >= stranger_cores - 0.1, (others_with_stranger, stranger_cores)


def test_without_a_reading_there_is_no_load():
    assert machine_load.other_cores(None, (1.0, 2.0, 3.0)) is None
    assert machine_load.other_cores((1.0, 5.0, 1.0), (2.0, 6.5, 1.5)) == 1.0  # 1.5 busy, 0.5 the job's, in 1 s


def test_a_span_shorter_than_ten_ticks_has_no_load():
    # Both counts move in 10 ms ticks: one tick over 15 ms would read as 0.65 cores.
    short = machine_load.MIN_SPAN_SECONDS * 0.9
    assert machine_load.other_cores((1.0, 5.0, 1.0), (1.0 + short, 5.01, 1.0)) is None
    assert machine_load.other_cores((1.0, 5.0, 1.0), (1.0 + machine_load.MIN_SPAN_SECONDS, 5.01, 1.0)) is not None
