"""Terminal output with rich: the run list, one run's summary and phase tree."""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.padding import Padding
from rich.table import Table

from tensorgauge.analyse.input_stages import hot_stage, stage_table_rows
from tensorgauge.analyse.memory_breakdown import describe as describe_memory
from tensorgauge.analyse.run_list import Listing
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.hook.protocol import JobError
from tensorgauge.model import (
    MEMORY_MEASURES,
    Event,
    Finding,
    Phase,
    RunRecord,
    Sample,
    Summary,
    payloads,
    shown_metrics,
)
from tensorgauge.render.phase_columns import phase_columns
from tensorgauge.render.text import safe, safe_cell, sampled_figures
from tensorgauge.render.verdict import account_lines, input_line, wall_seconds
from tensorgauge.units import format_bytes, format_quantity, format_seconds

ON_THE_CPU_AND_MEMORY_LINES = ("cores_busy", "rss_bytes", "threads", "processes")  # shown on their own


def command_text(command: list[str], width: int | None = None) -> str:
    text = shlex.join(command)
    if width and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def outcome(record: RunRecord) -> str:
    """'exit 0', 'signal 9 (OOM killer)', 'running or interrupted'."""
    if not record.complete:
        return "incomplete"
    budget = record.budget or {}
    if record.signal is not None:
        text = f"signal {record.signal}"
        if budget.get("stopped") and budget.get("killed_at") is not None:
            return text + " (memory budget)"  # the watchdog's kill, whatever the kernel did meanwhile
        if record.oom_killed and budget.get("stopped"):
            return text + " (memory budget: the kernel's OOM killer at its cgroup limit)"
        return text + " (OOM killer)" if record.oom_killed else text
    # A wrapper's child killed by the kernel while the wrapper went on to exit (the job's own cgroup counted it).
    text = f"exit {record.exit_code}"
    if budget.get("stopped") and not budget.get("graceful"):  # `run` exited 137 all the same
        return text + (" (memory budget)" if budget.get("killed_at") is not None
                       else " (memory budget: the kernel's OOM killer at its cgroup limit)")
    return text + (" (OOM killer)" if record.oom_killed else "")


ID_WIDTH = 28  # the widest id column in `runs` (ours are 20 characters)
SUMMED_MARK = " Σ"  # a peak recorded before shared pages were counted once


END_WORDS = {"oom_killer": "the kernel's OOM killer", "framework_oom": "the framework's allocation failed"}


def render_runs(console: Console, listing: Listing | list[RunRecord], peaks: dict[str, tuple[int | None, int]],
                filtered: bool = False) -> None:
    """``runs``: a :class:`~tensorgauge.analyse.run_list.Listing` (or a list of records), newest first, trials
    under their parent run (listed, or counted), and how many runs the limit left out."""
    if not isinstance(listing, Listing):
        listing = Listing(rows=[(r, 0) for r in listing])
    records = [r for r, _ in listing.rows]
    if not records:
        console.print("No runs match." if filtered else
                      "No runs recorded yet. Record one with: tensorgauge run -- python train.py")
        return
    table = Table(box=None, header_style="bold")
    # Ids are shown whole (a run is named by them) up to ID_WIDTH (an imported one may be 64 characters:
    # its start is enough to name it); a long name or command is cut instead.
    id_width = min(ID_WIDTH, max(len(r.run_id) + 2 * depth for r, depth in listing.rows))
    exit_width = max(len(outcome(r)) for r in records)  # never cut to "exit" by a long id or name
    for column in ("id", "name", "command", "started", "wall", "exit", "peak RSS", "cores"):
        table.add_column(column, justify="right" if column in ("wall", "peak RSS", "cores") else "left",
                         no_wrap=True, overflow="ellipsis" if column in ("id", "name", "command") else "fold",
                         min_width=id_width if column == "id" else exit_width if column == "exit" else None,
                         max_width=24 if column == "name" else ID_WIDTH if column == "id" else None)
    for r, depth in listing.rows:
        peak, _ = peaks.get(r.run_id, (None, 0))
        peak = peak or None
        cores = (r.cpu_seconds_total / r.wall_seconds
                 if r.cpu_seconds_total is not None and r.wall_seconds else None)
        table.add_row(("└ " if depth else "") + safe_cell(r.run_id), safe_cell(r.name or ""),
                      safe_cell(command_text(r.command, 30)),
                      safe(r.started_at[5:16].replace("T", " ")), format_seconds(r.wall_seconds), outcome(r),
                      format_bytes(peak) + (SUMMED_MARK if peak and r.memory_measure is None else ""),
                      f"{cores:.2f}" if cores is not None else "-")
        if r.run_id in listing.folded:
            count = listing.folded[r.run_id]
            table.add_row("", f"└ {count} trial run{'s' if count > 1 else ''}", *[""] * 6)
    console.print(table)
    if any(r.memory_measure is None and peaks.get(r.run_id, (None, 0))[0] for r in records):
        console.print(f"[dim]peak RSS counts shared pages once;{SUMMED_MARK}: recorded by an older tensorgauge, "
                      f"{MEMORY_MEASURES['rss_summed']} where the job ran several processes[/dim]")
    if listing.folded:
        console.print("[dim]trial runs (--try-fixes' fixes, pytest --tensorgauge's tests) are counted under the run "
                      "they belong to: tensorgauge runs --all lists them[/dim]")
    if listing.more:
        console.print(f"[dim]… {listing.more} older run{'s' if listing.more > 1 else ''} not shown: tensorgauge runs "
                      "--limit 0 lists all; --name NAME or --job JOB picks some[/dim]")


def _depths(phases: list[Phase]) -> list[int]:
    depths: list[int] = []
    for phase in phases:
        depths.append(depths[phase.parent] + 1 if phase.parent is not None else 0)
    return depths


def phase_table(phases: list[Phase], wall_seconds: float, max_rows: int = 60) -> Table:
    table = Table(box=None, header_style="bold", title="Phases", title_justify="left", title_style="bold")
    columns = phase_columns(phases, wall_seconds)
    table.add_column("phase", no_wrap=True, overflow="ellipsis")
    for header, _ in columns:
        table.add_column(header, justify="right", no_wrap=True, overflow="ellipsis")
    for shown, (phase, depth) in enumerate(zip(phases, _depths(phases))):
        if shown >= max_rows:
            table.add_row(f"… {len(phases) - shown} more (tensorgauge show RUN --json)", *[""] * len(columns))
            break
        name = "  " * depth + safe(phase.name) + _end_note(phase)
        table.add_row(name, *(cell(phase) for _, cell in columns))
    return table


def _end_note(phase: Phase) -> str:
    """After a phase's name: nothing when its end was recorded, else whether the job ended inside it."""
    if phase.complete:
        return ""
    return " [yellow](end not recorded: events dropped)[/yellow]" if phase.end_dropped else " [red](cut)[/red]"


def gpu_budget_note(budget: dict) -> str:
    """How the GPU memory limit was applied, and the job's own peak as NVML measured it."""
    applied = budget.get("gpu_memory_limit")
    if applied is None:
        note = " (not applied: the job did not import TensorFlow)"
    elif applied.get("error"):
        note = f" (not applied: {safe(str(applied['error']))})"
    elif applied.get("gpus") == 0:
        note = " (no GPU visible to TensorFlow: nothing to limit)"
    else:
        note = f" (TensorFlow memory_limit on {applied.get('gpus')} GPU(s))"
    peak = budget.get("gpu_memory_peak_bytes")
    if peak is not None:
        note += f", job's peak {format_bytes(peak)} (NVML)"
        if peak > budget["max_gpu_memory_bytes"]:
            note += " [red]over the budget[/red]" + (
                ": TensorFlow's limit leaves out the CUDA context and memory taken outside TensorFlow"
                if applied and applied.get("gpus") and not applied.get("error") else "")
    return note


def render_budget(console: Console, budget: dict) -> None:
    parts = []
    if budget.get("max_memory_bytes"):
        counted = f", {budget['memory_counted']}" if budget.get("memory_counted") else ""
        parts.append(f"memory {format_bytes(budget['max_memory_bytes'])} (peak {format_bytes(budget.get('peak_bytes'))}"
                     f"{safe(counted)})")
    cpus, used = budget.get("max_cpus"), budget.get("cores_busy_mean")
    if cpus:
        over = used is not None and used > cpus * 1.05
        parts.append(f"{cpus:g} CPUs" + (f" ([red]exceeded: {used:.2f} cores used on average[/red])" if over
                                         else f" ({used:.2f} used)" if used is not None else ""))
    if budget.get("max_gpu_memory_bytes"):
        parts.append(f"GPU memory {format_bytes(budget['max_gpu_memory_bytes'])}{gpu_budget_note(budget)}")
    enforced = ", ".join(budget.get("enforced_by") or []) or "nothing (no limit could apply)"
    limit, peak = budget.get("max_memory_bytes"), budget.get("peak_bytes")
    cpu_over = cpus and used is not None and used > cpus * 1.05
    if cpu_over and not (limit and peak and peak > limit):
        console.print(f"  budget   {', '.join(parts)}; tried {safe(enforced)}, which did not hold it")
    elif limit and peak and peak > limit:  # never "enforced" for a budget that was exceeded
        console.print(f"  budget   {', '.join(parts)}; [red]exceeded by {format_bytes(peak - limit)} "
                      f"({(peak - limit) / limit:.0%})[/red] despite {safe(enforced)}")
    else:
        console.print(f"  budget   {', '.join(parts)}; enforced by {safe(enforced)}")
    if budget.get("resumed"):
        console.print(f"  resumed  a budget stop's training: {safe(str(budget['resumed'].get('text')))}")
    if budget.get("stopped"):
        console.print(f"  [yellow]stopped: {safe(str(budget.get('reason')))}[/yellow]")
        largest = [f"{safe(str(p.get('name') or '?'))} (pid {p.get('pid')}) {format_bytes(p.get('rss_peak_bytes'))}"
                   for p in budget.get("processes") or []]
        if largest:
            console.print(f"  its largest processes (RSS peak): {', '.join(largest)}")
        if budget.get("checkpoint"):
            console.print(f"  checkpoint {safe(budget['checkpoint'])}: run the same command again to resume")


def ended_by(events: list[Event]) -> str | None:
    """'ValueError: the message' of the exception that ended the job (its ``job_error``), else None."""
    error = next(iter(payloads(reversed(events), JobError)), None)
    if error is None:
        return None
    message = str(error.get("message") or "").strip()
    return str(error.get("type") or "an exception") + (f": {message}" if message else "")


def _recording_notes(console: Console, r: RunRecord, s: Summary) -> None:
    """What the recording missed: the job's end, events, samples, exports."""
    if not r.complete:
        console.print("  [yellow]incomplete: the monitor stopped before the job ended; "
                      "figures cover what was recorded[/yellow]")
    if r.events_skipped:
        console.print(f"  [yellow]{r.events_skipped} lines from the job were not valid events and were skipped[/yellow]")
    if r.events_dropped:
        console.print(f"  [yellow]{r.events_dropped} events from the job were not recorded: more than a run keeps "
                      "(50,000), written faster than they could be read, or lost on a full filesystem[/yellow]")
    lost = {name: n for name, figures in (r.exports or {}).items()
            if isinstance(figures, dict) and isinstance(n := figures.get("dropped"), int) and n > 0}
    if lost:
        console.print("  [yellow]exports dropped (nothing took them; the job was not held up): "
                      + ", ".join(f"{safe(str(name))} {n}" for name, n in lost.items()) + "[/yellow]")
    if r.samples_lost or r.recording_error:
        taken = f"{s.samples} of {r.samples_taken} samples stored" if r.samples_taken else f"{s.samples} samples stored"
        console.print(f"  [yellow]recording: {taken}"
                      + (f"; {safe(r.recording_error)}" if r.recording_error else "") + "[/yellow]")


def render_run(console: Console, report: RunReport) -> None:
    r, s = report.record, report.summary
    wall = wall_seconds(report)
    title = f"[bold]{safe(r.run_id)}[/bold]" + (f"  {safe(r.name)}" if r.name else "")
    console.print(title)
    console.print(f"  command  {safe(command_text(r.command))}")
    console.print(f"  started  {safe(r.started_at)}   wall {format_seconds(wall)}   {outcome(r)}")
    _recording_notes(console, r, s)
    console.print(f"  CPU      {s.cpu_seconds:.2f} CPU-s, cores busy mean {s.cores_busy_mean:.2f} "
                  f"peak {s.cores_busy_peak:.2f}")
    # USS is read every few seconds: a figure read once or twice is no peak.
    uss = f"  USS max {format_bytes(s.uss_peak_bytes)} (of readings every 5 s)" if s.uss_peak_bytes else ""
    console.print(f"  memory   RSS peak {format_bytes(s.rss_peak_bytes)} ({MEMORY_MEASURES[s.rss_peak_measure]})"
                  f"{uss}   threads peak {s.threads_peak}"
                  f"   processes peak {s.processes_peak}   samples {s.samples}")
    sampled = sampled_figures(s, leave_out=ON_THE_CPU_AND_MEMORY_LINES)
    if sampled:
        console.print(f"  sampled  {safe(sampled)}")
    held = report.memory.get("memory_breakdown")
    if held:
        console.print(f"  held     at the peak: {safe(describe_memory(held))}"
                      + ("  [dim](counted more than RSS: clipped)[/dim]" if held.get("clipped") else ""))
    cause = report.memory.get("end_cause")
    raised = ended_by(report.events)
    if raised:
        console.print(f"  [red]ended    by {safe(raised)}[/red]")
    if cause in ("oom_killer", "framework_oom"):
        label = "         " if raised else "  ended  "
        console.print(f"[red]{label}  out of memory ({END_WORDS[cause]}): see the out_of_memory finding[/red]")
    for gpu in s.gpu:
        console.print(f"  GPU {gpu['index']}    {safe(str(gpu.get('name') or ''))} util mean "
                      f"{gpu.get('util_percent_mean')}% peak {gpu.get('util_percent_peak')}%, memory peak "
                      f"{format_bytes(gpu.get('memory_used_peak_bytes'))} of "
                      f"{format_bytes(gpu.get('memory_total_bytes'))}"
                      + (f" (the job's own: {format_bytes(gpu['job_memory_peak_bytes'])})"
                         if gpu.get("job_memory_peak_bytes") is not None else ""))
    if r.budget:
        render_budget(console, r.budget)
    split = input_line(report)
    if split:
        console.print(f"  input    {safe(split)}")
    if report.phases:
        console.print()
        console.print(phase_table(report.phases, wall))
    search = report.memory.get("batch_size_search")
    if search:
        console.print()
        render_batch_search(console, search)
    if report.findings:
        console.print()
        console.print("[bold]Findings[/bold]")
        for finding in report.findings:
            render_finding(console, finding)
            if finding.id == "input_bound":
                render_stages(console, report.input_split)
        console.print("  [dim]tensorgauge explain ID: what a finding means, how it is measured, how to check "
                      "the fix[/dim]")
        fixable = fixable_findings(report)
        if fixable:
            console.print(f"  tensorgauge fix {safe(report.record.run_id)} writes the fix of {', '.join(fixable)} "
                          "as a patch to your code (--verify reruns the job and times it)")
    console.print()
    for line in account_lines(report):
        console.print(f"• {safe(line)}")


SEVERITY_COLOURS = {"high": "red", "moderate": "yellow", "low": "cyan", "info": "dim"}


def render_finding(console: Console, finding: Finding) -> None:
    """A finding as ``show`` prints it: severity, title and id; the fix; the expected gain."""
    colour = SEVERITY_COLOURS.get(finding.severity, "white")
    console.print(f"  [{colour}]{finding.severity}[/{colour}] {safe(finding.title)}  [dim]({finding.id})[/dim]")
    console.print(f"    fix: {safe(finding.fix)}")
    if finding.expected_gain:
        console.print(f"    expected gain: {safe(finding.expected_gain)}")


START_SHOWN_SECONDS = 0.001  # a stage's start-up shown in its own column from this long
SHOWN_FIX_SHARE = 0.2  # a stage's fix is shown where it holds at least this share of the input's cost


def render_stages(console: Console, split: dict | None) -> None:
    """The pipeline's stages as timed on their own (under the input_bound finding): own cost per batch,
    share of the input's cost, cores, the function, the fix; or why they were not timed."""
    rows = stage_table_rows(split)
    if not rows:
        why = (split or {}).get("stages_why")
        if why:
            console.print(f"    stages: not timed: {safe(why)}")
        return
    per_start = int((split or {}).get("stages_batches_per_start") or 0)
    starts = per_start > 0 and any((r.get("start_seconds") or 0) >= START_SHOWN_SECONDS for r in rows)
    table = Table(box=None, padding=(0, 1), pad_edge=False)
    for name, justify in (("stage", "left"), ("own/batch", "right"), *((("of it at start", "right"),) if starts else ()),
                          ("share", "right"), ("cores", "right"), ("function", "left"), ("fix", "left")):
        table.add_column(name, justify=justify)
    for row in rows:
        own, share = row.get("seconds_per_batch"), row.get("share")
        function = " ".join(x for x in (row.get("function"), row.get("location") and f"({row['location']})") if x)
        start = [format_seconds((row.get("start_seconds") or 0.0) / per_start) if own is not None else "-"] if starts else []
        table.add_row(safe(str(row.get("stage"))), format_seconds(own) if own is not None else "not timed", *start,
                      f"{share:.0%}" if share is not None else "-",
                      f"{row['cores']:.1f}" if row.get("cores") is not None else "-",
                      safe(function), safe(row.get("fix") or "") if (share or 0) >= SHOWN_FIX_SHARE else "")
    how = (split or {}).get("stages_measured_by")
    console.print(f"    stages (source first), each timed on its own{f' over {safe(how)}' if how else ''}"
                  + (f"; own/batch counts each iterator's start spread over its {per_start} batches" if starts else "")
                  + ":")
    console.print(Padding(table, (0, 0, 0, 4)))
    if (split or {}).get("stages_untimed"):
        console.print(f"    [dim]not timed: {safe(split['stages_untimed'])}[/dim]")  # type: ignore[index]
    render_hot_lines(console, hot_stage(split))


def render_hot_lines(console: Console, row: dict | None) -> None:
    """The costliest Python stage's hottest lines (share of py-spy's samples in its function, the line),
    with the sampler's cost; or why they were not sampled."""
    if row is None:
        return
    if not row.get("hot_lines"):
        console.print(f"    hot lines of {safe(str(row.get('function')))}: not sampled: {safe(row['hot_lines_why'])}")
        return
    console.print(f"    hot lines of {safe(str(row.get('function')))} ({row.get('hot_samples')} py-spy samples, "
                  f"sampling cost {row.get('sampling_cpu_seconds', 0.0):.2f} s CPU):")
    for line in row["hot_lines"]:
        console.print(f"      {line['share']:>4.0%}  {safe(line['location'])}  {safe(line['code'])}")


def fixable_findings(report) -> list[str]:
    """The ids of the run's findings ``tensorgauge fix`` has an edit for at the sites the run recorded."""
    from tensorgauge.edit.plan import Edit, plan
    from tensorgauge.edit.sites import read_sites

    sites = read_sites(report.events)
    if not sites.recorded:
        return []
    edits = [p for p in plan(report.findings, sites, report.input_split) if isinstance(p, Edit)]
    return list(dict.fromkeys(e.finding for e in edits))


def render_trials(console: Console, result) -> None:
    """The --try-fixes table: each fix's median step, speedup over the job as it is, and
    whether it reaches the compute-only limit."""
    trials, limit = result.trials, result.compute_only_step_seconds
    trained = "the custom training loop" if result.loop else "the first fit"
    table = Table(box=None, header_style="bold", title=f"Fixes, each timed on a window of {trained}",
                  title_justify="left", title_style="bold")
    for column in ("fix", "what", "step (median)", "speedup", "at the limit", "run"):
        table.add_column(column, justify="right" if column in ("step (median)", "speedup") else "left")
    # At the compute-only limit, input fixes cannot help; fixes that change the compute itself still may.
    at_limit = trials[0].reaches_limit is True
    best = max((t for t in trials[1:] if t.speedup and t.gain is not False
                and (not at_limit or t.changes_compute)), key=lambda t: t.speedup or 0.0, default=None)
    for trial in trials:
        speedup = f"{trial.speedup:.2f}x" if trial.speedup else "-"
        if trial.gain is False and trial.speedup:
            speedup += " (noise)"
        if best is not None and trial is best and (trial.speedup or 0) > 1.05:
            speedup = f"[green]{speedup}[/green]"
        reached = {True: "yes", False: "no", None: "-"}[trial.reaches_limit]
        table.add_row(trial.fixes, safe(trial.what), format_seconds(trial.step_seconds_median), speedup,
                      reached, trial.run_id)
    console.print(table)
    if limit:
        how = ("the loop's step less its wait in next()" if result.loop
               else "the train step on one cached batch, no input work")
        console.print(f"Compute-only limit: {format_seconds(limit)} a step ({how}).")
    for fix, why in result.not_tried.items():
        console.print(f"Not tried: {fix}, because {safe(why)}.")
    if len(trials) == 1:
        console.print("No fix applies without code edits: fit does not get a tf.data.Dataset, runs compiled, "
                      "and TensorFlow may use every CPU allowed.")
        return
    windows = len(trials[0].window_medians)
    if at_limit and (best is None or (best.speedup or 0.0) <= 1.05):
        console.print(f"The job already runs at its compute-only limit ({format_seconds(trials[0].step_seconds_median)}"
                      f" a step against {format_seconds(limit)}): no fix to name; what is left is the model's own "
                      "compute.")
    elif best is not None and best.speedup and best.speedup > 1.05:
        console.print(f"Best: {best.fixes}, {best.speedup:.2f}x faster steps ({safe(best.what)})"
                      + (f", faster in each of its {windows} windows than the job as it is in any." if best.gain
                         else "."))
    else:
        console.print("None of the fixes made steps faster by more than 5%"
                      + (f" outside the spread of {windows} repeated windows." if windows > 1 else "."))
    for trial in trials:
        if trial.caveat:
            console.print(f"Note on {trial.fixes}: {safe(trial.caveat)}.")
    console.print("These trials change the job without editing it; 'tensorgauge fix RUN' writes the code-level fixes "
                  "of a run (cache, parallel map, prefetch, compile's arguments) as a patch to your files and "
                  "--verify times each on the whole job.")
    if limit and not any(t.reaches_limit for t in trials):
        if best is not None and best.fixes == "cache":
            console.print(f"No fix reaches the limit; cache comes closest ({format_seconds(best.step_seconds_median)} "
                          f"a step against {format_seconds(limit)}): what remains is reading the cache and "
                          "Keras' own loop.")
        else:
            console.print("No fix reaches the limit: the input work itself is the cost. Do less of it per element: "
                          ".cache() after a deterministic map so it runs once, or vectorise it (batch before map).")


VARIABLES_SHOWN = 20


def render_batch_search(console: Console, search: dict) -> None:
    """--find-batch-size: the trials, the fitted line and the recommendation."""
    table = Table(title="Batch size trials (first fit, in the job's process)", title_justify="left")
    for column in ("batch", "RSS peak", "examples/s", "step", "note"):
        table.add_column(column, justify="left" if column == "note" else "right")
    target = search.get("target_bytes")
    for t in search.get("trials") or []:
        peak = t.get("peak_bytes")
        note = t.get("error") or ("over the target" if target and peak is not None and peak > target else "")
        table.add_row(str(t.get("batch_size")), format_bytes(peak),
                      f"{t['examples_per_second']:,.0f}" if t.get("examples_per_second") else "-",
                      format_seconds(t["step_seconds"]) if t.get("step_seconds") else "-", note)
    console.print(table)
    if search.get("per_example_bytes") is not None:
        console.print(f"  memory ~ {format_bytes(search.get('fixed_bytes'))} + {format_bytes(search['per_example_bytes'])}"
                      f" per example (fitted to the trials); target {format_bytes(target)} = 80% of the budget "
                      f"{format_bytes(search.get('budget_bytes'))}")
    recommended = search.get("recommended_batch_size")
    if recommended:
        console.print(f"[bold]Recommended batch size: {recommended}[/bold] (the job's: "
                      f"{search.get('original_batch_size')}; reached by {safe(str(search.get('how')))}; trials took "
                      f"{format_seconds(search.get('seconds') or 0)})")
        if search.get("recommendation_reason"):
            console.print(f"  {safe(str(search['recommendation_reason']))}")
        console.print(f"  {safe(str(search.get('caveat') or ''))}")
    else:
        console.print(f"[yellow]No recommendation: {safe(str(search.get('reason') or 'no batch size fitted'))}"
                      "[/yellow]")


def render_devices(console: Console, result: dict) -> None:
    """``tensorgauge devices``: weights per device, the variables, op placement, findings."""
    console.print(f"[bold]{safe(str(result['path']))}[/bold]  ({result['format']}, TensorFlow "
                  f"{result['tensorflow_version']}; devices: {safe(', '.join(result['devices']))})")
    if result.get("load_device"):
        console.print(f"  loaded under tf.device('{safe(result['load_device'])}')")
    table = Table(box=None, header_style="bold", title="Weights", title_justify="left", title_style="bold")
    for column in ("device", "variables", "bytes"):
        table.add_column(column, justify="left" if column == "device" else "right")
    for device, entry in sorted(result["weights_by_device"].items()):
        table.add_row(device, str(entry["variables"]), format_bytes(entry["bytes"]))
    console.print(table)
    variables = Table(box=None, header_style="bold")
    for column in ("variable", "shape", "dtype", "bytes", "device"):
        variables.add_column(column, justify="right" if column == "bytes" else "left")
    shown = result["variables"][:VARIABLES_SHOWN]
    for v in shown:
        variables.add_row(safe(v["name"]), "x".join(map(str, v["shape"])) or "scalar", v["dtype"],
                          format_bytes(v["bytes"]), v["device"])
    console.print(variables)
    if len(result["variables"]) > len(shown):
        console.print(f"  ... and {len(result['variables']) - len(shown)} more (--json lists all)")
    shapes = ", ".join("x".join(map(str, s)) for s in result.get("probe_input_shapes") or [])
    console.print(f"\n[bold]Ops of one call[/bold] on zeros of shape {shapes}:")
    for device, count in sorted(result["ops_by_device"].items()):
        top = ", ".join(f"{o['type']} {format_seconds(o['seconds'])}" for o in result["top_ops_by_device"].get(device, []))
        console.print(f"  {device}: {count} ops" + (f"; by time: {safe(top)}" if top else ""))
    if result["cpu_fallback_ops"]:
        console.print(f"  without a GPU kernel (on the CPU): {safe(', '.join(result['cpu_fallback_ops']))}")
    if result.get("note"):
        console.print(f"\n{result['note']}")
    for f in result["findings"]:
        console.print(f"\n  [bold]{f['severity']}[/bold] {safe(f['title'])}  ({f['id']})")
        console.print(f"    fix: {safe(f['fix'])}")


def render_window(console: Console, report: RunReport, samples: list[Sample], start: float, end: float) -> None:
    """Every sample between ``start`` and ``end`` (seconds from the run's start), with the phase it fell in."""
    r = report.record
    console.print(f"[bold]{safe(r.name or r.run_id)}[/bold]  {format_seconds(start)} to {format_seconds(end)} "
                  f"from the start: {len(samples)} samples (every {r.interval_seconds:g} s recorded)")
    if not samples:
        console.print("  no samples in this window (the run is "
                      f"{format_seconds(r.wall_seconds or report.timeline.get('wall_seconds'))} long)")
        return
    gpus = any(s.gpus for s in samples)
    table = Table(box=None, header_style="bold")
    # Every shown sampled metric (model.shown_metrics) that this stretch has a reading of.
    metrics = [m for m in shown_metrics() if any(getattr(s, m.name) is not None for s in samples)]
    columns = ["t (s)", "CPU-s"] + [m.label for m in metrics] + (["GPU util", "GPU mem"] if gpus else []) \
        + ["phase"]
    for column in columns:
        table.add_column(column, justify="left" if column == "phase" else "right", no_wrap=True)
    phases = sorted(report.phases, key=lambda p: p.start)
    for s in samples:
        inside = [p for p in phases if p.start <= s.t <= p.end]
        phase = max(inside, key=lambda p: p.start).name if inside else ""
        row = [f"{s.t:.3f}", f"{s.cpu_seconds:.2f}"] + [format_quantity(getattr(s, m.name), m.unit) for m in metrics]
        if gpus:
            util = [g.util_percent for g in s.gpus if g.util_percent is not None]
            memory = [g.memory_used_bytes for g in s.gpus if g.memory_used_bytes is not None]
            row += [f"{max(util):.0f}%" if util else "-", format_bytes(max(memory)) if memory else "-"]
        table.add_row(*row, safe(phase))
    console.print(table)
