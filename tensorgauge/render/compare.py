"""Terminal views of ``env``, ``bench`` and ``compare`` (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tensorgauge.analyse.compare import SIGNIFICANT, format_figure, format_slowdown, format_value, reasons
from tensorgauge.render.text import safe
from tensorgauge.units import format_bytes, format_result, format_seconds


def flatten(prefix: str, value) -> list[tuple[str, str]]:
    """Nested facts as (dotted key, text) rows."""
    out: list[tuple[str, str]] = []
    _flat(prefix, value, out)
    return out


def _flat(prefix: str, value, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            _flat(f"{prefix}.{key}" if prefix else str(key), inner, out)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, inner in enumerate(value):
            _flat(f"{prefix}[{i}]", inner, out)
    elif prefix.endswith("_bytes") and isinstance(value, int):
        out.append((prefix, format_bytes(value)))
    else:
        out.append((prefix, ", ".join(map(str, value)) if isinstance(value, list) else str(value)))


def render_env(console: Console, env: dict) -> None:
    table = Table(box=None, header_style="bold", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in flatten("host", env.get("host") or {}) + flatten("job", env.get("job") or {}):
        table.add_row(safe(key), safe(value))
    console.print(table)


def render_bench(console: Console, results: dict[str, dict], run_id: str) -> None:
    table = Table(box=None, header_style="bold", title=f"Benchmarks (run {run_id})", title_justify="left",
                  title_style="bold")
    for column in ("benchmark", "result", "time", "cores busy", "RSS peak"):
        table.add_column(column, justify="left" if column == "benchmark" else "right")
    for name, r in results.items():
        table.add_row(safe(name), safe(format_result(r["value"], str(r["unit"]))), format_seconds(r.get("seconds")),
                      f"{r['cores_busy_mean']:.2f}" if r.get("cores_busy_mean") is not None else "-",
                      format_bytes(r.get("rss_peak_bytes")) if r.get("rss_peak_bytes") else "-")
    console.print(table)


def _ratio(slowdown: float, unit: str = "s") -> str:
    text = format_slowdown(slowdown, unit)
    if slowdown >= SIGNIFICANT:
        return f"[red]{text}[/red]"
    if slowdown <= 1 / SIGNIFICANT:
        return f"[green]{text}[/green]"
    return text


def render_compare(console: Console, comparison) -> None:
    doc = comparison.to_dict()
    a, b = doc["a"], doc["b"]
    console.print(f"[bold]A[/bold] {safe(a['label'])} ({a['run_id']}, {safe(str(a['hostname']))})   "
                  f"[bold]B[/bold] {safe(b['label'])} ({b['run_id']}, {safe(str(b['hostname']))})")
    for line in doc.get("cut") or []:
        console.print(f"[yellow]{safe(line)}[/yellow]")
    if doc["environment"]:
        table = Table(box=None, header_style="bold", title="Environment differences", title_justify="left",
                      title_style="bold")
        for column in ("what", "A", "B"):
            table.add_column(column)
        for d in doc["environment"]:
            table.add_row(safe(d["label"]), safe(format_value(d["a"])), safe(format_value(d["b"])))
        console.print(table)
    else:
        console.print("The environments match: differences below are the job's own, or noise.")
    if doc["results"]:
        table = Table(box=None, header_style="bold", title="Results (B against A)", title_justify="left",
                      title_style="bold")
        for column in ("", "A", "B", "B is"):
            table.add_column(column, justify="left" if not column else "right")
        for r in doc["results"]:
            table.add_row(safe(r["name"]), safe(format_figure(r["a"], r["unit"])), safe(format_figure(r["b"], r["unit"])),
                          _ratio(r["slowdown"], r["unit"]))
        console.print(table)
    if doc.get("headline"):
        console.print(safe(doc["headline"]))
    why = reasons(doc)
    if why:
        console.print("[bold]Why, most likely first[/bold]")
        for i, text in enumerate(why, 1):
            console.print(f" {i}. {safe(text)}")
    quiet = [e["label"] for e in doc["explanations"] if not e["affected"]]
    if quiet:
        console.print(f"Differences with no measured effect here: {safe(', '.join(quiet))}.")
    if doc["unexplained"]:
        names = ", ".join(f"{r['name']} ({_ratio(r['slowdown'], r['unit'])})" for r in doc["unexplained"][:8])
        cause = ("most likely the job's own changes above" if doc.get("job_changes") else
                 "noise, load, or the job itself")
        console.print(f"Changed with no recorded environment difference ({cause}): {names}")



TABLE_WORKERS = 20  # more workers than this: their distribution and the slowest, not a line each


def render_job(console: Console, job: str, rows, finding, show_all: bool = False) -> None:
    """``compare --job``: one line per worker (a small job, or ``show_all``), else how the workers' step
    times spread and the slowest of them; then the straggler."""
    if len(rows) > TABLE_WORKERS and not show_all:
        _render_spread(console, job, rows)
    else:
        _render_table(console, job, rows)
    if finding is not None:
        console.print(f"[bold]{finding.severity}[/bold] {safe(finding.title)}  ({finding.id})")
        console.print(f"  fix: {safe(finding.fix)}")
    elif any(w.allreduce_seconds_per_step is None for w in rows):
        console.print("Run every worker with --diagnose to measure who waits for whom (all-reduce time per step).")
    else:
        console.print("No straggler: no worker waits noticeably for another.")


def _render_spread(console: Console, job: str, rows) -> None:
    from tensorgauge.analyse.straggler import spread

    found = spread(rows)
    console.print(f"[bold]Job {safe(job)}[/bold]: {found.workers} workers, {found.measured} with a fit's step time "
                  "(--all: a line per worker)")
    if found.step_seconds_median is None:
        return
    console.print(f"  step time p50 across workers: median {format_seconds(found.step_seconds_median)}, "
                  f"90th percentile {format_seconds(found.step_seconds_p90)}")
    table = Table(box=None, header_style="bold", title="Slowest workers", title_justify="left")
    for column in ("worker", "host", "run", "step p50", "over the median"):
        table.add_column(column, justify="left" if column in ("worker", "host", "run") else "right")
    for w, ratio in found.slowest:
        table.add_row(safe(w.worker), safe(str(w.hostname)), w.run_id, format_seconds(w.step_seconds_p50),
                      f"{ratio - 1:+.0%} ({format_seconds((w.step_seconds_p50 or 0.0) - found.step_seconds_median)})")
    console.print(table)


def _render_table(console: Console, job: str, rows) -> None:
    table = Table(box=None, header_style="bold", title=f"Job {safe(job)}", title_justify="left", title_style="bold")
    for column in ("worker", "host", "run", "fit", "steps", "step p50", "cores", "input/step", "all-reduce/step"):
        table.add_column(column, justify="left" if column in ("worker", "host", "run") else "right")
    for w in rows:
        table.add_row(safe(w.worker), safe(str(w.hostname)), w.run_id, format_seconds(w.fit_seconds),
                      str(w.steps or "-"), format_seconds(w.step_seconds_p50),
                      f"{w.cores_busy_mean:.2f}" if w.cores_busy_mean is not None else "-",
                      format_seconds(w.input_work_seconds_per_step), format_seconds(w.allreduce_seconds_per_step))
    console.print(table)
