"""A short plain-words account of where time, CPU and memory went."""

from __future__ import annotations

from collections.abc import Sequence

from tensorgauge.analyse.phases import top_level
from tensorgauge.hook.protocol import BATCH_TRIAL_PHASE, TRAIN_LOOP, Exit, Kind
from tensorgauge.model import MEMORY_MEASURES, Event, Phase, Summary
from tensorgauge.units import format_bytes, format_seconds, format_share

KIND_WORDS = {"custom": "your own phases (tensorgauge.phase)"}
TRIAL_WORDS = "the batch-size trials (--find-batch-size)"


def _kind_totals(phases: list[Phase], cpu_total: float) -> dict[str, list]:
    """{kind: [wall, CPU-s, count]} of the top-most phases of each kind (not counted twice when
    nested). Phases of a kind that overlap (siblings a job opened together, workers' fits) count their
    time once: the wall is the time any of them ran, at most the run's; the CPU of a process's
    overlapping phases is that of the one spanning them all, else at most their time at their peak."""
    groups: dict[str, dict] = {}
    count: dict[str, int] = {}
    for phase in phases:
        kind = phase.kind
        if phase.parent is not None and phases[phase.parent].kind == kind:
            continue
        groups.setdefault(kind, {}).setdefault(phase.pid, []).append(phase)
        count[kind] = count.get(kind, 0) + 1
    totals: dict[str, list] = {}
    for kind, by_pid in groups.items():
        spans = [(p.start, p.end) for group in by_pid.values() for p in group]
        cpu = sum(_overlapping_cpu(group) for group in by_pid.values())
        totals[kind] = [_union_seconds(spans), min(cpu, cpu_total) if cpu_total > 0 else cpu, count[kind]]
    return totals


def _union_seconds(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _overlapping_cpu(phases: list[Phase]) -> float:
    """CPU-s of one process's phases, those that overlap taken together."""
    total, group, reach = 0.0, [], float("-inf")
    for phase in sorted(phases, key=lambda p: p.start) + [None]:
        if phase is not None and phase.start < reach:
            group.append(phase)
            reach = max(reach, phase.end)
            continue
        if group:
            start = group[0].start
            spanning = [p.cpu_seconds for p in group if p.start <= start and p.end >= reach]
            summed = sum(p.cpu_seconds for p in group)
            total += max(spanning) if spanning else min(summed, (reach - start) * max(p.cores_busy_peak for p in group))
        if phase is not None:
            group, reach = [phase], phase.end
    return total


def shutdown(events: Sequence[Event], cpu_total: float, wall_seconds: float) -> tuple[float, float] | None:
    """(wall, CPU-s) from the job's ``exit`` event (its last atexit handler) to
    the process's end; only for a single hooked process, where it is exact."""
    exits = [e for e in events if e.kind == Kind.EXIT]
    pids = {e.pid for e in events}
    cpu = exits[0].read(Exit).get("cpu") if len(exits) == 1 else None
    if len(pids) != 1 or cpu is None:
        return None
    return max(0.0, wall_seconds - exits[0].t), max(0.0, cpu_total - cpu)


MODULE_WORDS = {"tensorflow": "TensorFlow", "keras": "Keras", "jax": "JAX", "torch": "PyTorch"}


def account(phases: list[Phase], summary: Summary, wall_seconds: float, cores_allowed: float | None,
            events: Sequence[Event] = (), events_dropped: int | None = None) -> list[str]:
    """Sentences, most telling first; ``events_dropped``: the job's events the run did not keep."""
    lines: list[str] = []
    if wall_seconds <= 0:
        return lines
    cores_note = f" of {cores_allowed:g} allowed" if cores_allowed else ""
    lines.append(f"The job ran {format_seconds(wall_seconds)} and used {summary.cpu_seconds:.2f} CPU-seconds: "
                 f"{summary.cores_busy_mean:.2f} cores busy on average{cores_note}, "
                 f"peak {summary.cores_busy_peak:.2f}; memory (RSS, {MEMORY_MEASURES[summary.rss_peak_measure]}) "
                 f"peaked at {format_bytes(summary.rss_peak_bytes)}.")
    if not phases:
        lines.append("No TensorFlow phases were seen (the job did not import TensorFlow, or ran with --no-hook).")
        return lines

    by_kind = []
    totals = _kind_totals(phases, summary.cpu_seconds)
    words = dict(KIND_WORDS)
    trials = [p.name.startswith(BATCH_TRIAL_PHASE) for p in phases if p.kind == "custom"]
    if any(trials):  # --find-batch-size's trials are custom phases, but not the user's own
        words["custom"] = TRIAL_WORDS if all(trials) else f"{KIND_WORDS['custom']} and {TRIAL_WORDS}"
    if any(p.kind == "fit" and p.name == TRAIN_LOOP for p in phases):
        words["fit"] = "training (the job's own train loop)" if not any(
            p.kind == "fit" and p.name != TRAIN_LOOP for p in phases) else "training (fit and the job's train loop)"
    for kind in ("import", "fit", "evaluate", "predict", "save", "load", "custom"):
        wall, cpu, count = totals.get(kind, (0.0, 0.0, 0))
        if count:
            by_kind.append((kind, wall, cpu, count))
    biggest = max(by_kind, key=lambda k: k[1])
    kind, wall, cpu, count = biggest
    lines.append(f"Most of the time went to {words.get(kind, kind)} ({format_seconds(wall)}, {format_share(wall, wall_seconds)} "
                 f"of the run, {cpu:.2f} CPU-s).")
    import_wall = next((k[1] for k in by_kind if k[0] == "import"), 0.0)
    fit_wall = next((k[1] for k in by_kind if k[0] == "fit"), 0.0)
    if import_wall and fit_wall and import_wall > fit_wall:
        modules = dict.fromkeys(MODULE_WORDS.get(p.name.removeprefix("import "), p.name.removeprefix("import "))
                                for p in phases if p.kind == "import")
        lines.append(f"Importing {' and '.join(modules)} ({format_seconds(import_wall)}) took longer than training "
                     f"({format_seconds(fit_wall)}): for short jobs start-up dominates.")

    busy = [(k, cpu / wall) for k, wall, cpu, _ in by_kind if wall > 0.05]
    if len(busy) >= 2:
        hi = max(busy, key=lambda k: k[1])
        lo = min(busy, key=lambda k: k[1])
        if hi[1] > 1.5 * lo[1] and hi[1] - lo[1] > 0.25:
            # The seed's question (why CPU drops after saving) only where the job saved something.
            saved = " A drop after saving is the job moving to lighter work, not the save." if "save" in totals else ""
            name = {"fit": "training"} if "fit" in words and words["fit"] != "fit" else {}
            lines.append(f"CPU use follows the phase: {name.get(hi[0], hi[0])} kept {hi[1]:.2f} cores busy, "
                         f"{name.get(lo[0], lo[0])} only "
                         f"{lo[1]:.2f}.{saved}")

    peak = max(phases, key=lambda p: p.rss_peak_bytes)
    lines.append(f"Memory peaked during '{peak.name}' at {format_bytes(peak.rss_peak_bytes)}.")

    outside_wall = wall_seconds - sum(p.wall_seconds for p in top_level(phases) if p.pid == phases[0].pid)
    outside_cpu = summary.cpu_seconds - sum(p.cpu_seconds for p in top_level(phases))
    if outside_wall > 0.1 * wall_seconds:
        lines.append(f"{format_seconds(outside_wall)} ({format_share(outside_wall, wall_seconds)}) and "
                     f"{max(outside_cpu, 0.0):.2f} CPU-s were outside any phase: the interpreter's start, "
                     "other imports and your own code between the framework's calls.")
    teardown = shutdown(events, summary.cpu_seconds, wall_seconds)
    if teardown and teardown[1] > 0.1 * summary.cpu_seconds:
        lines.append(f"After the job's last line, shutting Python and its frameworks down took "
                     f"{format_seconds(teardown[0])} and {teardown[1]:.2f} CPU-s.")
    incomplete = [p for p in phases if not p.complete and not p.end_dropped]
    if incomplete:
        lines.append(f"The job ended inside '{incomplete[-1].name}': its figures run to the job's end.")
    lines += _dropped(phases, events_dropped)
    return lines


def _dropped(phases: list[Phase], events_dropped: int | None) -> list[str]:
    """What the events the run did not keep leave out: the phases whose end may be among them."""
    if not events_dropped:
        return []
    unended = [p for p in phases if p.end_dropped]
    line = f"{events_dropped:,} events from the job were dropped (more than a run keeps, or lost unread)"
    if unended:
        others = f" and {len(unended) - 1} more phase{'s' if len(unended) > 2 else ''}" if len(unended) > 1 else ""
        line += (f"; the end of '{unended[0].name}'{others} was not recorded: their figures run to the job's end")
    return [line + "."]
