"""What held the memory: findings about the peak, data sets kept in memory,
memory that keeps growing, and a budget stop (pure: from a recorded run)."""

from __future__ import annotations

import statistics

import numpy as np

from tensorgauge.analyse.rules import RunFacts, rule
from tensorgauge.hook.protocol import Kind
from tensorgauge.model import Event, Finding, Phase
from tensorgauge.series import SampleSeries
from tensorgauge.units import format_bytes

DATASET_IN_MEMORY_BYTES = 100 << 20  # from_tensor_slices inputs worth reporting
# Growth after the first epoch (the allocator warms up during it) worth reporting:
GROWTH_SHARE_PER_EPOCH = 0.05  # of the RSS at the end of the first epoch
GROWTH_MIN_BYTES_PER_EPOCH = 32 << 20
GROWTH_MIN_CORRELATION = 0.9  # of RSS with time: a steady rise, not one jump


def peak_phase(phases: list[Phase], t: float | None) -> Phase | None:
    """The innermost phase open at ``t``."""
    if t is None:
        return None
    inside = [p for p in phases if p.start <= t <= p.end]
    return max(inside, key=lambda p: p.start) if inside else None


def _datasets(events: list[Event]) -> tuple[int, list[dict]]:
    """(bytes given to from_tensor_slices, shuffles whose buffer holds the whole data set)."""
    sliced = sum(int(e.data.get("bytes") or 0) for e in events
                 if e.kind == Kind.DATASET and e.data.get("op") == "from_tensor_slices")
    whole = [e.data for e in events if e.kind == Kind.DATASET and e.data.get("op") == "shuffle"
             and (e.data.get("elements") or 0) > 0 and e.data.get("buffer_size", 0) >= e.data["elements"]]
    return sliced, whole


def _peak_sample(samples: SampleSeries) -> tuple[float, int] | None:
    """(t, RSS) of the sample with the largest RSS (the first of equals)."""
    if not len(samples):
        return None
    i = int(np.nanargmax(samples["rss_bytes"]))
    return float(samples.t[i]), int(samples["rss_bytes"][i])


def _growth(phases: list[Phase], samples: SampleSeries) -> tuple[int, int] | None:
    """(RSS after the first epoch, growth per epoch) of the first fit whose RSS rises
    steadily through its later epochs.

    The first epoch is left out: allocators and caches warm up in it. The rise is the
    least-squares slope of the RSS samples from the end of the first epoch to the end of
    the last, so a run stopped at an epoch boundary (a budget stop) still counts; it needs
    one whole later epoch and a steady rise (correlation >= GROWTH_MIN_CORRELATION)."""
    fits: dict[int | None, list[Phase]] = {}
    for p in sorted(phases, key=lambda p: p.start):
        if p.kind == "epoch":
            fits.setdefault(p.parent, []).append(p)
    for epochs in fits.values():
        if len(epochs) < 2:
            continue
        t0, t1 = epochs[0].end, epochs[-1].end
        window = samples.between(t0, t1)
        ts, rss = window.t, window["rss_bytes"]
        if len(ts) < 3 or np.ptp(ts) == 0 or np.ptp(rss) == 0:
            continue
        slope = float(np.polyfit(ts - ts[0], rss, 1)[0])
        per_epoch = int(slope * statistics.median(p.end - p.start for p in epochs[1:]))
        start = epochs[0].rss_end_bytes or int(rss[0])
        if (float(np.corrcoef(ts, rss)[0, 1]) >= GROWTH_MIN_CORRELATION
                and per_epoch >= max(GROWTH_MIN_BYTES_PER_EPOCH, GROWTH_SHARE_PER_EPOCH * start)):
            return start, per_epoch
    return None


def _budget_fix(findings: list[Finding]) -> str:
    causes = [f.fix for f in findings if f.id in ("dataset_in_memory", "memory_growth")]
    fix = "Resume by running the same command again: the checkpoint is restored."
    if causes:
        return fix + " To fit the budget: " + " ".join(causes)
    return fix + " A smaller batch size or model lowers the peak."


@rule("dataset_in_memory", category="memory")
def dataset_in_memory(f: RunFacts) -> Finding | None:
    sliced, whole_shuffles = _datasets(f.of_kind(Kind.DATASET))
    if sliced < DATASET_IN_MEMORY_BYTES:
        return None
    peak = _peak_sample(f.samples)
    extra = sum(int(d["buffer_size"] / d["elements"] * sliced) for d in whole_shuffles)
    return Finding(
        id="dataset_in_memory", severity="moderate",
        title=f"The data set is held in memory: from_tensor_slices took {format_bytes(sliced)} of arrays",
        evidence={"from_tensor_slices_bytes": sliced, "shuffle_buffers_holding_all": whole_shuffles,
                  "rss_peak_bytes": peak[1] if peak else None},
        fix="Stream the data instead of slicing in-memory arrays: write it once to TFRecord files and read "
            "them with tf.data.TFRecordDataset, or use tf.data.Dataset.from_generator / a keras.utils.PyDataset; "
            "keep the shuffle buffer well below the data set's size (e.g. 10,000 elements).",
        expected_gain=f"about {format_bytes(sliced + extra)} less memory")


@rule("memory_growth", category="memory")
def memory_growth(f: RunFacts) -> Finding | None:
    growth = _growth(f.phases, f.samples)
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


@rule("memory_budget", category="memory")
def memory_budget(f: RunFacts) -> Finding | None:
    """The budget stop, with what held the memory (read from the memory findings before it)."""
    budget = f.record.budget or {}
    if not budget.get("stopped"):
        return None
    peak = _peak_sample(f.samples)
    at_peak = peak_phase(f.phases, peak[0] if peak else None)
    sliced, _ = _datasets(f.of_kind(Kind.DATASET))
    growth = _growth(f.phases, f.samples)
    limit = budget.get("max_memory_bytes")
    where = f" during '{at_peak.name}'" if at_peak else ""
    held = [f"peak {format_bytes(budget.get('peak_bytes'))}{where}"]
    if sliced:
        held.append(f"{format_bytes(sliced)} from from_tensor_slices")
    if growth:
        held.append(f"growth of {format_bytes(growth[1])} per epoch")
    return Finding(
        id="memory_budget", severity="high",
        title=f"Stopped by the memory budget of {format_bytes(limit)}: " + ", ".join(held),
        evidence={"budget_bytes": limit, "peak_bytes": budget.get("peak_bytes"),
                  "peak_phase": at_peak.name if at_peak else None, "from_tensor_slices_bytes": sliced,
                  "growth_per_epoch_bytes": growth[1] if growth else None,
                  "checkpoint": budget.get("checkpoint"), "graceful": budget.get("graceful")},
        fix=_budget_fix(f.found),
        expected_gain=None)
