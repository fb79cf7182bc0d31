"""Time a fit spends not stepping: ``stalls`` (pauses at an epoch's start, between steps and after
the last step until fit returns; the diagnosis's own pauses left out) and ``startup_dominated``
(imports and the first step's tracing against the run's wall time)."""

from __future__ import annotations

import bisect
from collections.abc import Callable

from tensorgauge.analyse.phases import cpu_at, main_fit, spans_outside
from tensorgauge.analyse.rules import RunFacts, rule
from tensorgauge.hook.protocol import InputAB, InputProbe, InputStages, Kind, Trace
from tensorgauge.model import Finding, Phase, Severity
from tensorgauge.steps import StepDigest

STARTUP_SHARE, STARTUP_MIN_SECONDS = 0.5, 3.0
# A step (or a wait before an epoch's first) this long is a stall. Not under a second: tf.data makes
# 0.55-0.66 s pauses at random epoch starts and fit ends on TensorFlow 2.21 (measured bare, with and without
# shuffle), and a threshold inside that noise flips the verdict from run to run. Their cause, seen with gdb
# on keras-io's weather forecaster (bare, where they reach 1.3-6.5 s as its 15 s epochs go on): deleting an
# iterator (a new epoch's, a validation pass's end, fit's return) waits in RootDataset::Iterator's destructor
# for the iterator's autotuning thread, asleep in Model::OptimizeLoop until its next wake, no core busy.
STALL_FACTOR, STALL_MIN_SECONDS = 10.0, 1.0
STALL_MIN_LOST_SECONDS = 1.0
STALL_MODERATE_SHARE, STALL_HIGH_SHARE = 0.05, 0.2  # of the fit's wall lost to stalls
IDLE_CORES = 0.25  # a pause with fewer of the job's cores busy waited on something: it did not compute
# Idle pauses where an iterator is deleted (an epoch's start, a validation pass's end, fit's return) count only
# when this many come in one fit: TensorFlow 2.21's iterator teardown makes them at random, and one or two of
# them came and went from run to run of the same program (keras-io's convnet, weather forecaster and mixup: a
# stall in 1 to 4 runs of 5). Pauses the program makes there repeat as its epochs go on.
TEARDOWN_MIN_REPEATS = 3
# A pause counts as a teardown's wait with fewer of the job's cores busy than this: the pipeline's threads may
# finish a batch in flight meanwhile (keras-io's mixup, two zipped pipelines with maps: 0.27 cores through a
# lone 1.6 s pause as fit returned, in 1 run of 5).
TEARDOWN_IDLE_CORES = 0.5
ARRAYS_AUTOTUNE_MEASURED = ("On keras-io's antirectifier (TensorFlow 2.21, bare, 2 runs of each, interleaved) fit took 60.5 and "
                            "60.7 s against 68.2 and 71.3 s on the arrays, its waits at epoch starts and validation ends "
                            "0.03 s against 5.1 and 10.9 s; the same pipeline with autotuning on took 70.4 and 66.9 s.")
AUTOTUNE_MEASURED = ("On keras-io's weather forecaster (TensorFlow 2.21, bare, 2 interleaved pairs) it took the pauses from "
                     "9.1 and 11.1 s a run to 0.1 and 0.0 s, and its epochs from 16.1 and 17.4 s to 14.8 and 14.0 s, "
                     "the steps no slower.")
AUTOTUNE_CAUTION = ("It can also cost: on a keras-io LSTM program (bare, 2 of 2 pairs) the same change made the fit 9% "
                    "and 26% slower. Time your fit with and without it.")
WARMUP_STEPS = 3  # the fit's first steps trace and build the train function: start-up, not stalls


def first_steps(fit: Phase, digests: list[StepDigest]) -> list[tuple[float, float]]:
    """(end, seconds) of the first steps kept of each phase inside ``fit``, in time order."""
    return sorted((end, seconds) for d in digests for end, seconds in d.first
                  if end is not None and fit.start <= end <= fit.end + 1e-6)


def diagnosis_pauses(probes: list[InputProbe], ends: list[float], excursions: list[list[float]] | None = None
                     ) -> list[tuple[float, float]]:
    """(from, to) of the pauses the diagnosis itself made: the A/B's compute-only excursions
    (``excursions``), starting the profiler, and stopping it and reading its trace (inside a
    training step), from its ``input_probe`` events (``ends``: when each was sent)."""
    out = [(float(a), float(b)) for a, b in excursions or []]
    for data, end in zip(probes, ends):
        stop, start = data.get("stop_seconds") or 0.0, data.get("start_seconds") or 0.0
        began = end - stop - sum(data.get("step_seconds") or []) - start
        out += [(end - stop, end), (began, began + start)]
    return out


def _seconds(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def _after_last_step(fit: Phase, nested: list[Phase], digests: list[StepDigest]) -> float | None:
    """When the fit's work ended: its last step, or a phase inside it that ended later (validation)."""
    last = max((d.last_end for d in digests if d.last_end is not None and fit.start <= d.last_end <= fit.end + 1e-6),
               default=None)
    if last is None:
        return None
    return max([last] + [p.end for p in nested if p.kind != "epoch" and last < p.end <= fit.end + 1e-6])


def fit_pauses(fit: Phase | None, epochs: list[Phase], digests: list[StepDigest],
               own: list[tuple[float, float]] | None = None, nested: list[Phase] | None = None,
               cpu_at: Callable[[float], float] | None = None) -> dict[float, dict]:
    """Pauses in training, by when each began: steps far above the fit's median (:data:`STALL_FACTOR` x,
    at least :data:`STALL_MIN_SECONDS`), epochs that take that long from their start to the end of
    their first step, a validation step that long against the validation's own median, and a wait
    that long after the fit's last step (or its last validation, of the phases ``nested`` in it)
    before it returned. The fit's first :data:`WARMUP_STEPS` steps and its first validation's
    (tracing, building) are start-up, not pauses. Time inside ``own`` (the tool's own pauses) is
    not counted. ``cpu_at``: the job's cumulative CPU seconds at a time, for the cores it kept busy
    in each pause (``cores_busy``)."""
    validations = sorted((p for p in nested or [] if p.kind == "evaluate"), key=lambda p: p.start)
    # A training step that spans a validation pass (the last of an epoch, timed to the next) is not a stall.
    own_training = (own or []) + [(p.start, p.end) for p in validations]
    own = own or []
    if fit is None or not fit.step_seconds_p50 or not epochs:
        return {}
    p50 = fit.step_seconds_p50
    limit = max(STALL_MIN_SECONDS, STALL_FACTOR * p50)
    warmup = {end for end, _ in first_steps(fit, digests)[:WARMUP_STEPS]}
    epochs = sorted(epochs, key=lambda p: p.start)
    starts = [p.start for p in epochs]

    def epoch_of(t: float) -> Phase | None:
        i = bisect.bisect_right(starts, t) - 1
        return epochs[i] if i >= 0 and t <= epochs[i].end + 1e-6 else None

    # Each epoch's start: from the epoch's begin to the end of its first step (the input pipeline
    # starting over shows up before that step, inside it, or both): one stall when that long.
    first_of: dict[int, tuple[float, float]] = {}
    for end, seconds in (item for d in digests for item in d.first[:1]):
        epoch = epoch_of(end) if end is not None else None
        if epoch is not None and (id(epoch) not in first_of or end < first_of[id(epoch)][0]):
            first_of[id(epoch)] = (end, seconds)
    found: dict[float, dict] = {}  # by when the stall began
    spans: dict[float, list[tuple[float, float]]] = {}  # ... and its parts outside the tool's own pauses

    def keep(outside: list[tuple[float, float]], where: dict) -> None:
        """A pause of these parts: it begins where the first begins (after any of the tool's own work
        that opened it: a profiler's stop inside the step, an excursion at the epoch's start) and ends
        where the last ends (``ends``); its ``seconds`` are theirs, the tool's work between them left out."""
        begin = round(outside[0][0], 3)
        found[begin] = {"t": begin, "seconds": round(_seconds(outside), 3), "ends": round(outside[-1][1], 3), **where}
        spans[begin] = outside

    for epoch in epochs[1:]:  # the first epoch's start is the fit's start-up
        first = first_of.get(id(epoch))
        outside = spans_outside(epoch.start, first[0], own) if first is not None else []
        if _seconds(outside) >= limit:
            keep(outside, {"epoch": epoch.name, "at_epoch_start": True})
    counted = {end for end, _ in first_of.values()}
    # The first validation's first steps trace and build the test function: start-up too.
    warmup |= {end for d in digests for end, _ in d.first[:WARMUP_STEPS]
               if validations and end is not None and validations[0].start < end <= validations[0].end + 1e-6}
    for digest in digests:
        for seconds, end in digest.slowest:
            epoch = epoch_of(end) if end is not None else None
            if epoch is None or end in warmup or end in counted:
                continue
            validation = next((v for v in validations if v.start < end <= v.end + 1e-6), None)
            # A validation step is held against the validation's own median.
            bound = max(STALL_MIN_SECONDS, STALL_FACTOR * (validation.step_seconds_p50 or p50)) if validation else limit
            if seconds < bound:
                continue
            outside = spans_outside(end - seconds, end, own if validation else own_training)
            if _seconds(outside) >= bound:
                keep(outside, {"epoch": epoch.name, "at_epoch_start": False,
                               **({"in_validation": True} if validation else {})})
    done = _after_last_step(fit, nested or [], digests)
    if done is not None:
        outside = spans_outside(done, fit.end, own_training)
        if _seconds(outside) >= limit:
            keep(outside, {"epoch": "fit", "at_epoch_start": False, "after_last_step": True})
    if cpu_at is not None:  # the cores the job kept busy through each pause, the tool's own pauses left out
        for t, x in found.items():
            busy = sum(cpu_at(b) - cpu_at(a) for a, b in spans[t])
            x["cores_busy"] = round(max(0.0, busy) / x["seconds"], 2)
    return found


def stalls(fit: Phase | None, epochs: list[Phase], digests: list[StepDigest],
           own: list[tuple[float, float]] | None = None, nested: list[Phase] | None = None,
           arrays: bool = False, cpu_at: Callable[[float], float] | None = None,
           pipeline: dict | None = None) -> Finding | None:
    """The fit's pauses (:func:`fit_pauses`) less the idle ones at iterator teardowns that came by chance
    (:func:`_without_chance_teardowns`), where they lost :data:`STALL_MIN_LOST_SECONDS` or more.
    ``pipeline``: the fit's config (its tf.data pipeline's autotuning, Python ops)."""
    found = fit_pauses(fit, epochs, digests, own, nested, cpu_at)
    if fit is None or not found or not fit.step_seconds_p50:
        return None
    p50 = fit.step_seconds_p50
    limit = max(STALL_MIN_SECONDS, STALL_FACTOR * p50)
    if cpu_at is not None:
        found = _without_chance_teardowns(found)
    lost = sum(max(0.0, x["seconds"] - p50) for x in found.values())
    if not found or lost < STALL_MIN_LOST_SECONDS:
        return None
    share = lost / fit.wall_seconds if fit.wall_seconds > 0 else 0.0
    listed = sorted(found.values(), key=lambda x: -x["seconds"])
    at_start = sum(1 for x in listed if x["at_epoch_start"])
    longest = listed[0]
    where = ("after its last step, before fit returned" if longest.get("after_last_step") else
             "at an epoch's start" if longest["at_epoch_start"] else
             "in a validation pass" if longest.get("in_validation") else "mid-epoch")
    idle = [x for x in listed if x.get("cores_busy") is not None and x["cores_busy"] < IDLE_CORES]
    pipeline = pipeline or {}
    waited = longest in idle and len(idle) * 2 >= len(listed)
    busy = max((x["cores_busy"] for x in idle), default=0.0)
    teardown = ("deleting an epoch's iterator (as an epoch starts, a validation pass ends, fit returns) waits until "
                "the iterator's autotuning thread wakes: up to seconds, longer as the fit goes on (TensorFlow 2.21).")
    if waited and pipeline.get("dataset") and pipeline.get("dataset_autotune") and pipeline.get("dataset_python_ops") == []:
        fix = (f"The job's cores sat idle through the pauses (at most {busy:.2f} cores busy): it waited, it did not "
               "compute, so no pipeline work (a shuffle buffer, a map) was being redone, and the pipeline runs no "
               f"Python of yours. fit reads a tf.data pipeline with autotuning on, and {teardown} Turn autotuning off "
               "for the pipeline, and the validation data's: options = tf.data.Options(); "
               "options.autotune.enabled = False; dataset = dataset.with_options(options). " + AUTOTUNE_MEASURED
               + " " + AUTOTUNE_CAUTION)
    elif waited and arrays and pipeline.get("backend") == "tensorflow":
        fix = (f"The job's cores sat idle through the pauses (at most {busy:.2f} cores busy): it waited, it did not "
               "compute, so Keras was not converting or shuffling the arrays. fit was given arrays, from which "
               f"Keras makes a tf.data pipeline with autotuning on, and {teardown} Make the pipeline yourself with "
               "autotuning off and give fit the datasets: options = tf.data.Options(); options.autotune.enabled = "
               "False; train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).batch(batch_size)"
               ".prefetch(tf.data.AUTOTUNE).with_options(options), and the validation data's likewise (without the "
               "shuffle). " + ARRAYS_AUTOTUNE_MEASURED + " " + AUTOTUNE_CAUTION)
    elif longest.get("after_last_step") and at_start * 2 < len(listed):  # not one outlier among epoch starts
        fix = ("The longest pause comes after the last training step, before fit returns: work at the end of "
               "training (callbacks' on_train_end: saving, a final evaluation, uploads) or the input pipeline "
               "shutting down (its threads, a generator's workers). Time your callbacks' on_train_end; the "
               "report's timeline shows what the machine did then.")
    elif at_start * 2 >= len(listed) and arrays:
        fix = ("The pauses come as epochs start, and fit was given arrays: Keras makes a new tf.data pipeline from "
               "them at every epoch (converting and shuffling all of them) before the epoch's first step. Building "
               "the pipeline once yourself with a shuffle buffer of the whole data set did not remove the pause on "
               "keras-io's VAE (the buffer refills each epoch); shuffle=False or a smaller buffer would, at the "
               "cost of less shuffling (not measured).")
    elif at_start * 2 >= len(listed):
        fix = ("The pauses come as epochs start: the input pipeline starts over each epoch (a shuffle buffer "
               "refilled, files reopened, a cache rebuilt, a generator restarted). Prefetch "
               "(.prefetch(tf.data.AUTOTUNE)), keep the shuffle buffer small, cache after the expensive steps, "
               "and run with --diagnose to see the pipeline's share.")
    else:
        when = "in validation passes" if all(x.get("in_validation") for x in listed) else "mid-epoch"
        fix = (f"The pauses come {when}: periodic work in callbacks (checkpoints, logging, evaluation), "
               "Python's garbage collector, swapping, or another process taking the cores. Compare their times "
               "with your callbacks' schedule; the report's timeline shows what the machine did then.")
    # Graded by the pauses without the longest: one outlier (a 10 s pause among 2 s ones) does not make it
    # high, and a single pause, however long, is low. TensorFlow's iterator teardown pauses at random: keras-io's
    # convnet once waited 5.0 s as its third epoch started (22% of the fit) and not at all in its other runs;
    # the healthy demo beside another job, 1.1 s as fit returned. A warning that comes and goes from run to run
    # of the same program says nothing about it; pauses that repeat do.
    typical = 0.0 if len(listed) == 1 else (lost - longest["seconds"]) / max(fit.wall_seconds, 1e-9)
    severity: Severity = ("high" if typical >= STALL_HIGH_SHARE else
                          "moderate" if typical >= STALL_MODERATE_SHARE else "low")
    gain = f"up to {lost:.1f} s ({share:.0%} of the fit)"
    if AUTOTUNE_CAUTION in fix:  # --try-fixes times steps, not the pauses between them: the job's to time
        gain = f"not measured on this job: try it and time the fit (its pauses lost {lost:.1f} s, {share:.0%})"
    return Finding(
        id="stalls", severity=severity,
        title=f"Training stalled {len(listed)} times ({lost:.1f} s lost, {share:.0%} of fit); the longest, "
              f"{longest['seconds']:.1f} s, {where}"
              f"{'' if longest.get('after_last_step') else ' in ' + longest['epoch']} at {longest['t']:.1f} s",
        evidence={"stalls": listed[:10], "count": len(listed), "at_epoch_start": at_start,
                  "lost_seconds": round(lost, 3), "step_seconds_p50": p50, "stall_seconds_min": round(limit, 3)},
        fix=fix, expected_gain=gain)


def at_teardown(pause: dict) -> bool:
    """A pause where an epoch's iterator is deleted: as an epoch starts, a validation pass ends, fit returns."""
    return bool(pause.get("at_epoch_start") or pause.get("after_last_step") or pause.get("in_validation"))


def _without_chance_teardowns(found: dict[float, dict]) -> dict[float, dict]:
    """``found`` less its idle pauses (:data:`TEARDOWN_IDLE_CORES`) at iterator teardowns where fewer than
    :data:`TEARDOWN_MIN_REPEATS` of them came (chance, not the program: see the constant)."""
    chance = [t for t, x in found.items()
              if at_teardown(x) and x.get("cores_busy", TEARDOWN_IDLE_CORES) < TEARDOWN_IDLE_CORES]
    if len(chance) >= TEARDOWN_MIN_REPEATS:
        return found
    return {t: x for t, x in found.items() if t not in chance}


def startup_dominated(phases: list[Phase], wall: float, digests: list[StepDigest]) -> Finding | None:
    imports = sum(p.wall_seconds for p in phases if p.kind == "import" and p.parent is None)
    fit = main_fit(phases)
    first = first_steps(fit, digests) if fit else []
    first_step = first[0][1] if first else 0.0  # the first step traces and builds the train function
    startup = imports + first_step
    if wall < STARTUP_MIN_SECONDS or startup < STARTUP_SHARE * wall:
        return None
    imported = [p.name.removeprefix("import ") for p in phases if p.kind == "import" and p.parent is None]
    what = " and ".join(dict.fromkeys(imported)) or "the frameworks"  # the imports' own names: keras, tensorflow
    return Finding(
        id="startup_dominated", severity="low",
        title=f"Start-up took {startup / wall:.0%} of the run ({imports:.1f} s importing {what}, "
              f"{first_step:.1f} s building the first step)",
        evidence={"import_seconds": round(imports, 3), "first_step_seconds": round(first_step, 3),
                  "wall_seconds": round(wall, 3)},
        fix="For short jobs this is expected. Train longer per process, or keep one process and run many jobs in "
            "it (a notebook, a server) instead of a new process each time.",
        expected_gain=None)


@rule("startup_dominated", category="performance")
def _startup_dominated(f: RunFacts) -> Finding | None:
    return startup_dominated(f.phases, f.record.wall_seconds or 0.0, f.step_digests)


@rule("stalls", category="performance", explains_idle=True, version=6)  # 6: a pause begins outside the tool's work
def _stalls(f: RunFacts) -> Finding | None:
    found = _pause_inputs(f)
    if found is None:
        return None
    return stalls(**found, arrays=(f.fit_config or {}).get("dataset") is False, pipeline=dict(f.fit_config or {}))


def teardown_waits(f: RunFacts) -> list[dict]:
    """The fit's idle pauses where an iterator is deleted (:func:`at_teardown`, under
    :data:`TEARDOWN_IDLE_CORES`): the job waited on TensorFlow there, it did not train (by chance or
    not: the ``stalls`` finding's to say)."""
    found = _pause_inputs(f)
    if found is None or found["cpu_at"] is None:
        return []
    return [x for x in fit_pauses(**found).values()
            if at_teardown(x) and x.get("cores_busy", TEARDOWN_IDLE_CORES) < TEARDOWN_IDLE_CORES]


def _pause_inputs(f: RunFacts) -> dict | None:
    """What :func:`fit_pauses` reads of a run: its fit, epochs, steps, the tool's own pauses, the phases
    nested in the fit and the job's CPU over time. None without a fit."""
    if f.fit is None:
        return None
    index = f.phases.index(f.fit)
    probes = [(e.t, probe) for e in f.of_kind(Kind.INPUT_PROBE) if not (probe := e.read(InputProbe)).get("error")]
    excursions = [[e.t - a, e.t - b] for e in f.of_kind(Kind.INPUT_AB)
                  for a, b in e.read(InputAB).get("excursions_before") or []]
    # The pipeline's prefixes pulled as the fit ended (hook.stage_costs): the tool's pause, just before the event.
    excursions += [[e.t - float(e.read(InputStages).get("cost_seconds") or 0.0), e.t]
                   for e in f.of_kind(Kind.INPUT_STAGES)]
    own = diagnosis_pauses([probe for _, probe in probes], [t for t, _ in probes], excursions)
    # A step that traced (and compiled) its function is start-up or retracing, not a stall.
    own += [(e.t - float(e.read(Trace).get("seconds") or 0.0), e.t) for e in f.of_kind(Kind.TRACE)]
    series = f.samples if len(f.samples) > 1 else None
    return {"fit": f.fit, "epochs": [p for p in f.phases if p.kind == "epoch" and p.parent == index],
            "digests": f.step_digests, "own": own,
            "nested": [p for p in f.phases if f.fit.start <= p.start and p.end <= f.fit.end + 1e-6 and p is not f.fit],
            "cpu_at": (lambda t: cpu_at(series, t)) if series is not None else None}
