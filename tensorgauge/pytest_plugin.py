"""``pytest --tensorgauge``: each test recorded in its own process (``tensorgauge.monitor()``, no
subprocess), with limits set by a marker, and a summary at the end of the session.

    @pytest.mark.tensorgauge(max_memory="2GiB", max_step="30ms", max_growth_per_call="1MiB")
    def test_training(): ...

- ``max_memory``: what the test adds: its RSS peak (read every 2 ms) less the RSS at its start, so a
  limit means the same in a fat test process and a thin one (as pytest-memray limits what a test
  allocates).
- ``max_step``: the median step of every fit/evaluate/predict (or ``tensorgauge.step()`` phase) in it.
- ``max_growth_per_call``: the median rise of RSS from one fit/predict/evaluate call's end to the next
  (three calls or more).

Each test's run is stored like any other (``tensorgauge show``; ``--tensorgauge-store`` picks the store);
``tensorgauge runs`` lists a session's tests under its first test's run.
Registered as a pytest plugin (entry point ``pytest11``); inactive without ``--tensorgauge``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

try:
    import pytest
except ImportError:  # imported outside pytest, where pytest is not installed
    raise ImportError("tensorgauge's pytest plugin needs pytest: pip install 'tensorgauge[pytest]'") from None

MARKER = ("tensorgauge(max_memory=None, max_step=None, max_growth_per_call=None): limits on what the test adds "
          "to memory, its median step and its memory growth per model call, checked under --tensorgauge")


def pytest_addoption(parser) -> None:
    group = parser.getgroup("tensorgauge")
    group.addoption("--tensorgauge", action="store_true",
                    help="record each test with tensorgauge (phases, memory, steps) and check its marker's limits")
    group.addoption("--tensorgauge-store", metavar="PATH", help="the run store (default: tensorgauge's)")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", MARKER)
    config.stash[_RESULTS] = []


@dataclass
class Limits:
    max_memory_bytes: int | None = None
    max_step_seconds: float | None = None
    max_growth_per_call_bytes: int | None = None

    @classmethod
    def of(cls, marker) -> Limits:
        from tensorgauge.errors import TensorgaugeError
        from tensorgauge.monitoring.limits import parse_memory
        from tensorgauge.units import parse_offset_seconds

        kwargs = dict(marker.kwargs) if marker is not None else {}
        unknown = set(kwargs) - {"max_memory", "max_step", "max_growth_per_call"}
        if unknown:
            raise pytest.UsageError(f"tensorgauge marker: unknown limits {', '.join(sorted(unknown))}")

        def size(value, what):
            return None if value is None else value if isinstance(value, int) else parse_memory(str(value), 0, what)

        try:
            step = kwargs.get("max_step")
            if isinstance(step, str):
                step = _seconds(step, parse_offset_seconds)
            return cls(size(kwargs.get("max_memory"), "max_memory"), step,
                       size(kwargs.get("max_growth_per_call"), "max_growth_per_call"))
        except (ValueError, TensorgaugeError) as exc:
            raise pytest.UsageError(f"tensorgauge marker: {exc}") from None


def _seconds(text: str, parse) -> float:
    """'30ms', '1.5s', '2m' -> seconds."""
    raw = text.strip()
    if raw.endswith("ms"):
        return float(raw[:-2]) / 1000
    if raw.endswith("us"):
        return float(raw[:-2]) / 1e6
    return parse(raw)


@dataclass
class TestFigures:
    nodeid: str
    run_id: str | None
    added_bytes: int
    step_seconds_p50: float | None
    growth_per_call_bytes: int | None
    violations: list[str] = field(default_factory=list)


_RESULTS = pytest.StashKey[list]()
_FIRST_RUN = pytest.StashKey[str]()


def _figures(store_path: str | None, run_id: str) -> tuple[float | None, int | None]:
    """(the slowest median step of the test's phases, the median RSS rise per model call) of its run."""
    from tensorgauge.analyse.phases import model_calls
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.store import Store

    with Store.open(store_path) as store:
        report = RunReport.load(store, run_id)
    steps = [p.step_seconds_p50 for p in report.phases if p.step_seconds_p50]
    ends = [p.rss_end_bytes for p in model_calls(report.phases, ("fit", "predict", "evaluate")) if p.rss_end_bytes]
    rises = [b - a for a, b in zip(ends, ends[1:])]
    return (max(steps) if steps else None), (int(statistics.median(rises)) if len(ends) >= 3 else None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not item.config.getoption("tensorgauge"):
        return (yield)
    from tensorgauge.hook.channel import process_rss_bytes
    from tensorgauge.hook.facts import PeakRss
    from tensorgauge.monitoring.inprocess import monitor
    from tensorgauge.units import format_bytes, format_seconds

    limits = Limits.of(item.get_closest_marker("tensorgauge"))
    store = item.config.getoption("tensorgauge_store")
    start = process_rss_bytes() or 0
    first = item.config.stash.get(_FIRST_RUN, None)  # the session's first test's run: its tests' parent
    with monitor(name=f"pytest {item.nodeid}", store=store, parent_run_id=first) as run, PeakRss() as peak:
        result = yield
    if first is None:
        item.config.stash[_FIRST_RUN] = run.run_id
    step, growth = _figures(store, run.run_id) if run.run_id else (None, None)
    figures = TestFigures(item.nodeid, run.run_id, max(0, peak.peak - start), step, growth)
    item.config.stash[_RESULTS].append(figures)
    if limits.max_memory_bytes is not None and figures.added_bytes > limits.max_memory_bytes:
        figures.violations.append(f"added {format_bytes(figures.added_bytes)} to memory (RSS peak "
                                  f"{format_bytes(peak.peak)} over {format_bytes(start)} at its start), over its "
                                  f"limit of {format_bytes(limits.max_memory_bytes)}")
    if limits.max_step_seconds is not None and step is not None and step > limits.max_step_seconds:
        figures.violations.append(f"median step {format_seconds(step)}, over its limit of "
                                  f"{format_seconds(limits.max_step_seconds)}")
    if (limits.max_growth_per_call_bytes is not None and growth is not None
            and growth > limits.max_growth_per_call_bytes):
        figures.violations.append(f"memory grew {format_bytes(growth)} per model call (median), over its limit "
                                  f"of {format_bytes(limits.max_growth_per_call_bytes)}")
    if figures.violations:
        pytest.fail("tensorgauge: " + "; ".join(figures.violations) + f" (tensorgauge show {run.run_id})",
                    pytrace=False)
    return result


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    results = config.stash.get(_RESULTS, [])
    if not config.getoption("tensorgauge") or not results:
        return
    from tensorgauge.units import format_bytes, format_seconds

    terminalreporter.section("tensorgauge")
    for r in results:
        step = format_seconds(r.step_seconds_p50) if r.step_seconds_p50 else "-"
        mark = "OVER" if r.violations else "ok"
        terminalreporter.write_line(f"{mark:<5} {r.nodeid}: added {format_bytes(r.added_bytes)}, step p50 {step}"
                                    f"{'' if r.growth_per_call_bytes is None else ', growth per call ' + format_bytes(r.growth_per_call_bytes)}"
                                    f"  (run {r.run_id})")
