"""The HTML report opens with its verdicts (findings, the input line, the plain-words account)
before any chart, prints every figure in its unit, and suggests a --from/--to stretch inside the
run. The first screen is checked in headless Chromium at 1400x900 (a screenshot is kept in
build/test-artifacts/)."""

import re

import pytest
from conftest import needs_report
from test_report_html import ARTIFACTS, chromium, needs_browser, open_in_chromium, record_two_runs

from tensorgauge.analyse.compare import Result, Side, compare
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.model import Finding
from tensorgauge.render.html import comparison_page, run_page, suggested_window
from tensorgauge.render.verdict import account_lines
from tensorgauge.store import Store
from tensorgauge.units import parse_offset_seconds

SPLIT = {"measured": True, "step_seconds": 0.0401, "input_wait_seconds": 0.0152, "input_share": 0.38, "steps": 40,
         "measured_by": "A/B probe"}
SLOW_MAP = Finding(id="input_bound", severity="high", title="Training waits for its input pipeline",
                   evidence={"rss_peak_bytes": 684933120, "step_seconds_p50": 0.601138, "stages": {"map_bytes": 2048}},
                   fix="map(num_parallel_calls=tf.data.AUTOTUNE) and prefetch", expected_gain="up to 2.5x")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return record_two_runs(tmp_path_factory, "plain-runs", "x")


@pytest.fixture
def runs(recorded, monkeypatch):
    monkeypatch.setenv("TENSORGAUGE_STORE", str(recorded))
    store = Store.open(recorded)
    yield store
    store.close()


def analysed(store, ref: str) -> RunReport:
    """A recorded run with a slow-map finding and a measured input split added (the job is no Keras fit)."""
    report = RunReport.load(store, ref)
    report.findings = [SLOW_MAP, *report.findings]
    report.input_split = SPLIT
    return report


def visible(page: str) -> str:
    """The page's text without its scripts (the chart data and Vega)."""
    return re.sub(r"<script.*?</script>", "", page, flags=re.S)


def test_findings_input_line_and_account_come_before_the_first_chart(runs):
    report = analysed(runs, "first")
    page = visible(run_page(report, js=""))
    verdict, chart = page.index("<section class='verdict'>"), page.index("<div class='chart'")
    assert verdict < chart < page.index("<h2>Phases</h2>")
    section = page[verdict:chart]
    assert "Training waits for its input pipeline" in section and "<code>input_bound</code>" in section
    assert "<b>input</b> waits 38% of each step (15.2 ms of 40.1 ms, 40 steps, by A/B probe)" in section
    lines = account_lines(report)
    assert lines and all(line.replace("'", "&#x27;") in section for line in lines)  # the account `show` prints
    assert section.index("Training waits") < section.index("<b>input</b>") < section.index(lines[0][:20])


def test_report_prints_units_not_raw_byte_counts_or_long_fractions(runs):
    page = visible(run_page(analysed(runs, "first"), js=""))
    assert "rss_peak_bytes = 653.2 MiB" in page and "step_seconds_p50 = 601.1 ms" in page
    assert "map_bytes: 2.0 KiB" in page
    assert "684933120" not in page and "0.601138" not in page


def test_comparison_table_prints_units(runs):
    a, b = Side("first", analysed(runs, "first")), Side("second", analysed(runs, "second"))
    comparison = compare(a, b)
    comparison.results += [Result("fit", "phase", "fit", 0.601138, 0.7, "s", 1.16, "step p50"),
                           Result("fit", "phase", "fit", 684933120.0, 700000000.0, "bytes", 1.02, "RSS peak")]
    page = visible(comparison_page(a, b, comparison, js=""))
    assert "<td>601.1 ms</td><td>700.0 ms</td>" in page
    assert "<td>653.2 MiB</td><td>667.6 MiB</td>" in page
    assert not re.search(r"\d{7,} ?bytes|\d\.\d{5,} s\b", page)
    # Each run's verdicts come before its own charts too.
    for prefix in ("a", "b"):
        assert page.index("<b>input</b>", page.index(f"<h2>{prefix.upper()}: ")) < page.index(f"id='{prefix}-cores'")


@pytest.mark.parametrize("wall", [0.6, 18.0, 95.0, 300.0, 3600.0 * 3.5])
def test_suggested_stretch_lies_inside_the_run(wall):
    start, end = (parse_offset_seconds(t) for t in suggested_window(wall))
    assert 0 <= start < end <= wall
    assert end - start <= max(wall / 5, 0.1)


def test_an_18_second_run_is_not_told_to_look_at_hour_three():
    assert suggested_window(18.0) == ("8s", "10s")


def test_page_suggests_a_stretch_of_its_own_run(runs):
    report = RunReport.load(runs, "first")
    found = re.search(r"--from (\S+) --to (\S+)</code>", run_page(report, js=""))
    assert found and parse_offset_seconds(found.group(2)) <= report.record.wall_seconds


@needs_report
@needs_browser
def test_first_screen_in_chromium_shows_the_findings(runs, tmp_path):
    """At 1400x900 the findings are on the first screen: in the rendered DOM the verdict section comes
    before every chart, and the finding's box starts within the first 900 pixels."""
    page = tmp_path / "run.html"
    page.write_text(run_page(analysed(runs, "first")))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-first-screen.png"
    dom, console = open_in_chromium(page)
    assert console == []
    assert dom.index('<section class="verdict">') < dom.index('<div class="chart')
    probe = tmp_path / "probe.html"  # where the finding's box is drawn, written into the page by the page
    probe.write_text(page.read_text().replace(
        "</body>", "<script>document.title='top='+Math.round(document.querySelector('.finding')"
                   ".getBoundingClientRect().top)</script></body>"))
    top = re.search(r"<title>top=(\d+)</title>", open_in_chromium(probe, size="1400,900")[0])
    assert top and int(top.group(1)) < 900 - 100  # its title and fix are on screen, not just its edge
    assert chromium is not None
    open_in_chromium(page, shot, size="1400,900")
    assert shot.stat().st_size > 10_000
