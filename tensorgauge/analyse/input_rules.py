"""``input_bound``: training that loses its steps to input, from an A/B measured in the job.

- A TensorFlow ``fit``: its real steps against compute-only steps on one cached
  batch (:func:`tensorgauge.analyse.input_split.ab_verdict`); the profiler
  window, where it ran, says how (waiting, or competing for the cores).
- A custom loop: ``next()`` on its iterator against ``next()`` on one cached
  batch, paired step by step; what ``next()`` costs on any iterator is step
  overhead, not input.
- A fit on Keras' JAX or PyTorch backend: Keras' data iterator, timed in the
  training thread (it makes each batch there, between steps).

The fix is fitted to the job: what its pipeline already does (prefetch, a
parallel map, cache) is never advised again; where its stages were timed
(:mod:`.input_stages`), the costliest stage is named first with its own fix.
"""

from __future__ import annotations

from tensorgauge.analyse.input_split import backend_input_wait, fit_input, loop_verdict, rounds_verdict
from tensorgauge.analyse.input_stages import STAGE_KEYS, costliest
from tensorgauge.analyse.phases import cpu_at
from tensorgauge.analyse.rules import RunFacts, rule
from tensorgauge.hook.protocol import INPUT_HIGH, INPUT_MODERATE, TRAIN_LOOP, FitConfig, FitInput, Kind, LoopInput
from tensorgauge.model import Finding, Phase, Severity

SATURATED = 0.85  # cores busy / cores allowed at which more parallelism cannot help
# Other processes keeping this many cores busy through the A/B's rounds, and this share of the job's CPUs,
# make its input cost partly theirs: the pipeline's threads and the step share what cores are left. Beside a
# one-core hog on 2 CPUs the eager demo, whose input costs nothing on a quiet machine, once read "input costs
# the steps"; the rounds see 1.00-1.03 cores of other work beside such a hog, 0.02-0.05 on a quiet VM.
BUSY_MACHINE_CORES, BUSY_MACHINE_SHARE = 0.5, 0.25
BUSY_MACHINE_LEFT_CORES = 0.25  # the fewest cores counted as left to the job, however busy the others kept
EPOCH_START_BUSY = 0.25  # cores the job kept busy through its epoch-start waits for them to be input work (idle: tf.data teardown)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 0.01 else f"{seconds * 1000:.1f} ms"


def _stages(config: FitConfig) -> list[str] | None:
    """The pipeline's stages, outermost first, named plainly ("Prefetch", "ParallelMap", "Map", ...)."""
    stages = config.get("dataset_stages")
    return [s.strip("_").removesuffix("Dataset").removesuffix("V2") for s in stages] if stages else None


def pipeline_fix(config: FitConfig | None, saturated: bool) -> str:
    """What to change in the pipeline, leaving out what it already does."""
    config = config or {}
    if config.get("dataset") is False:
        return ("fit slices the arrays into batches in Keras' own tf.data pipeline, which already prefetches. "
                "A larger batch_size spreads the per-batch slicing and conversion over more examples "
                "(tensorgauge run --find-batch-size measures what fits); for preprocessing per example, do it once "
                "on the arrays before fit.")
    stages = _stages(config)
    random, python = config.get("dataset_random_ops"), config.get("dataset_python_ops")
    if stages is None:
        return ("If the pipeline does not already: end it with .prefetch(tf.data.AUTOTUNE), map with "
                "num_parallel_calls=tf.data.AUTOTUNE, and .cache() after a deterministic map.")
    cache = stages.index("Cache") if "Cache" in stages else len(stages)
    uncached = [s for s in stages[:cache] if s in ("Map", "ParallelMap", "MapAndBatch", "ParallelBatch")]
    advice = []
    if "Prefetch" not in stages:
        advice.append("end the pipeline with .prefetch(tf.data.AUTOTUNE), so the next batch is made while the step "
                      "computes")
    if "Map" in uncached and not saturated:
        advice.append("map with num_parallel_calls=tf.data.AUTOTUNE (its map runs on one thread now)")
    if uncached:
        if random:
            advice.append(f"cache the deterministic part (decode, resize) before the random augmentation "
                          f"({', '.join(random)}), so it runs once, not every epoch")
        elif random == []:
            caveat = " (it calls Python, which tensorgauge cannot check: make sure it is deterministic)" if python else ""
            advice.append(f"{'move' if 'Cache' in stages else 'add'} .cache() after the map{caveat}, so every epoch "
                          "after the first skips it (tensorgauge run --try-fixes times it)")
    if saturated or not advice:
        advice.append("do less work per element: preprocess once offline and store the result, or vectorise "
                      "(batch before map)")
    done = [what for what, present in (("prefetches", "Prefetch" in stages),
                                       ("maps in parallel", "ParallelMap" in stages or "ParallelBatch" in stages),
                                       ("caches", "Cache" in stages)) if present]
    already = f"The pipeline already {' and '.join(done)}. " if done else ""
    text = "; ".join(advice)
    return already + text[0].upper() + text[1:] + "."


def fit_input_bound(split: dict | None, fit: Phase | None, allowed: float, config: FitConfig | None) -> Finding | None:
    """A TensorFlow fit whose A/B established an input cost (see :func:`.input_split.ab_verdict`)."""
    if not split or not split.get("rounds") or not split.get("established") or fit is None:
        return None
    share, step = split["input_share"], split["step_seconds"]
    limit, lost = split["compute_only_step_seconds"], split["input_wait_seconds"]
    busy = fit.cores_busy_mean
    saturated = busy >= SATURATED * allowed
    evidence = {"input_share": share, "input_share_low": split.get("input_share_low"),
                "input_share_high": split.get("input_share_high"),
                "input_share_interval": split.get("input_share_interval"), "input_seconds_per_step": lost,
                "step_seconds": step, "compute_only_step_seconds": limit, "rounds": split.get("rounds"),
                "real_steps": split.get("steps"), "measured_by": split.get("measured_by"),
                "cores_busy_mean": round(busy, 2), "cores_allowed": allowed}
    how = ""
    wait = split.get("profiled_wait_seconds")
    if wait is not None:
        evidence["profiled_wait_seconds_per_step"] = wait
        waiting = min(wait, lost)
        how = (f": {ms(waiting)} waiting for the next batch, {ms(lost - waiting)} with the pipeline's threads taking "
               "the cores from the step" if lost - waiting >= INPUT_MODERATE * step else
               ": the step waits for its next batch")
    fix = costliest_first(split, evidence, pipeline_fix(config, saturated))
    others = split.get("other_cores_mean")
    busy_machine = (others is not None and others >= max(BUSY_MACHINE_CORES, BUSY_MACHINE_SHARE * allowed)
                    and not _beyond_the_neighbours(split, others, allowed))
    if others is not None:
        evidence["other_cores_mean"] = others
    severity: Severity = "low" if busy_machine else "high" if share >= INPUT_HIGH else "moderate"
    beside = (f"; other processes kept {others:.1f} of the {allowed:g} CPUs busy meanwhile, so part of it is "
              "theirs: measure again on a quieter machine" if busy_machine else "")
    return Finding(
        id="input_bound", severity=severity,
        title=f"Input costs {share:.0%} of each training step ({ms(lost)} of {ms(step)}; the same step on one cached "
              f"batch takes {ms(limit)}){how}{beside}",
        evidence=evidence, fix=fix,
        expected_gain=f"up to {step / max(limit, 1e-9):.2f}x faster steps ({ms(step)} -> {ms(limit)}: the step "
                      f"without input, measured in this run; input {_interval_text(split)} of the step)")


def _beyond_the_neighbours(split: dict, others: float, allowed: float) -> bool:
    """The input cost holds even were the pipeline as many times faster as the other processes could have
    slowed it (the job's CPUs over those they left it): at the lower end of its interval, ``low``, the real step
    is the compute-only one over ``1 - low``; cut by that factor, it still costs :data:`INPUT_MODERATE` or more.
    A serial map's 90% (87-94%) beside another test process keeping a core of two busy does; the eager demo's
    cost beside a one-core hog did not."""
    interval = split.get("input_share_interval")
    low = interval[0] if interval else split.get("input_share_low")
    if low is None:
        return False
    slowed_by = allowed / max(allowed - others, BUSY_MACHINE_LEFT_CORES)
    return 1 - slowed_by * (1 - low) >= INPUT_MODERATE


def _interval_text(split: dict) -> str:
    """The input share's 95% interval, or its range by round for a run recorded without one."""
    interval = split.get("input_share_interval")
    if interval:
        return f"{max(0.0, interval[0]):.0%} to {interval[1]:.0%} at 95%"
    return f"{split.get('input_share_low', 0):.0%} to {split.get('input_share_high', 0):.0%} by round"


EPOCH_START_FIX = (
    "Each epoch pays for its input before its first step: the pipeline starts over (a shuffle buffer refilled "
    "through the map, files reopened, a cache rebuilt), while its steps wait for nothing once it runs. Put "
    ".cache() after the expensive, deterministic stages and before the shuffle, so later epochs read their "
    "results; or shuffle a smaller buffer, or fewer, longer epochs (dataset.repeat() with steps_per_epoch). "
    "Or your callbacks' on_epoch_begin: the same place in time.")
# fit on arrays: Keras builds a new pipeline over them each epoch (the rows shuffled, sliced into batches).
EPOCH_START_ARRAYS_FIX = (
    "Each epoch pays for its input before its first step: fit on arrays builds a new input pipeline over them "
    "every epoch (the rows shuffled, then sliced into batches), while its steps wait for nothing once it runs. "
    "With short epochs that start is a large share: train fewer, longer epochs, or give fit a "
    "tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).batch(32).cache().repeat() with "
    "steps_per_epoch, so one iterator runs across epochs. Or your callbacks' on_epoch_begin: the same place "
    "in time.")


def epoch_start_input_bound(split: dict | None, fit: Phase | None, allowed: float,
                            cores_busy: float | None, config: FitConfig | None = None) -> Finding | None:
    """A TensorFlow fit that pays for its input as each epoch starts (:mod:`.epoch_starts`), at
    :data:`INPUT_MODERATE` of its training time or more, the job's cores busy through those waits
    (``cores_busy``, at least :data:`EPOCH_START_BUSY`: it computed, not waited on tf.data's teardown,
    which ``stalls`` tells). A per-step cost the A/B established is told beside it."""
    paid = (split or {}).get("epoch_start_input")
    if not paid or fit is None or paid["share"] < INPUT_MODERATE:
        return None
    if cores_busy is None or cores_busy < EPOCH_START_BUSY:
        return None
    share, per_epoch = paid["share"], paid["seconds"] / max(1, paid["epochs"])
    steps = split or {}
    mid_epoch = (f"mid-epoch, input costs {steps['input_share']:.0%} of each step as well"
                 if steps.get("established") and steps.get("input_share") is not None else
                 "mid-epoch, steps wait for no input")
    return Finding(
        id="input_bound", severity="high" if share >= INPUT_HIGH else "moderate",
        title=f"Input costs {share:.0%} of training time as epochs start ({ms(per_epoch)} an epoch before its first "
              f"step, {paid['epochs']} epochs); {mid_epoch}",
        evidence={"epoch_start_share": share, "epoch_start_seconds": paid["seconds"], "epochs": paid["epochs"],
                  "epoch_start_seconds_each": round(per_epoch, 4), "cores_busy": round(cores_busy, 2),
                  "step_seconds": fit.step_seconds_p50, "input_share_per_step": (split or {}).get("input_share"),
                  "cores_allowed": allowed},
        fix=EPOCH_START_ARRAYS_FIX if config is not None and config.get("dataset") is False else EPOCH_START_FIX,
        expected_gain=f"up to {paid['seconds']:.1f} s ({share:.0%} of training time), the waits at epoch starts")


def costliest_first(split: dict | None, evidence: dict, fix: str) -> str:
    """``fix`` led by the costliest timed stage of the pipeline and its own fix (:mod:`.input_stages`), that
    stage put in ``evidence`` as ``costliest_stage``; ``fix`` as it is where no stage was timed."""
    top = costliest((split or {}).get("stages") or [])
    if top is None:
        return fix
    evidence["costliest_stage"] = {k: top.get(k) for k in STAGE_KEYS}
    named = f" {top['function']} ({top['location']})" if top.get("function") and top.get("location") else ""
    return (f"The costliest stage is {top['stage']}{named}, {top['share']:.0%} of the input's cost "
            f"({ms(top['seconds_per_batch'])} a batch): {top.get('fix') or 'make it cheaper'}. Otherwise: {fix}")


def loop_input_bound(loop: LoopInput | None, fit: Phase | None, allowed: float, config: FitConfig | None = None,
                     split: dict | None = None) -> Finding | None:
    """A custom training loop whose ``next()`` waits longer than ``next()`` on one cached batch."""
    verdict = loop_verdict(loop)
    if verdict is None and loop is not None and fit is not None:
        return _timed_loop_input_bound(loop, fit, allowed, config, split)
    if verdict is None or not verdict["established"]:
        return None
    step, lost, share = verdict["step_seconds"], verdict["input_wait_seconds"], verdict["input_share"]
    busy = fit.cores_busy_mean if fit else 0.0
    evidence = {**{k: verdict[k] for k in ("input_share", "step_seconds", "step_overhead_seconds", "pairs",
                                            "pairs_slower")},
                "input_wait_seconds_per_step": lost, "measured_by": verdict["measured_by"], "steps": (loop or {}).get("steps"),
                "cores_busy_mean": round(busy, 2), "cores_allowed": allowed}
    fix = costliest_first(split, evidence, "The loop waits in next() for its batches. " + pipeline_fix(
        {**(config or {}), "dataset": True}, busy >= SATURATED * allowed))
    return Finding(id="input_bound", severity="high" if share >= INPUT_HIGH else "moderate",
                   title=f"The training loop waits for input {share:.0%} of each step ({ms(lost)} of {ms(step)}, "
                         f"beyond the {ms(verdict['step_overhead_seconds'])} next() takes on any iterator)",
                   evidence=evidence, fix=fix,
                   expected_gain=f"up to {step / max(step - lost, 1e-9):.2f}x faster steps ({ms(step)} -> "
                                 f"{ms(step - lost)}, the step without its wait)")


def _timed_loop_input_bound(loop: LoopInput, fit: Phase, allowed: float, config: FitConfig | None,
                            split: dict | None = None) -> Finding | None:
    """A custom loop over an iterator that is not tf.data's (a PyTorch DataLoader): its next() waits by
    round, established where their interval clears the threshold; the fix led by the loader's costliest
    stage (its dataset or its collate) where they were timed."""
    by_round = rounds_verdict(loop.get("next_rounds") or [])
    step = loop.get("step_seconds_p50")
    if by_round is None or not by_round["established"] or not step:
        return None
    share = by_round["input_share"]
    lost = step * share
    torch = (config or {}).get("backend") == "torch" or loop.get("loader") == "DataLoader"
    workers = max((s.get("workers") or 0 for s in (split or {}).get("stages") or []), default=0)
    fix = ("The loop waits in next() for its batches: the loader makes them in the training thread. "
           + ("Give the DataLoader num_workers=N (and persistent_workers=True, pin_memory=True on a GPU) so "
              "batches are made in parallel with the steps; a collate_fn that converts element by element "
              "is worth vectorising." if torch else
              "Make the batches in parallel with the steps (workers, prefetching), or do less work per batch."))
    if workers:
        fix = (f"The loop waits in next() for its batches: the DataLoader's {workers} workers make them slower than "
               "the steps use them. Raise num_workers where cores are free, or do less work per batch.")
    evidence = {"input_share": share, "input_share_low": by_round["input_share_low"],
                "input_share_high": by_round["input_share_high"], "rounds": by_round["rounds"],
                "input_wait_seconds_per_step": round(lost, 7), "step_seconds": step,
                "measured_by": "next() on the loop's iterator, timed every step, by round",
                "cores_busy_mean": round(fit.cores_busy_mean, 2), "cores_allowed": allowed}
    return Finding(
        id="input_bound", severity="high" if share >= INPUT_HIGH else "moderate",
        title=f"The training loop waits for input {share:.0%} of each step ({ms(lost)} of {ms(step)}, "
              f"{by_round['input_share_low']:.0%} to {by_round['input_share_high']:.0%} over {by_round['rounds']} "
              "rounds)",
        evidence=evidence, fix=costliest_first(split, evidence, fix),
        expected_gain=f"up to {step / max(step - lost, 1e-9):.2f}x faster steps ({ms(step)} -> {ms(step - lost)}, "
                      "the step without its wait)")


# Keras' JAX and PyTorch iterators make each batch in the training thread, between steps. Wrapping arrays
# already in memory in tf.data or a PyDataset adds cost there (measured on JAX: 0.31 -> 0.69 / 0.53 ms a step).
BACKEND_INPUT_FIX = (
    "Keras makes each batch in the training thread, between steps. For arrays already in memory, a larger "
    "batch_size spreads the per-batch cost (slicing, conversion, the copy to the device) over more examples; "
    "do not wrap them in tf.data or a PyDataset, which adds cost on this backend. For work per element "
    "(reading, decoding, augmenting), make batches in parallel with the step: a keras.utils.PyDataset with "
    "workers=N{torch}.")


def backend_input_bound(timed: FitInput, fit: Phase, allowed: float) -> Finding | None:
    """A fit on Keras' JAX or PyTorch backend waiting in Keras' data iterator: slicing and
    converting each batch into the backend's tensors, in the training thread."""
    step = fit.step_seconds_p50
    if not step:
        return None
    by_round = rounds_verdict(timed.get("rounds") or [])
    if by_round is not None:  # the rounds' interval decides: one that straddles the threshold is noise
        if not by_round["established"]:
            return None
        share = by_round["input_share"]
        wait = step * share
    elif "rounds" in timed:  # a fit too short for three rounds: one figure, a mean wait against a median step
        return None
    else:  # a run recorded before the rounds: one figure
        wait = min(step, backend_input_wait(timed, fit))
        share = wait / step
        if share < INPUT_MODERATE:
            return None
    backend = timed.get("backend") or "?"
    evidence = {"input_share": round(share, 3), "input_wait_seconds_per_step": round(wait, 6),
                "input_share_low": by_round and by_round["input_share_low"],
                "input_share_high": by_round and by_round["input_share_high"],
                "step_seconds": round(step, 6), "compute_in_job_seconds": round(step - wait, 6),
                "measured_by": f"next() on Keras' data iterator ({backend} backend)", "batches": timed.get("batches"),
                "cores_busy_mean": round(fit.cores_busy_mean, 2), "cores_allowed": allowed}
    return Finding(
        id="input_bound", severity="high" if share >= INPUT_HIGH else "moderate",
        title=f"Training waits for input {share:.0%} of each step ({ms(wait)} of {ms(step)}): Keras' data "
              f"iterator making each batch and converting it to {backend} tensors",
        evidence=evidence,
        fix=BACKEND_INPUT_FIX.format(torch=", or a torch DataLoader with num_workers=N (pin_memory=True on a GPU)"
                                     if backend == "torch" else ""),
        expected_gain=f"up to {step / max(step - wait, 1e-9):.1f}x faster steps ({ms(step)} -> {ms(step - wait)}, "
                      "the step without its wait)")


@rule("input_bound", category="performance", version=16, explains_idle=True)  # 16: each round begun in doubt a look
def _input_bound(f: RunFacts) -> Finding | None:
    if f.fit is not None and f.fit.name == TRAIN_LOOP:
        return loop_input_bound(f.last(LoopInput), f.fit, f.cores_allowed, f.fit_config, f.input_split)
    timed = fit_input(f.of_kind(Kind.FIT_INPUT), f.fit) if f.fit is not None else None
    if timed is not None and f.fit is not None:
        return backend_input_bound(timed, f.fit, f.cores_allowed)
    per_step = fit_input_bound(f.input_split, f.fit, f.cores_allowed, f.fit_config)
    paid = (f.input_split or {}).get("epoch_start_input")
    busy = None
    if paid and len(f.samples) > 1:
        spans = [(start, start + seconds) for start, seconds in paid["waits"]]
        cpu = sum(cpu_at(f.samples, b) - cpu_at(f.samples, a) for a, b in spans)
        busy = cpu / max(1e-9, sum(b - a for a, b in spans))
    at_starts = epoch_start_input_bound(f.input_split, f.fit, f.cores_allowed, busy, f.fit_config)
    # Where both are paid, the larger tells (keras-io's structured-data program: 81% of its training time as
    # epochs start, 15% of each step besides: "15% of each step" alone hid most of it).
    if per_step is None or (at_starts is not None
                            and at_starts.evidence["epoch_start_share"] >= per_step.evidence["input_share"]):
        return at_starts
    return per_step
