"""``tensorgauge run --try-fixes``: time a short window of the job with each fix.

The job runs once as it is and once per applicable fix (see
:mod:`tensorgauge.hook.fixes`), each time only for a window of its first
``fit`` or custom training loop (3 warm-up steps, then ``steps`` timed ones;
a loop's compute-only limit is its step less its wait in ``next()``). Which fixes apply is read
from the baseline run: tf.data fixes when fit gets a Dataset, ``no_eager``
when it runs eagerly, ``threads`` when its thread pools are smaller than the
CPUs allowed. ``cache`` is timed in the second epoch, once the first has
filled the cache, and only where that is sound and affordable: a finite
pipeline whose functions draw no random numbers, fit for two epochs or more,
the cache under a quarter of the RAM and the first epoch under two minutes.
The baseline also times each stage of a fit's tf.data pipeline (:mod:`tensorgauge.hook.stage_costs`):
the fix fitted to the costliest stage, applied to that stage alone, is timed like the others
(``stage_parallel``: its map in parallel; ``stage_cache``: ``.cache()`` after it), or said why not (a
stage that runs Python needs a change to the code).
Every window is a stored run of its own; the fixes' runs name the baseline's as their parent
(``tensorgauge runs`` lists them under it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from tensorgauge.errors import TensorgaugeError
from tensorgauge.hook.protocol import (
    FIX_ENV,
    FIX_STAGE_ENV,
    WARMUP_ENV,
    WARMUP_STEPS,
    WINDOW_ENV,
    ComputeProbe,
    FitConfig,
    InputStages,
    StageTiming,
    TryWindow,
)
from tensorgauge.model import payloads
from tensorgauge.monitoring.runner import run
from tensorgauge.stage_shares import batches_per_start, costliest, own_costs
from tensorgauge.store import Store
from tensorgauge.units import format_bytes

CANDIDATES = {
    "parallel_map": "map(num_parallel_calls=tf.data.AUTOTUNE)",
    "prefetch": "dataset.prefetch(tf.data.AUTOTUNE) on the training input",
    "parallel_map,prefetch": "both of the above",
    "cache": ".cache() after each map (sound for a deterministic map)",
    "no_eager": "model.run_eagerly = False, tf.config.run_functions_eagerly(False) (on JAX: jit_compile = True)",
    "threads": "TensorFlow's thread pools sized to the CPUs allowed",
    "no_jit": "model.jit_compile = False (no XLA)",
    "stage_parallel": "num_parallel_calls=tf.data.AUTOTUNE on the costliest stage's map alone",
    "stage_cache": ".cache() after the costliest stage alone",
}
SERIAL_STAGES = ("Map", "Interleave", "FlatMap", "Filter")


COMPUTE_FIXES = ("no_eager", "threads", "no_jit")  # change the compute itself: the compute-only limit moves too
LIMIT_REACHED = 1.15  # a step this close to the compute-only step (ratio) has reached it
REPEATS = 3  # windows timed in each run: their spread is the noise a gain must stand out of
CACHE_MAX_RAM_SHARE = 0.25  # the cache trial holds the whole data set in memory
CACHE_MAX_EPOCH_SECONDS = 120.0  # ... and runs one whole epoch before its window


@dataclass
class Trial:
    fixes: str  # "baseline" or the fixes, comma-separated
    what: str
    run_id: str
    step_seconds_median: float | None
    window_medians: list[float] = field(default_factory=list)  # each repeated window's median step
    speedup: float | None = None  # baseline step / this step
    gain: bool | None = None  # faster in every window than the baseline in any (outside the spread)
    changes_compute: bool = False  # a fix of the compute itself (its compute-only limit moves too)
    reaches_limit: bool | None = None  # step within LIMIT_REACHED of the compute-only limit
    caveat: str | None = None  # what the timing cannot tell (e.g. whether caching is sound)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Trials:
    trials: list[Trial]  # the baseline first
    compute_only_step_seconds: float | None  # the limit: the train step on one cached batch
    not_tried: dict[str, str] = field(default_factory=dict)  # fix -> why it was not timed
    loop: bool = False  # timed on a custom training loop (its limit: the step less its wait in next())

    def to_dict(self) -> dict:
        return {"schema": "tensorgauge.try_fixes/1", "compute_only_step_seconds": self.compute_only_step_seconds,
                "trials": [t.to_dict() for t in self.trials], "not_tried": self.not_tried, "loop": self.loop}


def _window(store: Store, run_id: str) -> tuple[list[float], FitConfig, float | None]:
    """(median step of each repeated window, fit's config, median compute-only step) of one run."""
    events = store.events(run_id)
    windows = [w for w in payloads(events, TryWindow) if w.get("step_seconds")]
    config = next(iter(payloads(events, FitConfig)), FitConfig())
    probe = next((p["step_seconds"] for p in payloads(events, ComputeProbe) if p.get("step_seconds")), None)
    steps = windows[0]["step_seconds"] if windows else []
    size = max(1, len(steps) // REPEATS)
    medians = [statistics.median(steps[i:i + size]) for i in range(0, size * REPEATS, size) if steps[i:i + size]]
    waits = windows[0].get("next_seconds") if windows else None
    if probe is None and waits:  # a custom loop: its step less its wait in next() is the compute
        probe = [s - w for s, w in zip(steps, waits)]
    return medians, config, statistics.median(probe) if probe else None


def outside_spread(windows: list[float], base: list[float]) -> bool | None:
    """A gain only when the fix's slowest window is faster than the baseline's fastest: the spread of
    repeated windows is the noise (None: too few windows to tell)."""
    if len(windows) < 2 or len(base) < 2:
        return None
    return max(windows) < min(base)


def cache_blocker(config: FitConfig, steps: int, step_seconds: float | None, ram_bytes: int | None) -> str | None:
    """Why caching the map cannot be timed (or would be unsound) here; None when it can."""
    batches, size, random = config.get("dataset_batches"), config.get("dataset_bytes"), config.get("dataset_random_ops")
    if not batches:
        return "the data set's length is unknown or infinite (repeat()), so there is no second epoch to time"
    if random is None:
        return "the pipeline's functions could not be inspected for random ops"
    if random:
        return (f"its functions draw random numbers ({', '.join(random)}): a cache would freeze the augmentation; "
                "cache the deterministic part before the random map instead")
    epochs = config.get("epochs") or 1
    if not config.get("loop") and (epochs < 2 or (epochs - 1) * batches < steps + WARMUP_STEPS):
        return "fit does not run a second epoch long enough to time"
    if size is None:
        return "the size of the data set's elements is unknown, so the memory a cache needs is too"
    if ram_bytes and size > CACHE_MAX_RAM_SHARE * ram_bytes:
        return f"the cache would hold {format_bytes(size)}, over a quarter of the RAM"
    if step_seconds and step_seconds * (batches + WARMUP_STEPS) > CACHE_MAX_EPOCH_SECONDS:
        return (f"filling it takes a whole epoch, about {step_seconds * batches:.0f} s at the measured step: "
                "too long for a trial")
    return None


def applicable(config: FitConfig, job: dict, cores_allowed: float, steps: int = 20, step_seconds: float | None = None,
               ram_bytes: int | None = None) -> tuple[list[str], dict[str, str]]:
    """The fixes to time, and the fixes not timed with the reason."""
    fixes, not_tried = [], {}
    if config.get("dataset"):
        fixes += ["parallel_map", "prefetch", "parallel_map,prefetch"]
        blocker = cache_blocker(config, steps, step_seconds, ram_bytes)
        if blocker:
            not_tried["cache"] = blocker
        else:
            fixes.append("cache")
    backend = config.get("backend") or "tensorflow"
    if backend == "jax" and (config.get("run_eagerly") or config.get("jit_compile") == "False"):
        fixes.append("no_eager")  # on JAX: jit_compile back on
    elif backend == "tensorflow" and (config.get("run_eagerly") or config.get("functions_run_eagerly")):
        fixes.append("no_eager")
    elif config.get("loop") and config.get("eager"):
        not_tried["no_eager"] = ("an eager custom loop cannot be compiled from outside: decorate its step with "
                                 "@tf.function; 'tensorgauge run --diagnose' measures the gain (eager_execution)")
    if config.get("jit_compile") == "True" and backend == "tensorflow":  # on JAX, no XLA means eager
        fixes.append("no_jit")
    limits = [n for n in (config.get("intra_op_threads"),
                          int((job.get("thread_env") or {}).get("TF_NUM_INTRAOP_THREADS", 0))) if n]
    if backend != "tensorflow":
        not_tried["threads"] = (f"TensorFlow's thread pools do not run a {backend} fit (XLA's or PyTorch's own "
                                "threads do)")
    elif limits and min(limits) < cores_allowed:
        fixes.append("threads")
    return fixes, not_tried


def stage_trial(stages: list[StageTiming], cache_block: str | None) -> tuple[str | None, int | None, str]:
    """(fix, the ``Dataset.map`` call it applies to, what it is) for the pipeline's costliest stage, or
    (None, None, why it is not timed). ``cache_block``: why a cache cannot be timed in this job (see
    :func:`cache_blocker`), None where it can."""
    rows = own_costs(stages, batches_per_start(stages))
    top = costliest(rows)
    if top is None:
        return None, None, "no stage of the pipeline was timed"
    stage = stages[rows.index(top)]
    name = str(stage.get("stage") or "")
    named = (f"{stage['function']} ({stage['location']})" if stage.get("function") and stage.get("location")
             else name)
    where = f"the costliest stage, {name} running {named}" if named != name else f"the costliest stage, {name}"
    call = stage.get("map_call")
    cacheable = (not stage.get("random") and stage.get("before_shuffle") and (stage.get("cardinality") or 0) > 0)
    if call and not stage.get("python") and not stage.get("parallel") and name in SERIAL_STAGES:
        return "stage_parallel", call, f"num_parallel_calls=tf.data.AUTOTUNE on {named} alone (the costliest stage)"
    if call and cacheable and cache_block is None:
        return "stage_cache", call, f".cache() after {named} alone (the costliest stage, before the shuffle)"
    if stage.get("python") or name in ("from_generator", "PyDataset.__getitem__"):
        return None, None, (f"{where}, runs Python for every element: its fix (vectorise it with TensorFlow ops, or "
                            "move it into the model) is a change to your code")
    if not call:
        return None, None, f"{where}, is not made by a Dataset.map call: its fix is a change to your code"
    if cacheable:
        return None, None, f"{where}, would be cached, but {cache_block}"
    return None, None, f"{where}, already runs in parallel and cannot be cached before a shuffle here"


def try_fixes(command: list[str], store: Store, steps: int = 10,
              progress: Callable[[str], None] = lambda line: None) -> Trials:
    window = {WINDOW_ENV: str(steps * REPEATS)}
    progress("timing the job as it is")
    base = run(command, store, name="try-fixes: baseline", extra_env=window, diagnose="")
    base_windows, config, limit = _window(store, base.record.run_id)
    base_step = statistics.median(base_windows) if base_windows else None
    if base_step is None:
        raise TensorgaugeError("--try-fixes times the job's first Keras fit or custom training loop, and this job ran "
                               "neither "
                               f"(or stopped before {steps * REPEATS + 3} steps); see "
                               f"'tensorgauge show {base.record.run_id}'")
    record = store.run(base.record.run_id)
    cores = float(record.env.get("host", {}).get("cores_allowed") or 1)
    trials = [Trial("baseline", "the job as it is", base.record.run_id, base_step, base_windows, 1.0)]
    fixes, not_tried = applicable(config, record.env.get("job") or {}, cores, steps * REPEATS, base_step,
                                  record.env.get("host", {}).get("ram_bytes"))
    timed_stages = next(iter(payloads(store.events(base.record.run_id)[::-1], InputStages)), None)
    stage_call, described = None, {}
    if timed_stages is not None and timed_stages.get("stages"):
        fix, stage_call, what = stage_trial(timed_stages["stages"], cache_blocker(config, steps * REPEATS, base_step,
                                                                                   record.env.get("host", {}).get("ram_bytes")))
        if fix is None:
            not_tried["stage"] = what
        else:
            fixes.append(fix)
            described[fix] = what
    for fix in fixes:
        filling = fix in ("cache", "stage_cache")
        progress(f"timing the job with {fix}" + (" (one epoch fills the cache first)" if filling else ""))
        env = {**window, FIX_ENV: fix}
        if fix.startswith("stage_"):
            env[FIX_STAGE_ENV] = str(stage_call)
        caveat = None
        if fix == "threads":
            n = str(max(1, math.floor(cores)))
            env.update({"TF_NUM_INTRAOP_THREADS": n, "TF_NUM_INTEROP_THREADS": n})
        if filling:
            env[WARMUP_ENV] = str((config.get("dataset_batches") or 0) + WARMUP_STEPS)  # known: cache applies
            if config.get("dataset_python_ops"):
                caveat = ("the map calls Python (numpy_function/py_function), which tensorgauge cannot check for "
                          "randomness: cache it only if it returns the same result for the same element")
        result = run(command, store, name=f"try-fixes: {fix}", extra_env=env, diagnose="",
                     parent_run_id=base.record.run_id)
        windows, _, _ = _window(store, result.record.run_id)
        step = statistics.median(windows) if windows else None
        trials.append(Trial(fix, described.get(fix, CANDIDATES[fix]), result.record.run_id, step, windows,
                            base_step / step if step else None, outside_spread(windows, base_windows),
                            reaches_limit=step <= LIMIT_REACHED * limit if step and limit else None, caveat=caveat,
                            changes_compute=fix in COMPUTE_FIXES))
    trials[0].reaches_limit = base_step <= LIMIT_REACHED * limit if limit else None
    return Trials(trials, limit, not_tried, loop=bool(config.get("loop")))
