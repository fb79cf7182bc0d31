"""The other processes' load the input A/B reads around its rounds: the job's own worker processes are the
job's, a process that is not its descendant is another's."""

import os
import subprocess
import sys
import time

import pytest

from tensorgauge.hook import machine_load

SPIN = "import time\nt = time.time()\nwhile time.time() - t < {seconds}: pass\n"


def _over(seconds: float) -> float:
    begin = machine_load.mark()
    time.sleep(seconds)
    load = machine_load.other_cores(begin, machine_load.mark())
    assert load is not None
    return load


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc/stat (Linux)")
def test_a_busy_worker_process_is_the_jobs_and_a_stranger_is_another_load():
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=2.0)])  # like a data-loading worker
    time.sleep(0.3)
    with_child = _over(1.0)
    child.wait()
    # A process this one did not start (a double fork: its parent exits, init adopts it).
    subprocess.run([sys.executable, "-c", "import os, subprocess, sys\n"
                    f"subprocess.Popen([sys.executable, '-c', {SPIN.format(seconds=2.0)!r}], start_new_session=True)\n"],
                   check=True)
    time.sleep(0.3)
    with_stranger = _over(1.0)
    assert with_stranger - with_child > 0.5, (with_child, with_stranger)


def test_without_a_reading_there_is_no_load():
    assert machine_load.other_cores(None, (1.0, 2.0, 3.0)) is None
    assert machine_load.other_cores((1.0, 5.0, 1.0), (2.0, 6.5, 1.5)) == 1.0  # 1.5 busy, 0.5 the job's, in 1 s
