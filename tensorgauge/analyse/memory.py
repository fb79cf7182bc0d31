"""What held the memory: findings about the peak, data sets kept in memory,
memory that keeps growing, and a budget stop (pure: from a recorded run)."""

from __future__ import annotations

import statistics

import numpy as np

from tensorgauge.analyse.memory_breakdown import LABELS, describe, post_mortem
from tensorgauge.analyse.phases import model_calls
from tensorgauge.analyse.rules import RunFacts, rule
from tensorgauge.hook.protocol import Dataset, InputProbe, Kind, ModelsBuilt
from tensorgauge.model import Event, Finding, Phase, payloads
from tensorgauge.series import SampleSeries
from tensorgauge.units import format_bytes

DATASET_IN_MEMORY_BYTES = 100 << 20  # from_tensor_slices inputs worth reporting
# Growth after the first epoch (the allocator warms up during it) worth reporting:
GROWTH_SHARE_PER_EPOCH = 0.05  # of the RSS at the end of the first epoch
GROWTH_MIN_BYTES_PER_EPOCH = 32 << 20
GROWTH_MIN_CORRELATION = 0.9  # rank correlation of RSS with time: a steady rise, not one jump
# Repeated fit/predict/evaluate calls: RSS at each call's end, the first call (warm-up) left out.
LEAK_MIN_CALLS = 6
LEAK_MIN_BYTES = 32 << 20  # growth over the calls worth reporting
LEAK_KEEPS_RISING = 0.5  # the later half's growth per call against the earlier half's: a leak, not a plateau
LEAK_HIGH_BYTES = 1 << 30
MODELS_NOT_CLEARED = 10  # models built since the last clear_session() worth reporting
MODELS_HELD_MODERATE = 64 << 20


def peak_phase(phases: list[Phase], t: float | None) -> Phase | None:
    """The innermost phase open at ``t``."""
    if t is None:
        return None
    inside = [p for p in phases if p.start <= t <= p.end]
    return max(inside, key=lambda p: p.start) if inside else None


def _datasets(events: list[Event]) -> tuple[int, list[Dataset]]:
    """(bytes given to from_tensor_slices, shuffles whose buffer holds the whole data set)."""
    datasets = payloads(events, Dataset)
    sliced = sum(int(d.get("bytes") or 0) for d in datasets if d.get("op") == "from_tensor_slices")
    whole = [d for d in datasets if d.get("op") == "shuffle"
             and (elements := d.get("elements") or 0) > 0 and d.get("buffer_size", 0) >= elements]
    return sliced, whole


def _peak_sample(samples: SampleSeries) -> tuple[float, int] | None:
    """(t, RSS) of the sample with the largest RSS (the first of equals)."""
    if not len(samples):
        return None
    i = int(np.nanargmax(samples["rss_bytes"]))
    return float(samples.t[i]), int(samples["rss_bytes"][i])


def _growth(phases: list[Phase], samples: SampleSeries, cut_short: bool = False,
            own_from: float | None = None) -> tuple[int, int] | None:
    """(RSS after the first epoch, growth per epoch) of the first fit whose RSS rises
    steadily through its later epochs, read up to ``own_from`` (where the tool's profiler began:
    its trace is the tool's memory).

    The first epoch is left out: allocators and caches warm up in it. The rise is the
    least-squares slope of the RSS samples from the end of the first epoch to the end of
    the last, with a steady rise (:func:`_rank_correlation` >= GROWTH_MIN_CORRELATION) over two later
    epochs: within one, a buffer refilled each epoch rises just as steadily (a shuffle over
    the whole data set held the last epoch's buffer while filling the next: +1 GiB in epoch
    2 of a 2-epoch fit, flat after in a 4-epoch one). A run cut short (a budget stop, a
    kill, an error) has what it had: one whole later epoch counts there."""
    fits: dict[int | None, list[Phase]] = {}
    for p in sorted(phases, key=lambda p: p.start):
        if p.kind == "epoch":
            fits.setdefault(p.parent, []).append(p)
    for epochs in fits.values():
        if len(epochs) < (2 if cut_short else 3):
            continue
        t0, t1 = epochs[0].end, epochs[-1].end
        if own_from is not None and t0 < own_from < t1:
            t1 = own_from
        window = samples.between(t0, t1)
        ts, rss = window.t, window["rss_bytes"]
        if len(ts) < 3 or np.ptp(ts) == 0 or np.ptp(rss) == 0:
            continue
        slope = float(np.polyfit(ts - ts[0], rss, 1)[0])
        per_epoch = int(slope * statistics.median(p.end - p.start for p in epochs[1:]))
        start = epochs[0].rss_end_bytes or int(rss[0])
        if (_rank_correlation(ts, rss) >= GROWTH_MIN_CORRELATION
                and per_epoch >= max(GROWTH_MIN_BYTES_PER_EPOCH, GROWTH_SHARE_PER_EPOCH * start)):
            return start, per_epoch
    return None


def _rank_correlation(ts: np.ndarray, values: np.ndarray) -> float:
    """Spearman's correlation of ``values`` with time: 1 for any rise that never falls back, whatever its
    pace (a leak of 8 MiB a step whose steps slowed 5x within the window had a linear correlation of 0.897
    and 0.91 in two runs), about 0.87 or less for one jump between two flat stretches."""
    return float(np.corrcoef(_ranks(ts), _ranks(values))[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    """Each value's rank, equal values given the mean of their ranks."""
    order = np.empty(len(values))
    order[np.argsort(values, kind="stable")] = np.arange(len(values))
    _, group = np.unique(values, return_inverse=True)
    return (np.bincount(group, order) / np.bincount(group))[group]


# What importing a framework alone takes (RSS at the end of the import, measured on TensorFlow 2.21 /
# Keras 3.15, CPU): a budget below it stops every job that imports it, before any training.
IMPORT_FOOTPRINT_BYTES = {"tensorflow": 520 << 20, "keras": 520 << 20}


def _budget_fix(findings: list[Finding], checkpoint: str | None) -> str:
    causes = [f.fix for f in findings if f.id in ("dataset_in_memory", "memory_growth")]
    fix = ("Resume by running the same command again: the checkpoint is restored." if checkpoint else
           "No checkpoint was written (the job was killed, or stopped before it could save one): "
           "running the same command again starts over.")
    if causes:
        return fix + " To fit the budget: " + " ".join(causes)
    return fix + " A smaller batch size or model lowers the peak."


def _import_stop(budget: dict, phase: Phase) -> tuple[str, str]:
    """(title, fix) of a budget stop inside an import: the budget is below the framework's own footprint."""
    module = phase.name.removeprefix("import ").strip()
    footprint = IMPORT_FOOTPRINT_BYTES.get(module.split(".")[0])
    own = f"~{format_bytes(footprint)} measured for TensorFlow 2.21" if footprint else "its own footprint"
    title = (f"Stopped by the memory budget of {format_bytes(budget.get('max_memory_bytes'))} during "
             f"'{phase.name}': the budget is below what importing {module} alone takes ({own})")
    fix = (f"Give --max-memory more than importing {module} takes ({own}) plus what the job needs to train; "
           "nothing was trained and no checkpoint was written, so there is nothing to resume.")
    return title, fix


@rule("dataset_in_memory", category="memory")
def dataset_in_memory(f: RunFacts) -> Finding | None:
    sliced, whole_shuffles = _datasets(f.of_kind(Kind.DATASET))
    if sliced < DATASET_IN_MEMORY_BYTES:
        return None
    peak = _peak_sample(f.samples)
    # What a shuffle buffer holding the whole data set adds: counted by the hook (slices of the sliced
    # tensor are shared, not copied), else estimated from the arrays (runs recorded before 0.2).
    extra = sum(int(holds) if (holds := d.get("holds_bytes")) is not None
                else int(d["buffer_size"] / d["elements"] * sliced) for d in whole_shuffles)
    return Finding(
        id="dataset_in_memory", severity="moderate",
        title=f"The data set is held in memory: from_tensor_slices took {format_bytes(sliced)} of arrays",
        evidence={"from_tensor_slices_bytes": sliced, "shuffle_buffers_holding_all": whole_shuffles,
                  "rss_peak_bytes": peak[1] if peak else None},
        fix="Stream the data instead of slicing in-memory arrays: write it once to TFRecord files and read "
            "them with tf.data.TFRecordDataset, or use tf.data.Dataset.from_generator / a keras.utils.PyDataset; "
            "keep the shuffle buffer well below the data set's size (e.g. 10,000 elements).",
        expected_gain=f"about {format_bytes(sliced + extra)} less memory")


def _profiler_began(f: RunFacts) -> float | None:
    """When --diagnose's first profiler window began: it holds its trace until it stops, and the memory is
    kept after (+550 MiB over 10 steps of a windowed LSTM, read as the job's growth of 400 MiB an epoch)."""
    began = [e.t - (probe.get("stop_seconds") or 0.0) - sum(probe["step_seconds"]) - (probe.get("start_seconds") or 0.0)
             for e in f.of_kind(Kind.INPUT_PROBE) if (probe := e.read(InputProbe)).get("step_seconds")]
    return min(began, default=None)


@rule("memory_growth", category="memory", version=3)
def memory_growth(f: RunFacts) -> Finding | None:
    cut_short = bool((f.record.budget or {}).get("stopped")) or f.record.signal is not None \
        or f.record.exit_code not in (0, None)
    growth = _growth(f.phases, f.samples, cut_short, own_from=_profiler_began(f))
    if growth is None:
        return None
    start, per_epoch = growth
    return Finding(
        id="memory_growth", severity="moderate",
        title=f"Memory grows by {format_bytes(per_epoch)} per epoch during training",
        evidence={"rss_after_first_epoch_bytes": start, "growth_per_epoch_bytes": per_epoch},
        fix="Something keeps a reference to every batch or result: look for lists that collect tensors, "
            "arrays or histories inside callbacks or the training loop, and keep only what you need "
            "(e.g. float(loss) instead of the tensor).",
        expected_gain=f"about {format_bytes(per_epoch)} per epoch")


SWAP_GROWTH_BYTES = 256 << 20  # swap newly in use during the run worth reporting
SWAP_GROWTH_HIGH_BYTES = 1 << 30


@rule("swap_pressure", category="memory")
def swap_pressure(f: RunFacts) -> Finding | None:
    """The machine paged memory out to swap while the job ran: RAM ran short."""
    swap = f.samples["swap_used_bytes"]
    read = ~np.isnan(swap)
    if read.sum() < 2:
        return None
    times, swap = f.samples.t[read], swap[read]
    start = int(swap[0])
    at = int(np.argmax(swap))
    peak_t, peak = float(times[at]), int(swap[at])
    growth = peak - start
    if growth < SWAP_GROWTH_BYTES:
        return None
    at_peak = peak_phase(f.phases, peak_t)
    available = f.samples.reported("mem_available_bytes")
    where = f" during '{at_peak.name}'" if at_peak else ""
    return Finding(
        id="swap_pressure", severity="high" if growth >= SWAP_GROWTH_HIGH_BYTES else "moderate",
        title=f"The machine swapped {format_bytes(growth)} out to disk while the job ran (peak at "
              f"{peak_t:.0f} s{where}): RAM ran short",
        evidence={"swap_used_start_bytes": start, "swap_used_peak_bytes": peak, "swap_growth_bytes": growth,
                  "peak_t": round(peak_t, 3), "peak_phase": at_peak.name if at_peak else None,
                  "mem_available_min_bytes": int(available.min()) if len(available) else None,
                  "rss_peak_bytes": f.summary.rss_peak_bytes},
        fix="Make the job fit in RAM: a smaller batch or model, data streamed from files instead of held in "
            "arrays (see dataset_in_memory), fewer jobs on the machine at once; tensorgauge run --max-memory "
            "keeps the job inside a budget and stops it gracefully before it swaps.",
        expected_gain="steps stop waiting for pages read back from disk, often many times slower than RAM")


@rule("memory_budget", category="memory", after=("dataset_in_memory", "memory_growth"), version=2)
def memory_budget(f: RunFacts) -> Finding | None:
    """The budget stop, with what held the memory (read from the memory findings before it) and where it
    happened: the phase open when the watchdog acted, its peak being the figure it acted on."""
    budget = f.record.budget or {}
    if not budget.get("stopped"):
        return None
    peak_t = budget.get("peak_t")
    if peak_t is None:
        peak = _peak_sample(f.samples)
        peak_t = peak[0] if peak else None
    acted_at = next((budget[k] for k in ("killed_at", "stop_requested_at") if budget.get(k) is not None), peak_t)
    at_peak, stopped_in = peak_phase(f.phases, peak_t), peak_phase(f.phases, acted_at)
    sliced, _ = _datasets(f.of_kind(Kind.DATASET))
    growth = _growth(f.phases, f.samples)
    limit = budget.get("max_memory_bytes")
    where = f" during '{at_peak.name}'" if at_peak else ""
    held = [f"peak {format_bytes(budget.get('peak_bytes'))}{where}"]
    if sliced:
        held.append(f"{format_bytes(sliced)} from from_tensor_slices")
    if growth:
        held.append(f"growth of {format_bytes(growth[1])} per epoch")
    title = f"Stopped by the memory budget of {format_bytes(limit)}: " + ", ".join(held)
    fix = _budget_fix(f.found, budget.get("checkpoint"))
    if stopped_in is not None and stopped_in.kind == "import":
        title, fix = _import_stop(budget, stopped_in)
    return Finding(
        id="memory_budget", severity="high", title=title,
        evidence={"budget_bytes": limit, "peak_bytes": budget.get("peak_bytes"),
                  "peak_phase": at_peak.name if at_peak else None,
                  "stopped_in_phase": stopped_in.name if stopped_in else None,
                  "stopped_in_kind": stopped_in.kind if stopped_in else None,
                  "from_tensor_slices_bytes": sliced,
                  "growth_per_epoch_bytes": growth[1] if growth else None,
                  "checkpoint": budget.get("checkpoint"), "graceful": budget.get("graceful"),
                  "post_mortem": post_mortem(f.record, f.samples, f.events, f.phases)},
        fix=fix,
        expected_gain=None)


CAUSE_WORDS = {"oom_killer": "the kernel's OOM killer ended it", "framework_oom": "an allocation failed"}


@rule("out_of_memory", category="memory")
def out_of_memory(f: RunFacts) -> Finding | None:
    """The job died of memory (the kernel's OOM killer, or the framework's out-of-memory error): where,
    what held the memory then, and the fix that follows from its largest holder."""
    pm = post_mortem(f.record, f.samples, f.events, f.phases)
    if pm is None or pm["cause"] == "budget":  # a budget stop is memory_budget's
        return None
    # A killed job's last steps may not have reached the monitor (the hook sends them every 0.5 s).
    at_least = "at least " if pm["cause"] == "oom_killer" else ""
    where = (pm["path"] or "no phase") + (f", after {at_least}{pm['steps_done']} steps" if pm["steps_done"] else "")
    error = pm["error"] or {}
    what = CAUSE_WORDS[pm["cause"]] + (f" ({error.get('type') or error.get('error')})" if error else "")
    held = (f"; largest holder: {LABELS[pm['largest']]}" if pm["largest"] else "")
    breakdown = pm["memory_breakdown"]
    return Finding(
        id="out_of_memory", severity="high",
        title=f"The job ran out of memory: {what} in {where} at {format_bytes(pm['rss_bytes'])} RSS{held}",
        evidence=pm,
        fix=pm["fix"],
        expected_gain=(f"up to {format_bytes(breakdown[pm['largest']])} less memory where it died "
                       f"(memory then: {describe(breakdown)})" if breakdown else None))


def _models_since_clear(events: list[Event]) -> tuple[int, int | None] | None:
    """(models built since the last clear_session(), RSS growth over them) from models_built events."""
    built: list[tuple[int, int, int | None]] = []  # (count, since_clear, rss) of each event that has both counts
    for data in payloads(events, ModelsBuilt):
        count, since_clear = data.get("count"), data.get("since_clear")
        if isinstance(count, int) and isinstance(since_clear, int):
            built.append((count, since_clear, data.get("rss")))
    if not built:
        return None
    last = built[-1]
    # The events since the last clear: since_clear rises with count between them.
    run = [last]
    for before in reversed(built[:-1]):
        if last[0] - before[0] != last[1] - before[1]:
            break
        run.insert(0, before)
    first, rss = run[0][2], last[2]
    if len(run) < 2 or first is None or rss is None:
        return last[1], None
    return last[1], rss - first


@rule("memory_leak", "memory_plateau", category="memory", after=("retracing",), version=2)
def memory_leak(f: RunFacts) -> Finding | None:
    """RSS after repeated fit/predict/evaluate calls that rises call after call, and keeps rising: a
    leak. One that rose and then levelled off is a warm-up plateau: ``memory_plateau`` (info).

    Judged on the rise per call (the median of the rises from one call's end to the next: a single
    allocation somewhere in the run moves one of them, not the median), in the earlier and the later
    half of the calls after the first. What rose inside the calls and between them is told apart."""
    calls = [p for p in model_calls(f.phases, ("fit", "predict", "evaluate")) if p.rss_end_bytes]
    if len(calls) < LEAK_MIN_CALLS:
        return None
    ends = [int(p.rss_end_bytes or 0) for p in calls[1:]]
    # A rise over which a new model was built beside the ones before (no clear_session() between) is that
    # model's (keras-io's wide & deep: three models, a fit and an evaluate each), not a call keeping memory;
    # ten or more are models_not_cleared's. A model built after clear_session() explains no growth.
    built = [e.t for e in f.of_kind(Kind.MODELS_BUILT) if (e.read(ModelsBuilt).get("since_clear") or 0) >= 2]
    rises = [int(b.rss_end_bytes or 0) - int(a.rss_end_bytes or 0) for a, b in zip(calls[1:], calls[2:])
             if not any(a.end < t <= b.end for t in built)]
    if len(rises) < LEAK_MIN_CALLS - 2:
        return None
    half = len(rises) // 2
    early, late = statistics.median(rises[: max(half, 1)]), statistics.median(rises[half:])
    growth = ends[-1] - ends[0]
    inside = sum(p.rss_end_bytes - p.rss_start_bytes for p in calls[2:]
                 if p.rss_end_bytes is not None and p.rss_start_bytes is not None)
    kinds = sorted({p.kind for p in calls})
    evidence = {"calls": len(calls), "kinds": kinds, "rss_after_first_call_bytes": ends[0],
                "rss_after_last_call_bytes": ends[-1], "growth_per_call_early_bytes": round(early),
                "growth_per_call_late_bytes": round(late), "growth_inside_calls_bytes": inside,
                "growth_between_calls_bytes": growth - inside}
    what = "/".join(kinds)
    if early <= 0 or max(ends) - ends[0] < LEAK_MIN_BYTES:
        return None  # no steady rise from call to call (at most a jump or two)
    per_call = statistics.median(rises)
    if per_call * len(rises) < LEAK_MIN_BYTES or late < LEAK_KEEPS_RISING * early or late <= 0:
        return Finding(
            id="memory_plateau", severity="info",
            title=f"Memory rose by {format_bytes(max(ends) - ends[0])} over {len(calls)} {what} calls, then "
                  f"levelled off ({format_bytes(max(late, 0))} a call over the later half): a warm-up plateau, "
                  "not a leak",
            evidence=evidence,
            fix="Nothing to fix: allocators, caches and traced functions fill up once. Budget for the plateau.",
            expected_gain="none needed")
    models = _models_since_clear(f.events)
    retraced = any(x.id == "retracing" for x in f.found)
    if models and models[0] >= MODELS_NOT_CLEARED:
        cause = (f"{models[0]} Keras models were built without clear_session() in between: each keeps its "
                 "graph state. Build the model once and reuse it, or call keras.backend.clear_session() "
                 "before building the next.")
    elif retraced:
        cause = "tf.functions are retraced (see retracing): each trace keeps a graph. Give them fixed signatures."
    elif growth - inside > inside:
        cause = ("The memory is taken between the calls, in the job's own code: look for lists that collect "
                 "tensors, arrays or histories across calls, and keep only what you need (e.g. float(loss)).")
    else:
        cause = ("Something keeps a reference to each call's results: look for lists that collect tensors, "
                 "arrays or histories across calls, and keep only what you need (e.g. float(loss)).")
    total = per_call * len(rises)
    return Finding(
        id="memory_leak", severity="high" if total >= LEAK_HIGH_BYTES else "moderate",
        title=f"Memory grows by {format_bytes(per_call)} per {what} call and does not level off "
              f"({format_bytes(per_call)} x {len(rises)} calls after the first = {format_bytes(total)}; RSS rose "
              f"{format_bytes(growth)} in all)",
        evidence=evidence, fix=cause,
        expected_gain=f"about {format_bytes(per_call)} per call, {format_bytes(total)} over this run")


@rule("models_not_cleared", category="memory")
def models_not_cleared(f: RunFacts) -> Finding | None:
    """Keras models built again and again in one process without ``clear_session()``."""
    models = _models_since_clear(f.events)
    if models is None or models[0] < MODELS_NOT_CLEARED:
        return None
    count, grown = models
    held = f" holding {format_bytes(grown)} more memory" if grown and grown > 0 else ""
    return Finding(
        id="models_not_cleared",
        severity="moderate" if grown and grown >= MODELS_HELD_MODERATE else "low",
        title=f"{count} Keras models were built in one process without clear_session(){held}",
        evidence={"models_since_clear": count, "rss_growth_bytes": grown,
                  "clear_session_calls": f.payloads(ModelsBuilt)[-1].get("clears") or 0},
        fix="Call keras.backend.clear_session() before building each new model (in a sweep, a loop of "
            "experiments, cross-validation), or build the model once and reset its weights.",
        expected_gain=f"about {format_bytes(grown)} of memory back" if grown and grown > 0
        else "global Keras state stops growing")
