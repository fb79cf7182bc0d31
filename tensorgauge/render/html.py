"""``tensorgauge report``: one self-contained HTML page for a run or two runs.

Charts are Vega-Lite specs (:mod:`tensorgauge.render.charts`) drawn by
Vega-Embed, whose JavaScript (Vega, Vega-Lite, Vega-Embed, from the
``vl-convert-python`` package, the ``[report]`` extra) is inlined once, so the
page works offline and fetches nothing. Every string that comes from the job
(command, names, paths, findings) is escaped: as HTML text in the page, and
inside the JSON specs, where ``<`` is written ``\\u003c`` so no string can
close the script element.
"""

from __future__ import annotations

import html
import json
import shlex

from tensorgauge._version import __version__
from tensorgauge.analyse.input_stages import hot_stage
from tensorgauge.analyse.timeline import MAX_BINS
from tensorgauge.errors import TensorgaugeError
from tensorgauge.model import MEMORY_MEASURES
from tensorgauge.render import charts, user_cache
from tensorgauge.render.phase_columns import phase_columns
from tensorgauge.render.text import sampled_figures
from tensorgauge.render.verdict import account_lines, input_line, wall_seconds
from tensorgauge.units import format_bytes, format_named, format_offset, format_seconds

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1000px;color:#222}
h1{font-size:1.4em;margin-bottom:0}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
.meta{color:#555;margin:.3em 0}.chart{margin:1em 0}code{background:#f4f4f4;padding:1px 4px}
table{border-collapse:collapse;font-size:.9em}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #eee}
td:first-child,th:first-child{text-align:left}td:not(:first-child){white-space:nowrap}.finding{margin:.8em 0;padding:.5em .8em;border-left:4px solid #999}
.fix{margin:.8em 0;padding:.5em .8em;border-left:4px solid #3a7}pre.diff{background:#f6f8fa;padding:.6em;overflow-x:auto;font-size:90%}
.high{border-color:#d62728}.moderate{border-color:#ff7f0e}.low,.info{border-color:#1f77b4}
details{margin:.5em 0}
"""
EMBED = """
const specs = JSON.parse(document.getElementById("tg-specs").textContent);
for (const [id, spec] of Object.entries(specs)) {
  vegaEmbed("#" + id, spec, {actions: false, renderer: "svg"})
    .then(() => { document.getElementById(id).dataset.rendered = "yes"; })
    .catch((error) => { console.error("chart " + id + ": " + error); });
}
"""


def javascript() -> str:
    """Vega, Vega-Lite and Vega-Embed in one script. vl-convert bundles them in ~3 s,
    so the bundle is cached per vl-convert version in the user's cache folder (:mod:`.user_cache`)."""
    try:
        import vl_convert
    except ImportError:
        raise TensorgaugeError("the HTML report needs the [report] extra: pip install 'tensorgauge[report]'") from None
    name = f"vega-{getattr(vl_convert, '__version__', 'unknown')}.js"
    cached = user_cache.read(name)
    if cached is not None:
        return cached
    js = vl_convert.javascript_bundle()  # type: ignore[call-arg]  # the snippet is optional
    user_cache.write(name, js)  # where it cannot be, it is built each time
    return js


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def _json_for_script(value) -> str:
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("&", "\\u0026")


def _phase_table(report) -> str:
    shown = report.phases[:300]
    columns = phase_columns(shown, report.record.wall_seconds or 0.0)
    depths: list[int] = []
    rows = []
    for p in shown:
        depth = depths[p.parent] + 1 if p.parent is not None and p.parent < len(depths) else 0
        depths.append(depth)
        rows.append(f"<tr><td style='padding-left:{10 + 16 * depth}px'>{_e(p.name)}</td>"
                    + "".join(f"<td>{_e(cell(p))}</td>" for _, cell in columns) + "</tr>")
    more = f"<p class='meta'>... and {len(report.phases) - 300} more phases</p>" if len(report.phases) > 300 else ""
    header = "<tr><th>phase</th>" + "".join(f"<th>{_e(h)}</th>" for h, _ in columns) + "</tr>"
    return "<table>" + header + "".join(rows) + "</table>" + more


def _findings(report) -> str:
    if not report.findings:
        return "<p>No findings: nothing wasted that tensorgauge can see.</p>"
    parts = []
    for f in report.findings:
        evidence = ", ".join(f"{_e(k)} = {_e(format_named(k, v))}" for k, v in f.evidence.items())
        gain = f"<div><b>Expected gain:</b> {_e(f.expected_gain)}</div>" if f.expected_gain else ""
        parts.append(f"<div class='finding {_e(f.severity)}'><b>{_e(f.severity)}</b> {_e(f.title)} "
                     f"<code>{_e(f.id)}</code><div><b>Fix:</b> {_e(f.fix)}</div>{gain}"
                     f"<details><summary>evidence</summary>{evidence}</details></div>")
    return "".join(parts) + ("<p class='meta'><code>tensorgauge explain ID</code>: what a finding means, how it is "
                             "measured, how to check the fix</p>")


def _verdict(report, level: str = "h2") -> str:
    """What the page says first: the findings, the input line and the plain-words account."""
    split = input_line(report)
    lines = "".join(f"<li>{_e(line)}</li>" for line in account_lines(report))
    return (f"<section class='verdict'><{level}>Findings</{level}>{_findings(report)}"
            + (f"<p class='input'><b>input</b> {_e(split)}</p>" if split else "")
            + (f"<{level}>In plain words</{level}><ul class='account'>{lines}</ul>" if lines else "")
            + "</section>")


def _hot_lines(report) -> str:
    """The costliest Python stage's hottest lines, sampled by py-spy, with the sampler's cost."""
    row = hot_stage(report.input_split)
    if row is None:
        return ""
    name = _e(row.get("function"))
    if not row.get("hot_lines"):
        return f"<p class='meta'>Hot lines of <code>{name}</code>: not sampled: {_e(row.get('hot_lines_why'))}</p>"
    items = "".join(f"<tr><td><code>{_e(x['location'])}</code></td><td>{x['share']:.0%}</td>"
                    f"<td><code>{_e(x['code'])}</code></td></tr>" for x in row["hot_lines"])
    return (f"<h3>Hot lines of <code>{name}</code></h3><table><tr><th>line</th><th>samples</th><th>code</th></tr>"
            f"{items}</table><p class='meta'>{_e(row.get('hot_samples'))} py-spy samples in the function; "
            f"sampling cost {row.get('sampling_cpu_seconds', 0.0):.2f} s CPU</p>")


def _environment(report) -> str:
    from tensorgauge.render.compare import flatten

    rows = []
    for part in ("host", "job"):
        for key, value in flatten(part, report.record.env.get(part) or {}):
            rows.append(f"<tr><td>{_e(key)}</td><td style='text-align:left'>{_e(value)}</td></tr>")
    return "<details><summary>environment fingerprint</summary><table>" + "".join(rows) + "</table></details>"


def _header(report) -> str:
    r, s = report.record, report.summary
    return (f"<h1>{_e(r.name or r.run_id)}</h1>"
            f"<p class='meta'>run <code>{_e(r.run_id)}</code> · started {_e(r.started_at)} · "
            f"wall {_e(format_seconds(r.wall_seconds))} · exit {_e(r.exit_code if r.signal is None else 'signal ' + str(r.signal))}"
            f"</p><p class='meta'>command <code>{_e(shlex.join(r.command))}</code></p>"
            f"<p class='meta'>{s.cpu_seconds:.2f} CPU-s · cores busy mean {s.cores_busy_mean:.2f}, peak "
            f"{s.cores_busy_peak:.2f} · RSS peak {_e(format_bytes(s.rss_peak_bytes))} "
            f"({_e(MEMORY_MEASURES[s.rss_peak_measure])}) · {s.samples} samples</p>"
            + (f"<p class='meta'>sampled: {_e(sampled)}</p>" if (sampled := sampled_figures(s)) else ""))


def _charts_html(prefix: str, specs: dict[str, dict]) -> tuple[str, dict[str, dict]]:
    divs, by_id = [], {}
    for name, spec in specs.items():
        chart_id = f"{prefix}{name}"
        by_id[chart_id] = spec
        divs.append(f"<div class='chart' id='{chart_id}'></div>")
    return "".join(divs), by_id


def _page(title: str, body: str, specs: dict[str, dict], js: str) -> str:
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>{body}"
            f"<p class='meta'>tensorgauge {__version__}</p>"
            f"<script type='application/json' id='tg-specs'>{_json_for_script(specs)}</script>"
            f"<script>{js}</script><script>{EMBED}</script></body></html>")


def suggested_window(wall: float) -> tuple[str, str]:
    """A stretch of a run ``wall`` seconds long to name in ``--from``/``--to``: a tenth of it (two minutes
    at most) from near its middle, in the steps :func:`format_offset` writes."""
    step = 60.0 if wall >= 1200 else 1.0 if wall >= 10 else 0.1
    width = max(step, round(min(wall / 10, 120.0) / step) * step)
    start = max(0.0, (wall * 0.45) // step * step)
    return format_offset(start), format_offset(min(start + width, wall) if wall > start else start + width)


def _timeline_hint(report) -> str:
    timeline = report.timeline
    rows = timeline.get("series") or []
    if len(rows) < 2:
        return ""
    start, end = timeline.get("from_seconds") or 0.0, timeline.get("to_seconds") or wall_seconds(report)
    width = (end - start) / MAX_BINS
    kind = ("every sample" if width <= report.record.interval_seconds
            else f"bins of {format_seconds(width)}, each with its peak and minimum")
    first, last = suggested_window(wall_seconds(report))
    return (f"<p class='meta'>{_e(kind)}; drag a chart to pan, scroll to zoom. Every sample of a stretch: "
            f"<code>tensorgauge report {_e(report.record.run_id)} --from {first} --to {last}</code>.</p>")


def _fixes(report, patch) -> str:
    """The run's findings as edits of the job's code (``tensorgauge fix``), each with its diff."""
    if patch is None or not (patch.proposals or patch.refusals):
        return ""
    parts = ["<h2>Fix it</h2><p class='meta'><code>tensorgauge fix "
             f"{_e(report.record.run_id)} --verify</code> reruns the job with each and times it; "
             "<code>--apply</code> writes them.</p>"]
    for proposal in patch.proposals:
        edit = proposal.edit
        note = f"<div class='meta'>{_e(edit.note)}</div>" if edit.note else ""
        parts.append(f"<div class='fix'><b>{_e(edit.finding)}</b> {_e(edit.summary)}{note}"
                     f"<pre class='diff'>{_e(proposal.diff)}</pre></div>")
    for refusal in patch.refusals:
        parts.append(f"<div class='fix'><b>not patched</b> {_e(refusal.finding)} ({_e(refusal.fix)}): "
                     f"{_e(refusal.why)}</div>")
    return "".join(parts)


def run_page(report, js: str | None = None, patch=None) -> str:
    """The report of one run (``patch``: its findings as edits of the job's code, shown as diffs)."""
    chart_divs, specs = _charts_html("c-", charts.run_charts(report))
    body = (_header(report) + _verdict(report) + _fixes(report, patch) + "<h2>Timeline</h2>" + _timeline_hint(report) + chart_divs
            + _hot_lines(report) + "<h2>Phases</h2>" + _phase_table(report) + "<h2>Environment</h2>" + _environment(report))
    return _page(f"tensorgauge: {report.record.name or report.record.run_id}", body, specs,
                 javascript() if js is None else js)


def _comparison_table(comparison) -> str:
    from tensorgauge.analyse.compare import format_figure, format_slowdown, format_value, reasons

    doc = comparison.to_dict()
    env = "".join(f"<tr><td>{_e(d['label'])}</td><td>{_e(format_value(d['a']))}</td><td>{_e(format_value(d['b']))}"
                  "</td></tr>" for d in doc["environment"]) or "<tr><td>no differences</td><td></td><td></td></tr>"
    results = "".join(f"<tr><td>{_e(r['name'])}</td><td>{_e(format_figure(r['a'], r['unit']))}</td>"
                      f"<td>{_e(format_figure(r['b'], r['unit']))}</td>"
                      f"<td>{_e(format_slowdown(r['slowdown'], r['unit']))}</td></tr>" for r in doc["results"])
    why = "".join(f"<li>{_e(text)}</li>" for text in reasons(doc))
    cut = "".join(f"<p>{_e(line)}</p>" for line in doc.get("cut") or [])
    verdict = cut + (f"<p>{_e(doc['headline'])}</p>" if doc.get("headline") else "") + (
        f"<h3>Why, most likely first</h3><ol>{why}</ol>" if why else "")
    return (f"<section class='verdict'>{verdict}</section>"
            f"<table><tr><th>environment</th><th>A</th><th>B</th></tr>{env}</table>"
            f"<h3>Results, B against A</h3><table><tr><th></th><th>A</th><th>B</th><th>B is</th></tr>{results}</table>")


def comparison_page(a, b, comparison, js: str | None = None) -> str:
    """Two runs: the comparison, overlaid timelines, then each run's own section."""
    rows = {label: side.report.timeline["series"] for label, side in (("A", a), ("B", b))}
    specs = {"cmp-cores": charts.overlay_chart(rows, "cores_mean", "Cores busy, A and B", "cores busy"),
             "cmp-memory": charts.overlay_chart(rows, "rss_gib", "RSS, A and B", "GiB")}
    body = (f"<h1>A: {_e(a.label)} · B: {_e(b.label)}</h1><h2>Comparison</h2>{_comparison_table(comparison)}"
            "<div class='chart' id='cmp-cores'></div><div class='chart' id='cmp-memory'></div>")
    for prefix, side in (("a-", a), ("b-", b)):
        divs, side_specs = _charts_html(prefix, charts.run_charts(side.report))
        specs.update(side_specs)
        body += (f"<h2>{prefix[0].upper()}: {_e(side.label)}</h2>" + _header(side.report)
                 + _verdict(side.report, "h3") + divs + "<h3>Phases</h3>" + _phase_table(side.report)
                 + _environment(side.report))
    return _page(f"tensorgauge: {a.label} vs {b.label}", body, specs, javascript() if js is None else js)
