"""The suite's order, for ``make test``'s two processes (pytest-xdist, one test at a time): the tests of a
second or more first, the longest first, those that mostly wait (for a process, a server) spread among
those that compute, then the short ones; and its parts (``--suite-part``), which ``make test`` runs in
processes of their own beside each other (scripts/test-suite). The seconds come from :data:`DURATIONS`,
which ``--store-durations`` (``make test-durations``) updates from a run. Its hooks are pytest's,
re-exported by ``conftest.py``."""

import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).parent / "durations.json"  # {test: [wall seconds, CPU seconds]}: TensorFlow's, and a second or more
UNTIMED_TF_SECONDS = 10.0  # what a real TensorFlow job's test not in it is expected to take
WAITING_CPU_SHARE = 0.5  # a test whose CPU is under this share of its wall time mostly waits (a process, a server)
CPU_BEGAN = pytest.StashKey[float]()
PARTS = {
    "computing": "the tests of modules that run TensorFlow, and those of a second or more that compute",
    "waiting": "the tests of a second or more that mostly wait, of modules that run no TensorFlow",
    "short": "the tests under a second, of modules that run no TensorFlow",
}


def pytest_addoption(parser):
    parser.addoption("--store-durations", action="store_true",
                     help=f"update {DURATIONS.name} with the tests run: the wall and CPU seconds of each of a second "
                          "or more (setup to teardown; the CPU its processes used), by which later runs order the tests")
    parser.addoption("--suite-part", choices=sorted(PARTS),
                     help="run one part of the suite alone: " + "; ".join(f"{name}: {what}" for name, what in PARTS.items()))


def _interleaved(first: list, second: list, seconds) -> list:
    """``first`` and ``second`` merged, each in its order, so that at every point each has gone about the same
    share of its own total ``seconds``."""
    totals = [sum(map(seconds, first)) or 1.0, sum(map(seconds, second)) or 1.0]
    merged, done, taken = [], [0.0, 0.0], [0, 0]
    lists = (first, second)
    while taken[0] < len(first) or taken[1] < len(second):
        side = 0 if taken[1] >= len(second) or (taken[0] < len(first) and done[0] / totals[0] <= done[1] / totals[1]) \
            else 1
        item = lists[side][taken[side]]
        merged.append(item)
        done[side] += seconds(item)
        taken[side] += 1
    return merged


def pytest_collection_modifyitems(config, items):
    """The tests of a second or more, the longest first, those that mostly wait (under
    :data:`WAITING_CPU_SHARE`) spread among those that compute, then the rest as collected: each process takes
    the next test as it is free, so a test that waits leaves the cores to a TensorFlow job beside it, and the
    short tests fill the end. A test :data:`DURATIONS` does not name counts :data:`UNTIMED_TF_SECONDS` if it
    runs TensorFlow, else none."""
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}

    def wall(item) -> float:
        return known[item.nodeid][0] if item.nodeid in known else UNTIMED_TF_SECONDS if item.get_closest_marker("tf") \
            else 0.0

    def waits(item) -> bool:
        return item.nodeid in known and known[item.nodeid][1] < WAITING_CPU_SHARE * known[item.nodeid][0]

    long = sorted((item for item in items if wall(item) >= 1), key=lambda item: -wall(item))
    short = [item for item in items if wall(item) < 1]
    items[:] = _interleaved([i for i in long if not waits(i)], [i for i in long if waits(i)], wall) + short
    if part := config.getoption("--suite-part"):
        with_tensorflow = {item.module.__name__ for item in items if item.get_closest_marker("tf")}

        def part_of(item) -> str:
            if item.module.__name__ in with_tensorflow:  # its module's fixtures may record a job: made once, there
                return "computing"
            return "short" if wall(item) < 1 else "waiting" if waits(item) else "computing"

        config.hook.pytest_deselected(items=[item for item in items if part_of(item) != part])
        items[:] = [item for item in items if part_of(item) == part]


def _cpu_seconds() -> float:
    """This process's CPU and that of its children it waited for."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_runtest_setup(item):
    if item.config.getoption("--store-durations"):
        item.stash[CPU_BEGAN] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if call.when == "teardown" and CPU_BEGAN in item.stash:
        report.user_properties.append(("cpu_seconds", _cpu_seconds() - item.stash[CPU_BEGAN]))


_measured: dict[str, list[float]] = {}
_runs_tensorflow: set[str] = set()


def pytest_runtest_logreport(report):
    measured = _measured.setdefault(report.nodeid, [0.0, 0.0])
    measured[0] += report.duration
    measured[1] += dict(report.user_properties).get("cpu_seconds", 0.0)
    if "tf" in report.keywords:
        _runs_tensorflow.add(report.nodeid)


def pytest_sessionfinish(session):
    config = session.config
    if config.getoption("--store-durations") and not hasattr(config, "workerinput"):  # the controller (xdist) or alone
        known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
        for test, (wall, cpu) in _measured.items():  # those run now
            known[test] = [round(wall), round(cpu)]
            if known[test][0] < 1 and test not in _runs_tensorflow:
                del known[test]
        DURATIONS.write_text(json.dumps(dict(sorted(known.items())), indent=0) + "\n")
