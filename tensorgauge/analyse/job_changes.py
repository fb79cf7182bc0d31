"""What changed in the job itself between two runs, in words, most direct first: how fit runs (eager, XLA,
steps per execution, batch, thread pools, backend), its input pipeline and the model's size. ``check`` and
``compare`` both name these; ``check`` adds the input's share of the step, an effect that a change of
machine makes too (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from tensorgauge.hook.protocol import FitConfig, MemoryFacts
from tensorgauge.model import payloads
from tensorgauge.units import format_bytes

if TYPE_CHECKING:
    from tensorgauge.analyse.run_report import RunReport


class Side(Protocol):
    """A run as compared (:class:`tensorgauge.analyse.compare.Side`)."""

    report: RunReport

CONFIG = (("run_eagerly", "fit runs eagerly (run_eagerly)"), ("functions_run_eagerly", "tf.functions run eagerly"),
          ("jit_compile", "XLA (jit_compile)"), ("steps_per_execution", "steps_per_execution"),
          ("batch_size", "batch size"), ("intra_op_threads", "TensorFlow intra-op threads"),
          ("inter_op_threads", "TensorFlow inter-op threads"), ("backend", "Keras backend"))
# A pipeline stage's class -> (what it does, the option that makes it parallel).
STAGES = {"_PrefetchDataset": ("prefetch", None), "_ParallelMapDataset": ("map", "num_parallel_calls"),
          "_MapDataset": ("map", None), "_CacheDataset": ("cache", None), "CacheDataset": ("cache", None),
          "_ShuffleDataset": ("shuffle", None), "_BatchDataset": ("batch", None),
          "_ParallelBatchDataset": ("batch", "num_parallel_calls")}
MOVES_SHOWN = 3  # stages that changed places, named at most


def fit_config(side: Side) -> FitConfig:
    """The first fit's config (else the custom loop's)."""
    configs = payloads(side.report.events, FitConfig)
    return next((c for c in configs if not c.get("loop")), None) or next(iter(configs), FitConfig())


def _weights(side: Side) -> int | None:
    found = [w for w in (f.get("weights_bytes") for f in payloads(side.report.events, MemoryFacts)) if w]
    return found[-1] if found else None


def _input_share(side: Side) -> float | None:
    split = side.report.input_split or {}
    return split.get("input_share") if split.get("measured") else None


def format_change(ratio: float) -> str:
    """1.6 -> '+60%'."""
    return f"{ratio - 1:+.0%}"


def format_value(v: Any) -> str:
    """A config or environment value: a list as 'a, b' ('none' when empty)."""
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "none"
    return str(v)


def stages(config: FitConfig) -> list[tuple[str, str | None]]:
    """The pipeline's stages in the order the data goes through them (as the code chains them), each
    (what it does, its parallel option or None)."""
    return [STAGES.get(s, (s.strip("_").removesuffix("Dataset").lower(), None))
            for s in reversed(config.get("dataset_stages") or [])]


def _chain(pipeline: list[tuple[str, str | None]]) -> str:
    return ", then ".join(f"{op}({option})" if option else op for op, option in pipeline)


def pipeline_change(a: list[tuple[str, str | None]], b: list[tuple[str, str | None]]) -> str:
    """How the pipeline ``b`` differs from ``a``, in words: 'map now runs after batch (was before it);
    num_parallel_calls removed from map (was map(num_parallel_calls), then batch; now batch, then map)'."""
    ops_a, ops_b = [op for op, _ in a], [op for op, _ in b]
    parts = [f"{op} removed" for op in dict.fromkeys(ops_a) if ops_b.count(op) < ops_a.count(op)]
    parts += [f"{op} added" for op in dict.fromkeys(ops_b) if ops_b.count(op) > ops_a.count(op)]
    common = [op for op in dict.fromkeys(ops_a) if op in ops_b]
    moves = [f"{x} now runs after {y} (was before it)" for i, x in enumerate(common) for y in common[i + 1:]
             if ops_b.index(x) > ops_b.index(y)]
    parts += moves[:MOVES_SHOWN]
    options_a, options_b = dict(reversed(a)), dict(reversed(b))  # each op's first stage's option
    for op in common:
        was, now = options_a[op], options_b[op]
        if was and not now:
            parts.append(f"{was} removed from {op}")
        elif now and not was:
            parts.append(f"{now} added to {op}")
    told = "; ".join(parts) or "its stages changed"
    return f"{told} (was {_chain(a)}; now {_chain(b)})"


def job_changes(a: Side, b: Side) -> list[str]:
    """What changed in the job between ``a`` and ``b``, most direct first, one sentence each."""
    out = []
    ca, cb = fit_config(a), fit_config(b)
    config_a: Mapping[str, object] = ca  # read by the keys in CONFIG
    config_b: Mapping[str, object] = cb
    for key, label in CONFIG:
        if key in config_a and key in config_b and config_a[key] != config_b[key] \
                and not (config_a[key] is None or config_b[key] is None):
            out.append(f"{label}: {format_value(config_a[key])} -> {format_value(config_b[key])}")
    sa, sb = stages(ca), stages(cb)
    if sa and sb and sa != sb:
        out.append(f"the input pipeline changed: {pipeline_change(sa, sb)}")
    wa, wb = _weights(a), _weights(b)
    if wa and wb and abs(math.log(wb / wa)) >= math.log(1.05):
        out.append(f"the model's weights: {format_bytes(wa)} -> {format_bytes(wb)} ({format_change(wb / wa)}): "
                   "more compute and memory per step")
    return out


INPUT_SHARE_CHANGE = 0.10  # the input's share of the step moving this much is named


def input_share_change(a: Side, b: Side) -> str | None:
    """How the input's share of fit's step moved, where both A/Bs measured it and it moved by
    ``INPUT_SHARE_CHANGE``: an effect, of the job's pipeline or of the machine it ran on (fewer cores make
    the same pipeline a larger share), so not a change in the job."""
    ia, ib = _input_share(a), _input_share(b)
    if ia is None or ib is None or abs(ib - ia) < INPUT_SHARE_CHANGE:
        return None
    return f"the input's share of fit's step: {ia:.0%} -> {ib:.0%} (measured by the A/B)"
