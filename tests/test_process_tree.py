"""The real process tree source against psutil and the kernel, on live processes."""

import os
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from tensorgauge.sources.process_tree import ProcfsProcessTree, descendants, read_stat


def test_read_stat_agrees_with_psutil():
    cpu, threads, rss = read_stat(os.getpid())
    proc = psutil.Process()
    t = proc.cpu_times()
    assert cpu == pytest.approx(t.user + t.system + t.children_user + t.children_system, abs=0.05)
    assert threads == proc.num_threads()
    assert rss == pytest.approx(proc.memory_info().rss, rel=0.05)
    assert read_stat(2 ** 22 + 12345) is None  # no such process


def test_command_names_with_spaces_and_parentheses(tmp_path):
    odd = tmp_path / "odd ) name ("
    shutil.copy(sys.executable, odd)
    proc = subprocess.Popen([str(odd), "-c", "import time; time.sleep(5)"])
    try:
        time.sleep(0.2)
        stat = read_stat(proc.pid)
        assert stat is not None and stat[1] == 1 and stat[2] > 1 << 20
    finally:
        proc.kill()
        proc.wait()


def test_tree_finds_grandchildren_and_sums_them():
    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(5)'])\n"
            "time.sleep(5)")
    root = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.5)
        assert len(descendants(root.pid)) == 1
        reading = ProcfsProcessTree(root.pid).read()
        assert reading.processes == 2 and reading.threads >= 2 and reading.rss_bytes > 2 << 20
        assert reading.read_bytes is not None
        assert ProcfsProcessTree(root.pid).read(io=False).read_bytes is None
        uss, pss = ProcfsProcessTree(root.pid).read_private()
        assert 0 < uss <= pss
    finally:
        for child in psutil.Process(root.pid).children(recursive=True):
            child.kill()
        root.kill()
        root.wait()


def test_tree_of_an_ended_process_is_none():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert ProcfsProcessTree(proc.pid).read() is None
