"""The other processes' load the input A/B reads around its rounds: the job's own worker processes are the
job's, a process that is not its descendant is another's."""

import os
import subprocess
import sys
import time

import pytest

from tensorgauge.hook import machine_load

# Spins for ``seconds`` once it has made the file ``ready`` (a Python's start takes a second on a busy machine).
SPIN = "import time\nopen({ready!r}, 'w').close()\nt = time.time()\nwhile time.time() - t < {seconds}: pass\n"


def _wait_for(path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was never made"
        time.sleep(0.01)


def _over(seconds: float) -> tuple[float, float]:
    """(the job's cores, the other processes' cores) over ``seconds``."""
    begin = machine_load.mark()
    time.sleep(seconds)
    end = machine_load.mark()
    load = machine_load.other_cores(begin, end)
    assert begin is not None and end is not None and load is not None
    return (end[2] - begin[2]) / (end[0] - begin[0]), load


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc/stat (Linux)")
def test_a_busy_worker_process_is_the_jobs_and_a_stranger_is_another_load(tmp_path):
    """Held as the cores counted as the job's: the machine's other load (another test's job, a neighbour)
    moves what is left to the others, not this. Each spinner is measured once it spins: in CI, on a slow
    moment of the VM, a child still starting 0.3 s after it was launched read 0.18 cores."""
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(ready=str(tmp_path / "child"), seconds=2.0)])
    _wait_for(tmp_path / "child")  # like a data-loading worker
    own_with_child, _ = _over(1.0)
    child.wait()
    # A process this one did not start (a double fork: its parent exits, init adopts it).
    stranger = SPIN.format(ready=str(tmp_path / "stranger"), seconds=2.0)
    subprocess.run([sys.executable, "-c", "import os, subprocess, sys\n"
                    f"subprocess.Popen([sys.executable, '-c', {stranger!r}], start_new_session=True)\n"],
                   check=True)
    _wait_for(tmp_path / "stranger")
    own_with_stranger, others_with_stranger = _over(1.0)
    # The spinning child had a core, or its share of two beside two other busy processes.
    assert own_with_child > 0.4 and own_with_stranger < 0.2, (own_with_child, own_with_stranger)
    assert others_with_stranger > 0.4, others_with_stranger


def test_without_a_reading_there_is_no_load():
    assert machine_load.other_cores(None, (1.0, 2.0, 3.0)) is None
    assert machine_load.other_cores((1.0, 5.0, 1.0), (2.0, 6.5, 1.5)) == 1.0  # 1.5 busy, 0.5 the job's, in 1 s


def test_a_span_shorter_than_ten_ticks_has_no_load():
    # Both counts move in 10 ms ticks: one tick over 15 ms would read as 0.65 cores.
    short = machine_load.MIN_SPAN_SECONDS * 0.9
    assert machine_load.other_cores((1.0, 5.0, 1.0), (1.0 + short, 5.01, 1.0)) is None
    assert machine_load.other_cores((1.0, 5.0, 1.0), (1.0 + machine_load.MIN_SPAN_SECONDS, 5.01, 1.0)) is not None
