"""What held the memory, and what ended the job (pure: from a recorded run).

A breakdown splits an RSS figure into what the hook counted exactly — the model's
weights and the optimizer's variables (``memory_facts``), the arrays handed to ``fit``
or ``from_tensor_slices`` (with the RSS that call added: TensorFlow's copies), tf.data's buffers (``dataset`` events) — what was measured
(a fit's step working memory: the RSS peak of the epoch of its third batch over the RSS before
that batch), and
the residual (framework runtime, Python objects), never hidden. Components are taken
in that order and each is clipped to what RSS has left, so they never sum above it.

The end cause is one of :data:`END_CAUSES`; a job that died of memory (the kernel's
OOM killer, the framework's out-of-memory error, our budget) gets a post-mortem:
where it was, the breakdown at that moment, and the fix that follows from its
largest holder.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from tensorgauge.hook.protocol import BatchSearch, BatchTrial, Dataset, JobError, Kind, MemoryFacts, PhaseEnd
from tensorgauge.model import Event, Phase, RunRecord, payloads
from tensorgauge.series import SampleSeries
from tensorgauge.units import format_bytes

COMPONENTS = ("weights_bytes", "optimizer_bytes", "input_arrays_bytes", "data_buffers_bytes", "step_working_bytes")
LABELS = {"weights_bytes": "model weights", "optimizer_bytes": "optimizer variables",
          "input_arrays_bytes": "input arrays", "data_buffers_bytes": "tf.data buffers",
          "step_working_bytes": "step working memory", "residual_bytes": "the rest (framework, Python)"}
END_CAUSES = ("exit", "signal", "budget", "oom_killer", "framework_oom")
KERAS_CALLS = ("fit", "epoch", "evaluate", "predict")  # datasets Keras builds inside these are its own adapters
# Exceptions that mean an allocation failed (TensorFlow, PyTorch, Python); JAX raises an XlaRuntimeError
# whose message starts RESOURCE_EXHAUSTED.
OOM_ERRORS = ("ResourceExhaustedError", "OutOfMemoryError", "MemoryError")
OOM_MESSAGES = ("RESOURCE_EXHAUSTED", "out of memory")


def is_out_of_memory(error: dict[str, Any] | None) -> bool:
    if not error:
        return False
    message = str(error.get("message") or "")
    return error.get("type") in OOM_ERRORS or any(m.lower() in message.lower() for m in OOM_MESSAGES)


def _inside(t: float, phases: list[Phase], kinds: tuple[str, ...]) -> bool:
    return any(p.kind in kinds and p.start <= t <= p.end for p in phases)


def _innermost(t: float, phases: list[Phase], kind: str) -> Phase | None:
    around = [p for p in phases if p.kind == kind and p.start <= t <= p.end]
    return max(around, key=lambda p: p.start) if around else None


class Holders:
    """What the hook counted in a run, indexed by time once (a run may have thousands of phases)."""

    def __init__(self, events: list[Event], phases: list[Phase]):
        self.facts: list[tuple[float, MemoryFacts, float | None, int | None]] = []  # (t, payload, fit's end, epoch peak)
        self.allocators: list[tuple[float, list[dict]]] = []
        self.datasets: list[tuple[float, Dataset]] = []
        for e in sorted(events, key=lambda e: e.t):
            if e.kind == Kind.MEMORY_FACTS:
                facts = e.read(MemoryFacts)
                if "weights_bytes" in facts:
                    fit, epoch = _innermost(e.t, phases, "fit"), _innermost(e.t, phases, "epoch")
                    self.facts.append((e.t, facts, fit.end if fit else None,
                                       epoch.rss_peak_bytes if epoch and epoch.rss_peak_bytes else None))
                allocators = facts.get("gpu_allocators")
                if allocators:
                    self.allocators.append((e.t, allocators))
            elif e.kind == Kind.DATASET and not _inside(e.t, phases, KERAS_CALLS):
                self.datasets.append((e.t, e.read(Dataset)))
        self._facts_t = [f[0] for f in self.facts]
        self._allocators_t = [a[0] for a in self.allocators]

    def buffers(self, t: float) -> tuple[int, int, list[dict]]:
        """(bytes of arrays given to from_tensor_slices with the RSS the call added, bytes of tf.data
        buffers, the buffers) of the pipelines the job built by ``t`` (Keras' own, built inside its
        calls, left out)."""
        sliced, held, buffers = 0, 0, []
        for at, dataset in self.datasets:
            if at > t:
                break
            holds = dataset.get("holds_bytes")
            if dataset.get("op") == "from_tensor_slices":
                sliced += int(dataset.get("bytes") or 0) + int(dataset.get("copied_bytes") or 0)
            elif holds:
                held += int(holds)
                buffers.append({"op": dataset.get("op"), "bytes": int(holds),
                                "buffer_size": dataset.get("buffer_size"), "elements": dataset.get("elements")})
        return sliced, held, buffers

    def values(self, t: float, rss_bytes: int) -> tuple[dict[str, int | None], MemoryFacts | None, list[dict]]:
        """(each of :data:`COMPONENTS` at ``t``, None where not known; the facts; the GPU allocators)."""
        values: dict[str, int | None] = dict.fromkeys(COMPONENTS)
        i = bisect.bisect_right(self._facts_t, t) - 1
        facts = self.facts[i][1] if i >= 0 else None
        if facts is not None:
            values["weights_bytes"] = int(facts.get("weights_bytes") or 0)
            values["optimizer_bytes"] = int(facts.get("optimizer_bytes") or 0)
            _, _, fit_end, epoch_peak = self.facts[i]
            before = facts.get("rss")
            # The steps' working memory: the rise over the RSS before the third batch within that
            # batch's epoch (a later rise is growth, judged by the memory findings, left in the residual).
            if fit_end is not None and t <= fit_end and facts.get("when") == "steps" and isinstance(before, int):
                values["step_working_bytes"] = max(0, min(rss_bytes, epoch_peak or rss_bytes) - before)
        sliced, held, _ = self.buffers(t)
        arrays = int(facts.get("input_arrays_bytes") or 0) if facts is not None else 0
        if arrays + sliced:
            values["input_arrays_bytes"] = arrays + sliced
        if held:
            values["data_buffers_bytes"] = held
        j = bisect.bisect_right(self._allocators_t, t) - 1
        return values, facts, (self.allocators[j][1] if j >= 0 else [])

    def at(self, t: float, rss_bytes: int, gpu_process_bytes: int | None = None) -> dict[str, Any] | None:
        """``rss_bytes`` (RSS at or near ``t``) split into :data:`COMPONENTS` and the residual; None when
        nothing of it was counted."""
        if not self.facts and not self.datasets:
            return None
        values, facts, allocators = self.values(t, rss_bytes)
        if all(v is None for v in values.values()):
            return None
        out: dict[str, Any] = {"rss_bytes": int(rss_bytes)}
        left, clipped = int(rss_bytes), False
        for name in COMPONENTS:
            value = values[name]
            if value is not None:
                clipped = clipped or value > left
                value = min(value, left)
                left -= value
            out[name] = value
        out["residual_bytes"] = left
        out["clipped"] = clipped  # counted components were more than RSS (arrays not resident, shared, ...)
        out["data_buffers"] = self.buffers(t)[2]
        if facts is not None:
            out["weights_by_dtype"] = facts.get("weights_by_dtype") or {}
            out["weights_by_device"] = facts.get("weights_by_device") or {}
        if allocators:
            out["gpu_allocator_bytes"] = sum(int(a.get("bytes_in_use") or 0) for a in allocators)
            out["gpu_allocator_peak_bytes"] = sum(int(a.get("peak_bytes") or 0) for a in allocators)
            out["gpu_allocators"] = allocators
        if gpu_process_bytes is not None:
            out["gpu_process_bytes"] = int(gpu_process_bytes)  # NVML's figure for the job's processes
        return out


def breakdown_at(t: float, rss_bytes: int, events: list[Event], phases: list[Phase],
                 gpu_process_bytes: int | None = None) -> dict[str, Any] | None:
    """:meth:`Holders.at` for one instant."""
    return Holders(events, phases).at(t, rss_bytes, gpu_process_bytes)


def largest(breakdown: dict[str, Any]) -> str:
    """The counted component holding the most (the residual only when nothing was counted): the
    residual holds the framework's runtime, which no change to the job removes. A buffer wins a tie
    with the arrays it was filled from (it is the one a change of the pipeline removes)."""
    names = ("data_buffers_bytes",) + tuple(n for n in COMPONENTS if n != "data_buffers_bytes")
    best = max(names, key=lambda n: breakdown.get(n) or 0)
    return best if breakdown.get(best) else "residual_bytes"


def phase_breakdowns(phases: list[Phase], events: list[Event]) -> None:
    """Set each phase's ``memory_breakdown`` (at its RSS peak, with what was counted by its end)."""
    holders = Holders(events, phases)
    for phase in phases:
        if phase.rss_peak_bytes:
            phase.memory_breakdown = holders.at(phase.end, phase.rss_peak_bytes, phase.gpu_job_memory_peak_bytes)


def run_breakdown(samples: SampleSeries, events: list[Event], phases: list[Phase]) -> dict[str, Any] | None:
    """The breakdown at the run's RSS peak."""
    if not len(samples):
        return None
    i = int(np.nanargmax(samples["rss_bytes"]))
    return breakdown_at(float(samples.t[i]), int(samples["rss_bytes"][i]), events, phases)


def job_error(events: list[Event]) -> Event | None:
    """The exception that ended the job (``job_error``), else the last phase ended by an out-of-memory error."""
    errors = [e for e in events if e.kind == Kind.JOB_ERROR]
    if errors:
        return errors[-1]
    ended = [e for e in events if e.kind == Kind.PHASE_END and e.read(PhaseEnd).get("error") in OOM_ERRORS]
    return ended[-1] if ended else None


def error_fields(error: Event) -> dict[str, str]:
    """What :func:`job_error` found, its fields that are set: a ``job_error``'s type, module and message,
    or the exception type a phase ended by (as ``error``)."""
    if error.kind == Kind.JOB_ERROR:
        raised = error.read(JobError)
        found = {"type": raised.get("type"), "module": raised.get("module"), "message": raised.get("message")}
    else:
        found = {"error": error.read(PhaseEnd).get("error")}
    return {k: v for k, v in found.items() if v}


def raised_at(events: list[Event], error: Event) -> float:
    """When the error was raised: the end of the first phase it ended (the innermost), else when it
    reached the top of the job."""
    fields = error_fields(error)
    name = fields.get("type") or fields.get("error")
    ended = [e.t for e in events
             if e.kind == Kind.PHASE_END and e.read(PhaseEnd).get("error") == name and e.t <= error.t]
    return min(ended) - 1e-6 if ended else error.t


def end_cause(record: RunRecord, events: list[Event]) -> str | None:
    """How the job ended (:data:`END_CAUSES`); None while it runs or when the monitor did not see it. The
    kernel's OOM kill at the budget's own cgroup limit is the budget's stop: one stop, told once."""
    if record.oom_killed and not (record.budget or {}).get("stopped"):
        return "oom_killer"
    error = job_error(events)
    fields = error_fields(error) if error is not None else None
    if fields is not None and is_out_of_memory({"type": fields.get("type") or fields.get("error"),
                                                 "message": fields.get("message")}):
        return "framework_oom"
    if (record.budget or {}).get("stopped"):
        return "budget"
    if record.signal is not None:
        return "signal"
    return "exit" if record.exit_code is not None else None


FIXES = {
    "data_buffers_bytes": "Shrink the tf.data buffer that holds the most: a shuffle buffer well below the data "
                          "set's size (e.g. shuffle(10_000)), cache() to a file (cache(filename)) instead of memory, "
                          "a smaller prefetch buffer (tf.data.AUTOTUNE).",
    "input_arrays_bytes": "Stream the data instead of holding it in arrays: write it once to TFRecord files and "
                          "read them with tf.data.TFRecordDataset, or use a keras.utils.PyDataset.",
    "step_working_bytes": "A smaller batch (tensorgauge run --find-batch-size finds the largest that fits), or "
                          "mixed precision (keras.mixed_precision.set_global_policy('mixed_float16')).",
    "optimizer_bytes": "An optimizer with fewer slots per weight (SGD with momentum keeps 1, Adam 2), or a "
                       "smaller model.",
    "weights_bytes": "A smaller model, or its weights in a 16-bit dtype (mixed precision keeps float32 weights: "
                     "a bfloat16/float16 dtype policy halves them).",
    "residual_bytes": "Most of it is neither the model nor the data: look at the memory growth and leak "
                      "findings, and at models built without keras.backend.clear_session().",
}


def _where(t: float, phases: list[Phase]) -> dict[str, Any]:
    inside = [p for p in phases if p.start <= t <= p.end + 1e-6]
    innermost = max(inside, key=lambda p: (p.start, -p.end)) if inside else None
    epoch = next((p for p in sorted(inside, key=lambda p: -p.start) if p.kind == "epoch"), None)
    stepped = next((p for p in sorted(inside, key=lambda p: -p.start) if p.steps), None)
    path = " > ".join(p.name for p in sorted(inside, key=lambda p: (p.start, -p.end)))
    return {"phase": innermost.name if innermost else None, "path": path or None,
            "epoch": epoch.name if epoch else None,
            "steps_done": stepped.steps if stepped else None, "steps_phase": stepped.name if stepped else None}


def post_mortem(record: RunRecord, samples: SampleSeries, events: list[Event],
                phases: list[Phase]) -> dict[str, Any] | None:
    """Where a job that died of memory was, what held the memory then, and the fix."""
    cause = end_cause(record, events)
    if cause not in ("oom_killer", "framework_oom", "budget"):
        return None
    budget = record.budget or {}
    error = job_error(events) if cause == "framework_oom" else None
    if error is not None:
        t = raised_at(events, error)
    elif cause == "budget" and budget.get("stop_requested_at") is not None:
        t = float(budget["stop_requested_at"])
    else:
        t = float(samples.t[-1]) if len(samples) else (record.wall_seconds or 0.0)
    window = samples.between(t - 1.0, t + 1e-6) if len(samples) else samples
    rss = int(np.nanmax(window["rss_bytes"])) if len(window) else int(budget.get("peak_bytes") or 0)
    if cause == "oom_killer" and len(samples):  # the kill came after the last sample: the peak before it
        rss = max(rss, int(np.nanmax(samples["rss_bytes"])))
    breakdown = breakdown_at(t, rss, events, phases)
    holder = largest(breakdown) if breakdown else None
    return {"cause": cause, "t": round(t, 3), **_where(t, phases), "rss_bytes": rss,
            "error": error_fields(error) if error is not None else None,
            "memory_breakdown": breakdown, "largest": holder,
            "fix": FIXES[holder] if holder else FIXES["step_working_bytes"]}


def describe(breakdown: dict[str, Any]) -> str:
    """'model weights 12.0 MiB, optimizer variables 24.0 MiB, ..., the rest 400 MiB' (largest first)."""
    names = [n for n in (*COMPONENTS, "residual_bytes") if breakdown.get(n)]
    names.sort(key=lambda n: -int(breakdown[n]))
    return ", ".join(f"{LABELS[n]} {format_bytes(breakdown[n])}" for n in names)


def batch_size_search(events: list[Event]) -> dict[str, Any] | None:
    """``--find-batch-size``'s result: the search and its trials (None when it did not run)."""
    found = payloads(events, BatchSearch)
    trials = [{"batch_size": trial.get("batch_size"), "peak_bytes": trial.get("peak_bytes"), "steps": trial.get("steps"),
               "step_seconds": trial.get("step_seconds"), "examples_per_second": trial.get("examples_per_second"),
               "seconds": trial.get("seconds"), "error": trial.get("error")} for trial in payloads(events, BatchTrial)]
    if not found and not trials:
        return None
    result = {k: v for k, v in (found[-1] if found else {}).items() if k not in ("cpu", "rss")}
    result.setdefault("recommended_batch_size", None)
    if not found:
        result["reason"] = "the search did not finish (the job ended during a trial)"
    return {**result, "trials": trials}
