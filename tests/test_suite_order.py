"""The suite's own order (tests/suite_order.py): the tests that wait spread among those that compute, and the
durations it is ordered by, written by --store-durations."""

import json
import subprocess
import sys
from pathlib import Path

from suite_order import _interleaved

HERE = Path(__file__).parent


def test_two_lists_interleave_by_their_share_of_their_own_seconds():
    computing = [("c", s) for s in (30, 20, 10, 10, 5, 5)]  # 80 s
    waiting = [("w", s) for s in (15, 5)]  # 20 s
    merged = _interleaved(computing, waiting, lambda item: item[1])
    assert sorted(merged) == sorted(computing + waiting)
    assert [i for i in merged if i[0] == "c"] == computing and [i for i in merged if i[0] == "w"] == waiting
    # at every point, neither has gone more than one of its items ahead of the other's share
    done = {"c": 0.0, "w": 0.0}
    for kind, seconds in merged:
        done[kind] += seconds
        assert abs(done["c"] / 80 - done["w"] / 20) <= 30 / 80 + 15 / 20
    assert merged[0] == ("c", 30) and merged[1] == ("w", 15)  # the first wait beside the first long computation
    assert _interleaved([], waiting, lambda item: item[1]) == waiting
    assert _interleaved(computing, [], lambda item: item[1]) == computing


def test_store_durations_writes_the_tests_run_and_orders_by_them(tmp_path):
    """A suite of its own (the ordering plugin beside three tests): --store-durations writes each test's wall
    and CPU seconds, those under a second left out; a run takes the longest first, the one that waits beside
    the one that computes."""
    (tmp_path / "suite_order.py").write_text((HERE / "suite_order.py").read_text())
    (tmp_path / "conftest.py").write_text("from suite_order import *  # noqa: F403\n")
    (tmp_path / "test_three.py").write_text(
        "import time\n"
        "def test_quick(): pass\n"
        "def test_waits():\n    time.sleep(1.2)\n"
        "def test_computes():\n    end = time.process_time() + 3.2\n    while time.process_time() < end: pass\n"
        "def test_computes_less():\n    end = time.process_time() + 1.2\n    while time.process_time() < end: pass\n")

    def pytest(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:tensorgauge",
                               *args, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done.stdout

    pytest("--store-durations")
    durations = json.loads((tmp_path / "durations.json").read_text())
    assert set(durations) == {"test_three.py::test_waits", "test_three.py::test_computes",
                              "test_three.py::test_computes_less"}
    assert durations["test_three.py::test_waits"][1] < 1 <= durations["test_three.py::test_waits"][0]
    assert durations["test_three.py::test_computes"][1] >= 3
    # The order read from such a file (written here: a loaded machine moves what a test's CPU share reads as).
    (tmp_path / "durations.json").write_text(json.dumps({"test_three.py::test_waits": [1, 0],
                                                         "test_three.py::test_computes": [3, 3],
                                                         "test_three.py::test_computes_less": [1, 1]}))
    order = [line.split("::")[1] for line in pytest("--collect-only").splitlines() if "::" in line]
    assert order == ["test_computes", "test_waits", "test_computes_less", "test_quick"]


def test_each_test_is_in_one_part_and_a_modules_tensorflow_keeps_it_whole(tmp_path):
    """--suite-part splits a suite of its own by the durations it is given: a module with a TensorFlow test
    is computing whole (its fixtures may record a job, made once there), a test of a second or more that
    mostly waits is waiting, one that computes is computing, the rest short; every test in one part."""
    (tmp_path / "suite_order.py").write_text((HERE / "suite_order.py").read_text())
    (tmp_path / "conftest.py").write_text("from suite_order import *  # noqa: F403\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    tf: runs TensorFlow\n")
    (tmp_path / "test_fits.py").write_text("import pytest\n"
                                           "@pytest.mark.tf\ndef test_fit(): pass\n"
                                           "def test_reads_the_fit(): pass\n")
    (tmp_path / "test_plain.py").write_text("def test_waits(): pass\ndef test_computes(): pass\n"
                                            "def test_quick(): pass\n")
    (tmp_path / "durations.json").write_text(json.dumps({"test_plain.py::test_waits": [4, 1],
                                                         "test_plain.py::test_computes": [3, 3],
                                                         "test_fits.py::test_fit": [6, 5]}))

    def part(name: str) -> set[str]:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:tensorgauge",
                               "--collect-only", "--suite-part", name, str(tmp_path)], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120)
        assert done.returncode in (0, 5), done.stdout[-2000:] + done.stderr[-2000:]
        return {line.split("::")[1] for line in done.stdout.splitlines() if "::" in line}

    assert part("computing") == {"test_fit", "test_reads_the_fit", "test_computes"}
    assert part("waiting") == {"test_waits"}
    assert part("short") == {"test_quick"}
