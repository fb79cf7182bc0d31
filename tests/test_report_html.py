"""The HTML report: self-contained, escaped, and rendering in headless Chromium with no
console message; a screenshot is kept in build/test-artifacts/."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import made_once, needs_report

from tensorgauge.cli import main

ARTIFACTS = Path(__file__).resolve().parent.parent / "build" / "test-artifacts"
HOSTILE = "<script>alert('tg')</script>"
JOB = ("import sys, time, tensorgauge\n"
       "with tensorgauge.phase('train'):\n"
       "    for _ in range(40):\n"
       "        t = time.time()\n"
       "        while time.time() - t < 0.01: pass\n"
       "        tensorgauge.step()\n"
       "with tensorgauge.phase('save ' + sys.argv[1]):\n"
       "    time.sleep(0.2)\n")

chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
needs_browser = pytest.mark.skipif(chromium is None, reason="Chromium is not installed (make test installs it)")


def open_in_chromium(page: Path, screenshot: Path | None = None, size: str = "1100,2600") -> tuple[str, list[str]]:
    """The page's DOM after its scripts ran in a window of ``size`` pixels, and every console message it logged."""
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
             "--virtual-time-budget=10000", "--host-resolver-rules=MAP * ~NOTFOUND",  # offline
             f"--window-size={size}"]
    done = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    if screenshot is not None:
        subprocess.run([*flags, f"--screenshot={screenshot}", page.as_uri()],
                       capture_output=True, timeout=120)
    return done.stdout, console


def rendered_charts(dom: str) -> set[str]:
    """Ids of the chart elements whose Vega view finished rendering."""
    return set(re.findall(r'<div[^>]*\bid="([\w-]+)"[^>]*\bdata-rendered="yes"', dom))


def specs_in(page: Path) -> dict:
    text = page.read_text()
    found = re.search(r"<script type='application/json' id='tg-specs'>(.*?)</script>", text, re.S)
    return json.loads(found.group(1))


def record_two_runs(tmp_path_factory, name: str, arg: str) -> Path:
    """A store holding the runs 'first' and 'second' of JOB (given ``arg``), recorded once (:func:`made_once`,
    as ``name``) for a module whose tests read them and change nothing in the store."""
    def record(folder: Path) -> None:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("TENSORGAUGE_STORE", str(folder / "runs.db"))
            for run in ("first", "second"):
                assert main(["run", "-q", "--name", run, "--", sys.executable, "-c", JOB, arg]) == 0

    return made_once(tmp_path_factory, name, record) / "runs.db"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return record_two_runs(tmp_path_factory, "hostile-runs", HOSTILE)


@pytest.fixture
def two_runs(recorded, monkeypatch):
    monkeypatch.setenv("TENSORGAUGE_STORE", str(recorded))
    return recorded


@needs_report
@needs_browser
def test_report_renders_every_chart_without_console_messages(two_runs, tmp_path, capsys):
    page = tmp_path / "run.html"
    assert main(["report", "first", "-o", str(page)]) == 0
    assert f"report: {page}" in capsys.readouterr().out
    specs = specs_in(page)
    assert {"c-cores", "c-steps", "c-memory", "c-histogram"} <= set(specs)
    zoomable = [layer for layer in specs["c-cores"]["layer"] if layer.get("params")]
    assert zoomable and zoomable[0]["params"][0]["bind"] == "scales"  # drag pans, the wheel zooms
    assert re.search(r"--from \S+ --to \S+</code>", page.read_text())  # how to see every sample of a stretch
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    dom, console = open_in_chromium(page, ARTIFACTS / "report.png")
    assert console == []
    assert rendered_charts(dom) == set(specs)
    assert dom.count("<svg") >= len(specs)  # each chart drew its marks
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000
    html = page.read_text()
    assert "<script src" not in html and "<link" not in html  # nothing to fetch (Chromium ran offline too)


@needs_report
@needs_browser
def test_two_run_report_compares_then_shows_each(two_runs, tmp_path):
    page = tmp_path / "two.html"
    assert main(["report", "first", "second", "-o", str(page)]) == 0
    specs = specs_in(page)
    assert {"cmp-cores", "cmp-memory", "a-cores", "b-cores"} <= set(specs)
    dom, console = open_in_chromium(page, ARTIFACTS / "report-two-runs.png")
    assert console == [] and rendered_charts(dom) == set(specs)
    assert "Results, B against A" in dom and "train" in dom


@needs_report
def test_job_strings_show_up_as_text(two_runs, tmp_path):
    page = tmp_path / "run.html"
    assert main(["report", "first", "-o", str(page)]) == 0
    html = page.read_text()
    assert HOSTILE not in html  # nowhere raw: not in the page, not in the chart data
    assert "&lt;script&gt;alert(&#x27;tg&#x27;)&lt;/script&gt;" in html  # the command line and the phase name
    assert "\\u003cscript\\u003e" in html  # the save phase's name inside the chart specs
    if chromium:
        dom, console = open_in_chromium(page)
        assert console == []  # no alert ran, nothing logged
        assert "&lt;script&gt;alert('tg')&lt;/script&gt;" in dom  # shown as text


def test_report_of_an_unknown_run_is_one_line(store_path, capsys):
    assert main(["report", "nope", "-o", "x.html"]) == 2
    assert "Traceback" not in capsys.readouterr().err


@needs_report
@needs_browser
def test_gpu_chart_renders(two_runs, tmp_path):
    """The GPU chart (utilisation over memory, device and job), from a recorded run given GPU readings:
    no GPU here, so NVML's readings are made up; the chart and the page are real."""
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.model import GpuReading
    from tensorgauge.render.html import run_page
    from tensorgauge.store import Store

    store = Store.open(two_runs)
    record = store.run("first")
    samples = store.samples(record.run_id)
    for i, s in enumerate(samples):
        s.gpus = [GpuReading(index=0, name="H100", util_percent=float(i % 100), memory_used_bytes=(2 + i % 3) << 30,
                             memory_total_bytes=80 << 30, job_memory_bytes=(1 + i % 3) << 30)]
    page = tmp_path / "gpu.html"
    page.write_text(run_page(RunReport.build(record, samples, store.events(record.run_id))))
    specs = specs_in(page)
    assert "c-gpu" in specs
    assert {f for chart in specs["c-gpu"]["vconcat"] for f in chart.get("transform", [{}])[0].get("fold", [])} == \
        {"gpu_mem_gib", "gpu_job_gib"}
    assert any(r.get("mem_used_gib") for r in specs["c-memory"]["layer"][1]["data"]["values"])  # machine memory
    dom, console = open_in_chromium(page, ARTIFACTS / "report-gpu.png")
    assert console == [] and rendered_charts(dom) == set(specs)


def histogram_page(two_runs, tmp_path, spread: float) -> Path:
    """The report of the run 'first' with steps of 10 ms to ``spread`` times that, in four bins."""
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.render.html import run_page
    from tensorgauge.store import Store

    report = RunReport.load(Store.open(two_runs), "first")
    report.timeline["histogram"] = [{"from_ms": 10.0 * spread ** (i / 4), "to_ms": 10.0 * spread ** ((i + 1) / 4),
                                     "steps": 5 + i} for i in range(4)]
    page = tmp_path / f"histogram-{spread}.html"
    page.write_text(run_page(report))
    return page


def test_step_histogram_axis_is_log_where_steps_span_over_10x(two_runs, tmp_path):
    axis = {spread: specs_in(histogram_page(two_runs, tmp_path, spread))["c-histogram"]["encoding"]["x"]["scale"]
            for spread in (3.0, 40.0)}
    assert axis == {3.0: {"type": "linear", "zero": False}, 40.0: {"type": "log"}}


@needs_report
@needs_browser
def test_a_log_step_histogram_renders_without_console_messages(two_runs, tmp_path):
    """Vega-Lite warns in the console when a log scale is told to leave out zero."""
    dom, console = open_in_chromium(histogram_page(two_runs, tmp_path, 40.0))
    assert console == [] and "c-histogram" in rendered_charts(dom)


@needs_report
@needs_browser
def test_held_chart_renders(two_runs, tmp_path):
    """What held the memory, stacked per phase: the run's own phases given memory facts and a buffer
    (the job here is not a Keras fit), rendered for real."""
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.model import Event
    from tensorgauge.render.html import run_page
    from tensorgauge.store import Store

    store = Store.open(two_runs)
    record = store.run("first")
    events = store.events(record.run_id)
    train = next(e for e in events if e.kind == "phase_begin" and e.data.get("name") == "train")
    facts = [Event(t=train.t - 0.01, pid=train.pid, kind="dataset",
                   data={"op": "shuffle", "buffer_size": 10, "elements": 10, "holds_bytes": 1 << 20}),
             Event(t=train.t + 0.01, pid=train.pid, kind="memory_facts",
                   data={"weights_bytes": 2 << 20, "optimizer_bytes": 4 << 20, "input_arrays_bytes": None})]
    report = RunReport.build(record, store.samples(record.run_id), sorted(events + facts, key=lambda e: e.t))
    page = tmp_path / "held.html"
    page.write_text(run_page(report))
    specs = specs_in(page)
    held = {(r["phase"], r["held"]) for r in specs["c-held"]["data"]["values"]}
    assert any(h == "optimizer variables" for _, h in held) and any(h == "the rest (framework, Python)"
                                                                       for _, h in held)
    dom, console = open_in_chromium(page, ARTIFACTS / "report-held.png")
    assert console == [] and rendered_charts(dom) == set(specs)
