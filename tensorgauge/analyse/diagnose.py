"""Why a TensorFlow job's steps are slow: findings with measured evidence and a fix (eager
execution, retracing, thread limits, oversubscription, tiny steps, XLA on a CPU, predict in a loop,
idle cores). The input verdict is in :mod:`.input_rules`, pauses and start-up in :mod:`.pauses`.

Pure: from the recorded run (phases, samples, the hook's events, the environment). Thresholds are
named below.
"""

from __future__ import annotations

import statistics

import numpy as np

from tensorgauge.analyse.pauses import teardown_waits
from tensorgauge.analyse.phases import model_calls
from tensorgauge.analyse.rules import RunFacts, idle_explainers, rule
from tensorgauge.analyse.summary import other_cores
from tensorgauge.hook.protocol import (
    SMALL_BATCH,
    SMALL_STEP_SECONDS,
    TRAIN_LOOP,
    EagerGradients,
    EagerProbe,
    FitConfig,
    Kind,
    LoopInput,
    PredictProbe,
    SpeProbe,
    Trace,
    XlaProbe,
)
from tensorgauge.model import Event, Finding, Phase, Severity, payloads
from tensorgauge.series import SampleSeries
from tensorgauge.units import format_bytes

THREAD_BOUND = 0.8  # cores busy / thread limit at which the limit is what binds
IDLE = 0.5  # cores busy / cores allowed under which cores count as idle
# Without the steps_per_execution trial (--diagnose), small_batch needs steps under this, clear of the 5 ms
# a trial is run under: keras-io's mixup, its median step 4.8-5.5 ms over 5 runs, got it in 1 of them.
SMALL_STEP_UNTRIED_SECONDS = 0.004
RETRACES_MODERATE, RETRACES_HIGH = 5, 20
EAGER_GRADIENTS = 16  # eager GradientTape.gradient calls that make a custom loop eager
OVERSUBSCRIBED_MODERATE, OVERSUBSCRIBED_HIGH = 3.0, 5.0  # runnable threads per CPU ("far more")
PREDICT_LOOP_CALLS, PREDICT_SMALL_STEPS = 20, 2  # predict calls of at most this many batches each
PREDICT_MIN_GAIN = 1.5  # model(x) against predict(x), measured in the job: less is not worth a finding
PREDICT_HIGH_SHARE = 0.2  # of the run's wall spent in those calls

def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def eager_execution(config: FitConfig | None, fit: Phase | None, events: list[Event]) -> Finding | None:
    """fit told to run eagerly (on JAX also: jit_compile=False), or else a custom loop computing
    gradients outside any tf.function. Not on PyTorch: its steps are eager by design, and run_eagerly
    changes nothing there."""
    backend = (config or {}).get("backend") or "tensorflow"
    if config and backend == "jax" and not config.get("loop") and (config.get("run_eagerly")
                                                                    or config.get("jit_compile") == "False"):
        switch = "run_eagerly=True" if config.get("run_eagerly") else "jit_compile=False"
        return Finding(
            id="eager_execution", severity="high",
            title=f"fit runs eagerly on JAX ({switch}): every op is dispatched from Python, step by step, "
                  "instead of one jax.jit-compiled step",
            evidence={"backend": "jax", "run_eagerly": config.get("run_eagerly"),
                      "jit_compile": config.get("jit_compile"), "step_seconds_p50": fit.step_seconds_p50 if fit else None},
            fix="Compile with jit_compile=True (the default 'auto' is True on JAX) and without run_eagerly=True: "
                "fit then runs each step as one XLA program. Keep eager mode for debugging only.",
            expected_gain="not measured in this run: tensorgauge run --try-fixes times it (no_eager); a jitted step was "
                          "45x faster on tensorgauge's own JAX test job")
    if config and backend == "tensorflow" and (config.get("run_eagerly") or config.get("functions_run_eagerly")):
        switch = "model.run_eagerly" if config.get("run_eagerly") else "tf.config.run_functions_eagerly(True)"
        return Finding(
            id="eager_execution", severity="high",
            title=f"fit runs eagerly ({switch}): every op is dispatched from Python, step by step",
            evidence={"run_eagerly": config.get("run_eagerly"),
                      "functions_run_eagerly": config.get("functions_run_eagerly"),
                      "step_seconds_p50": fit.step_seconds_p50 if fit else None},
            fix="Remove run_eagerly=True from compile() (or set model.run_eagerly = False) and call "
                "tf.config.run_functions_eagerly(False): fit then runs a compiled graph. "
                "Keep eager mode for debugging only.",
            expected_gain="not measured in this run: tensorgauge run --try-fixes times it (no_eager); graph execution was "
                          "18.6x faster on tensorgauge's eager scenario")
    eager = payloads(events, EagerGradients)
    if fit is not None and fit.name != TRAIN_LOOP or not eager:
        return None
    last = max(eager, key=lambda d: d.get("count", 0))
    if last.get("count", 0) < EAGER_GRADIENTS:
        return None
    count, seconds = last.get("count", 0), last.get("seconds")
    per_second = count / seconds if seconds else None
    evidence = {"eager_gradient_calls": count, "seconds": round(seconds or 0.0, 3),
                "steps_per_second": round(per_second, 1) if per_second else None}
    return Finding(
        id="eager_execution", severity="high",
        title=f"A custom training loop runs eagerly: GradientTape.gradient ran {count}+ times outside "
              "tf.function",
        evidence=evidence,
        fix="Decorate the training step (the function that opens the GradientTape and applies the gradients) "
            "with @tf.function, so each step runs as one compiled graph; keep batch shapes fixed "
            "(drop_remainder=True) so it traces once.",
        expected_gain=_eager_gain(next(iter(payloads(events, EagerProbe)), None),
                                  next(iter(payloads(reversed(events), LoopInput)), None), fit, evidence))


def _eager_gain(probe: EagerProbe | None, loop: LoopInput | None, fit: Phase | None, evidence: dict) -> str:
    """The gain of tf.function as the eager probe measured it on the loop's model (evidence filled in):
    the step less its wait in next() sped up by the probe's ratio (the loss and metrics, which the
    probe leaves out, are eager ops too)."""
    usual = "graph execution is usually several times faster on small and medium models"
    if not probe or not probe.get("eager_step_seconds") or not probe.get("graph_step_seconds"):
        why = (probe or {}).get("skipped") or (probe or {}).get("error")
        return usual + (f" (not measured here: {why})" if why else "")
    eager, graph = statistics.median(probe["eager_step_seconds"]), statistics.median(probe["graph_step_seconds"])
    evidence.update(probe_eager_seconds=round(eager, 6), probe_graph_seconds=round(graph, 6),
                    probe_trace_seconds=round(probe.get("trace_seconds") or 0.0, 4))
    text = (f"a step of the loop's model and optimizer on one of its batches (a stand-in loss) takes {_ms(eager)} "
            f"eagerly and {_ms(graph)} in a tf.function ({eager / max(graph, 1e-9):.1f}x, measured in this run)")
    step = fit.step_seconds_p50 if fit else None
    if step:
        counted = max(1, (loop or {}).get("steps", 1) - 1)
        wait = min(step, ((loop or {}).get("next_seconds_total") or 0.0) / counted)
        after = (step - wait) * graph / max(eager, 1e-9) + wait
        evidence["expected_step_seconds"] = round(after, 6)
        text += f": the loop's step would go from {_ms(step)} to about {_ms(after)} ({step / after:.1f}x)"
    return text


# Functions tf.data and Keras build afresh for every pipeline, fit and model: traced once each,
# never retraced by the user's code. Only for trace events recorded before they carried an origin.
LIBRARY_FUNCTIONS = ("Dataset_", "one_step_on_", "multi_step_on_", "train_function", "test_function",
                     "predict_function")


def _user_trace(data: Trace) -> bool:
    if "origin" in data:
        return data["origin"] == "user"
    return not str(data.get("function", "")).startswith(LIBRARY_FUNCTIONS)


def retracing(events: list[Event]) -> Finding | None:
    """A tf.function of the user's code traced more than :data:`RETRACES_MODERATE` times: one
    instance traced again and again (new shapes, Python arguments), or a new instance made at
    each call (a tf.function created inside a loop or a function)."""
    groups: dict[tuple[str, str | None], list[Trace]] = {}
    for trace in payloads(events, Trace):
        if _user_trace(trace):
            groups.setdefault((str(trace.get("function", "?")), trace.get("where")), []).append(trace)
    worst = sorted(((key, traces) for key, traces in groups.items() if len(traces) > RETRACES_MODERATE),
                   key=lambda item: -len(item[1]))
    if not worst:
        return None
    (name, where), traces = worst[0]
    n = len(traces)
    instances = sum(1 for d in traces if d.get("instance_trace", 1) == 1)
    seconds = sum(d.get("seconds") or 0.0 for d in traces)
    grown = [b for b in (d.get("rss_delta_bytes") for d in traces) if b is not None]
    memory = sum(b for b in grown if b > 0)
    at = f" ({where})" if where else ""
    evidence: dict = {"traces": {f"{k[0]} ({k[1]})" if k[1] else k[0]: len(v) for k, v in worst},
                      "instances": instances, "tracing_seconds": round(seconds, 3)}
    if grown:
        evidence.update(memory_bytes=memory, memory_bytes_per_trace=memory // max(1, len(grown)))
    jax = traces[0].get("framework") == "jax"
    what = "jax.jit function" if jax else "tf.function"
    if instances > n // 2:
        title = f"{what} '{name}'{at} was created anew and traced {n} times ({instances} instances)"
        fix = (f"Create the {what} once, outside the loop or function that runs it (decorate a module-level "
               "function or build it in __init__), and call that one instance: each new instance traces again.")
    elif jax:
        title = f"jax.jit function '{name}'{at} was traced and compiled {n} times"
        fix = ("Keep its argument shapes and dtypes constant (drop or pad the last partial batch: "
               "drop_remainder=True), and mark Python arguments static (static_argnums) only when they rarely change.")
    else:
        title = f"tf.function '{name}'{at} was traced {n} times"
        fix = ("Give the function a fixed input_signature (or reduce_retracing=True), pass tensors instead of "
               "Python numbers, and keep batch shapes constant (drop_remainder=True).")
    cost = f"{seconds:.2f} s of tracing" if seconds else "the graph builds (often 0.1-1 s each)"
    if grown:
        cost += f" and {format_bytes(memory)} of memory the traces took"
    return Finding(
        id="retracing", severity="high" if n > RETRACES_HIGH else "moderate", title=title, evidence=evidence,
        fix=fix, expected_gain=f"the {n} traces cost {cost} (measured); a stable function traces once")


def thread_limited(config: FitConfig | None, job: dict, fit: Phase | None, allowed: float,
                   samples: SampleSeries | None = None) -> Finding | None:
    """A thread limit below the CPUs allowed that binds: fit keeps that many cores busy (its mean,
    or the median of its samples, so that a pause in the fit does not hide the limit)."""
    if fit is None:
        return None
    limits = {}
    tensorflow = (config or {}).get("backend", "tensorflow") == "tensorflow"  # its pools run no JAX/PyTorch fit
    intra = tensorflow and ((config or {}).get("intra_op_threads")
                            or int((job.get("thread_env") or {}).get("TF_NUM_INTRAOP_THREADS", 0)))
    if intra:
        limits["intra_op_threads"] = intra
    if job.get("affinity_cpus"):
        limits["affinity_cpus"] = job["affinity_cpus"]
    limit = min(limits.values(), default=None)
    busy = fit.cores_busy_mean
    if samples is not None:
        first, last = samples.bounds(fit.start, fit.end)
        inside = samples["cores_busy"][first:last]
        inside = inside[~np.isnan(inside)]
        if len(inside):
            busy = max(busy, float(np.median(inside)))
    if not limit or limit >= allowed or busy < THREAD_BOUND * limit:
        return None
    what = " and ".join(f"{k.replace('_', ' ')} = {v}" for k, v in limits.items() if v == limit)
    return Finding(
        id="thread_limited", severity="high" if allowed / limit >= 2 else "moderate",
        title=f"{'TensorFlow' if tensorflow else 'The job'} is held to {limit:g} of {allowed:g} CPUs ({what}) and "
              "uses all it has",
        evidence={**limits, "cores_allowed": allowed, "fit_cores_busy_mean": round(fit.cores_busy_mean, 2),
                  "fit_cores_busy_median": round(busy, 2)},
        fix=f"Let TensorFlow use the CPUs it may: remove tf.config.threading.set_intra_op_parallelism_threads"
            f"({limit:g}) / TF_NUM_INTRAOP_THREADS (or set them to {allowed:g}) and widen the affinity mask (taskset).",
        expected_gain=f"up to {allowed / limit:.1f}x for compute-bound steps")


def cpu_oversubscribed(samples: SampleSeries, fit: Phase | None, cpus: float, threads_peak: int) -> Finding | None:
    """The machine's runnable threads (sampled once a second) against its CPUs, during fit or the run: past
    :data:`OVERSUBSCRIBED_MODERATE` per CPU in three samples of four (their lower quartile), graded by the
    median. A median alone came and went: keras-io's weather forecaster (a parallel map on 2 CPUs) sampled
    medians of 4, 4, 4, 6.5 and 6.5 in five runs, lower quartiles 2-4, and pools sized to the cores made its
    training slower (7.0 -> 12.2, 6.1 -> 7.6 and 9.6 -> 13.1 s), not faster."""
    inside = samples.between(fit.start, fit.end) if fit is not None else samples
    counts = inside.reported("runnable")
    if len(counts) < 3 or cpus <= 0:
        return None
    runnable = float(np.median(counts))
    sustained = float(np.percentile(counts, 25))
    per_cpu = runnable / cpus
    if sustained / cpus < OVERSUBSCRIBED_MODERATE:
        return None
    return Finding(
        id="cpu_oversubscribed", severity="high" if per_cpu >= OVERSUBSCRIBED_HIGH else "moderate",
        title=f"{runnable:g} threads compete for {cpus:g} CPUs ({per_cpu:.1f} per CPU)"
              + (" during training" if fit else ""),
        evidence={"runnable_threads_median": runnable, "runnable_threads_p25": sustained, "cpus": cpus,
                  "runnable_per_cpu": round(per_cpu, 2), "job_threads_peak": threads_peak, "samples": len(counts)},
        fix="Give each thread a core: size TensorFlow's pools (TF_NUM_INTRAOP_THREADS = cores, "
            "TF_NUM_INTEROP_THREADS = 2), set OMP_NUM_THREADS=1 when numpy work runs inside tf.data, and do not "
            "run several jobs on the same CPUs (give each its own with taskset or tensorgauge run --max-cpus).",
        expected_gain="not measured: less time lost to context switches and to threads preempted inside synchronised ops")


SPE_MIN_GAIN = 1.15  # a steps_per_execution trial faster than this by less: dispatch does not dominate
SMALL_BATCH_MIN_SHARE = 0.10  # of the fit's wall time the measured fix would save, else the finding is low


def spe_gain(probe: SpeProbe | None) -> tuple[float, float, int] | None:
    """(one step's seconds, a step's seconds with N steps a call, N) from a steps_per_execution trial."""
    if not probe or not probe.get("single_step_seconds") or not probe.get("multi_call_seconds"):
        return None
    n = int(probe.get("steps_per_execution") or 1)
    return (statistics.median(probe["single_step_seconds"]), statistics.median(probe["multi_call_seconds"]) / n, n)


def small_batch(config: FitConfig | None, fit: Phase | None, probe: SpeProbe | None = None,
                tool_seconds: float = 0.0) -> Finding | None:
    """Steps of under :data:`SMALL_STEP_SECONDS` (:data:`SMALL_STEP_UNTRIED_SECONDS` where no trial timed the
    fix) on a batch of at most :data:`SMALL_BATCH`: Python's
    dispatch of each step costs as much as its work. The fix fits the training: fit's
    ``steps_per_execution``, or several steps inside one compiled function for a custom loop. Where
    ``probe`` (``--diagnose``) timed N steps a call against one, the gain is that; a trial that gained
    under :data:`SPE_MIN_GAIN` shows dispatch does not dominate: no finding. ``tool_seconds``: what the
    diagnosis itself took of the fit (left out of the fit's time the saving is weighed against)."""
    if fit is None or not fit.step_seconds_p50 or fit.step_seconds_p50 >= SMALL_STEP_SECONDS:
        return None
    trial = spe_gain(probe) if fit.name != TRAIN_LOOP else None
    if trial is not None and trial[0] / trial[1] < SPE_MIN_GAIN:
        return None
    if trial is None and fit.step_seconds_p50 >= SMALL_STEP_UNTRIED_SECONDS:
        return None  # near the threshold, a step's speed of the moment would decide: the trial's to say
    batch = (config or {}).get("batch_size")
    if batch is not None and batch > SMALL_BATCH:
        return None
    per_execution = (config or {}).get("steps_per_execution") or 1
    loop = fit.name == TRAIN_LOOP
    if loop:
        backend = (config or {}).get("backend")
        if backend == "torch":
            fix = ("Raise the batch size (adjusting the learning rate), or compile the step: torch.compile on the "
                   "function that runs the model, the loss, backward() and optimizer.step() (on a GPU, "
                   "mode='reduce-overhead' replays it as one CUDA graph), so Python dispatches less per step.")
        else:
            fix = ("Raise the batch size (adjusting the learning rate), or run several steps inside one compiled "
                   "function: " + ("a jax.jit step that loops over N stacked batches with jax.lax.scan"
                                   if backend == "jax" else
                                   "a tf.function that takes the iterator and loops over N batches with tf.range") +
                   ", so Python dispatches once per N steps.")
    elif per_execution > 1:
        fix = (f"Raise batch_size (adjusting the learning rate): fit already runs {per_execution} steps per "
               "execution, and each step's work is still small.")
    else:
        fix = ("Raise batch_size (adjusting the learning rate), or compile(steps_per_execution=32) so Python "
               "dispatches once per 32 steps.")
    evidence: dict = {"step_seconds_p50": fit.step_seconds_p50, "batch_size": batch,
                      "steps_per_execution": per_execution}
    severity: Severity = "moderate"
    if trial is not None:
        single, multi, n = trial
        wall = max(fit.end - fit.start - float((probe or {}).get("total_seconds") or 0.0) - tool_seconds, 1e-9)
        saved = min((fit.steps or 0) * fit.step_seconds_p50 * (1 - multi / single), wall)
        evidence.update(trial_single_step_seconds=round(single, 7), trial_step_seconds=round(multi, 7),
                        trial_steps_per_execution=n, fit_seconds_saved=round(saved, 4))
        gain = (f"{single / multi:.1f}x faster steps, measured here: compile(steps_per_execution={n}) ran a step in "
                f"{_ms(multi)} against {_ms(single)}, on one repeated batch; about {saved:.2f} s of the fit's "
                f"{wall:.2f} s ({saved / wall:.0%})")
        if saved < SMALL_BATCH_MIN_SHARE * wall:  # the steps are a small part of the fit: little to win
            severity = "low"
    elif loop:
        gain = "not measured: a custom loop's steps are the job's own function"
    else:
        gain = ("not measured in this run (tensorgauge run --diagnose times steps_per_execution=32 on the job's "
                "model); on two public Keras programs with 1.7-4 ms steps it made the steps 2.2-2.5x faster")
    return Finding(
        id="small_batch", severity=severity,
        title=f"Steps are tiny ({_ms(fit.step_seconds_p50)}, batch {batch or 'unknown'}): per-step overhead dominates",
        evidence=evidence, fix=fix, expected_gain=gain)


def _idle(fit: Phase | None, allowed: float, others: float | None, waits: list[dict] | None = None) -> bool:
    """The fit kept under :data:`IDLE` of its cores busy while it trained (:func:`training_cores_busy`),
    and so did the machine: ``others`` (cores busy with other processes' work during the fit, on
    average) were not idle (a healthy fit on a loaded CI machine got 0.94 of 2)."""
    return fit is not None and fit.wall_seconds >= 1.0 and \
        training_cores_busy(fit, waits) + (others or 0.0) < IDLE * allowed


def training_cores_busy(fit: Phase, waits: list[dict] | None) -> float:
    """The fit's cores busy on average, its idle ``waits`` at iterator teardowns
    (:func:`~tensorgauge.analyse.pauses.teardown_waits`) left out: the job waited on TensorFlow there, it
    did not train (keras-io's mixup and TensorFlow's CNN tutorial, each with one 1-5 s wait as fit returned
    in 1 run of 5, read 0.81-0.93 cores busy in that run against 1.1-1.4 in the others)."""
    waited = sum(x["seconds"] for x in waits or [])
    if waited <= 0 or waited >= fit.wall_seconds:
        return fit.cores_busy_mean
    busy = fit.cores_busy_mean * fit.wall_seconds - sum(x["seconds"] * x.get("cores_busy", 0.0) for x in waits or [])
    return max(0.0, busy) / (fit.wall_seconds - waited)


def _idle_evidence(fit: Phase, allowed: float, others: float | None, waits: list[dict] | None = None) -> dict:
    return {"fit_cores_busy_mean": round(training_cores_busy(fit, waits), 2), "cores_allowed": allowed,
            "other_cores_mean": others, "step_seconds_p50": fit.step_seconds_p50,
            "teardown_wait_seconds": round(sum(x["seconds"] for x in waits or []), 3)}


def cores_idle(fit: Phase | None, allowed: float, explained: bool, others: float | None = None,
               input_unmeasured: str | None = None, waits: list[dict] | None = None) -> Finding | None:
    """Idle cores (see :func:`_idle`) that no other finding explains, in a run whose input split was
    measured: where it was not (``input_unmeasured``: why), the input may be the cause, and
    :func:`idle_cause_unknown` says so instead."""
    if fit is None or explained or input_unmeasured is not None or not _idle(fit, allowed, others, waits):
        return None
    return Finding(
        id="cores_idle", severity="moderate",
        title=f"Cores sit idle during training: {training_cores_busy(fit, waits):.2f} of {allowed:g} busy on average",
        evidence=_idle_evidence(fit, allowed, others, waits),
        fix="A larger batch gives each op more parallel work; tensorgauge run --diagnose profiles the steps.",
        expected_gain=None)


def idle_cause_unknown(fit: Phase | None, allowed: float, explained: bool, others: float | None,
                       input_unmeasured: str | None, waits: list[dict] | None = None) -> Finding | None:
    """Idle cores with no finding to explain them, in a run whose input split could not be measured:
    no cause is claimed, and the finding says how to measure it."""
    if fit is None or explained or input_unmeasured is None or not _idle(fit, allowed, others, waits):
        return None
    return Finding(
        id="idle_cause_unknown", severity="low",
        title=(f"Cores sat idle during training ({training_cores_busy(fit, waits):.2f} of {allowed:g} busy on "
               "average) and the cause is unknown: the input split was not measured"),
        evidence={**_idle_evidence(fit, allowed, others, waits), "input_not_measured": input_unmeasured},
        fix=("Measure it: tensorgauge run --diagnose runs the input A/B whatever it costs (why it did not run here: "
             f"{input_unmeasured})."),
        expected_gain=None)


# -- the registered rules, in the order they run --------------------------------------


@rule("eager_execution", category="performance", explains_idle=True)
def _eager_execution(f: RunFacts) -> Finding | None:
    return eager_execution(f.fit_config, f.fit, f.of_kind(Kind.EAGER_GRADIENTS) + f.of_kind(Kind.EAGER_PROBE)
                           + f.of_kind(Kind.LOOP_INPUT))


@rule("retracing", category="performance", explains_idle=True)
def _retracing(f: RunFacts) -> Finding | None:
    return retracing(f.of_kind(Kind.TRACE))


@rule("thread_limited", category="performance", explains_idle=True)
def _thread_limited(f: RunFacts) -> Finding | None:
    return thread_limited(f.fit_config, f.job, f.fit, f.cores_allowed, f.samples)


@rule("cpu_oversubscribed", category="performance", explains_idle=True, version=2)
def _cpu_oversubscribed(f: RunFacts) -> Finding | None:
    return cpu_oversubscribed(f.samples, f.fit, float(f.host.get("cores_logical") or f.cores_allowed),
                              f.summary.threads_peak)


@rule("small_batch", category="performance", explains_idle=True, version=3)  # 3: 4 ms untried
def _small_batch(f: RunFacts) -> Finding | None:
    return small_batch(f.fit_config, f.fit, f.first_ok(SpeProbe), float((f.input_split or {}).get("cost_seconds") or 0.0))


XLA_MODERATE, XLA_HIGH = 1.1, 1.5  # XLA step / plain step on a CPU


def xla_on_cpu(config: FitConfig | None, probe: XlaProbe | None, fit: Phase | None, gpus: int) -> Finding | None:
    """fit compiled with XLA (jit_compile=True) on a machine without a GPU, where XLA is often
    several times slower; the ratio from the hook's probe (or a --try-fixes trial) when measured.
    TensorFlow only: on JAX, XLA is how every step runs (jit_compile=False there means eager)."""
    if not config or config.get("jit_compile") != "True" or gpus or fit is None:
        return None
    if config.get("backend", "tensorflow") != "tensorflow":
        return None
    xla, plain = (probe or {}).get("xla_step_seconds"), (probe or {}).get("plain_step_seconds")
    evidence: dict = {"jit_compile": True, "gpus": 0, "step_seconds_p50": fit.step_seconds_p50}
    fix = ("On a CPU, compile without XLA: model.compile(..., jit_compile=False) (or leave it at 'auto', which "
           "turns XLA on only where a GPU is).")
    if xla and plain:
        xla_step, plain_step = statistics.median(xla), statistics.median(plain)
        ratio = xla_step / plain_step
        evidence.update(xla_step_seconds=round(xla_step, 6), plain_step_seconds=round(plain_step, 6),
                        measured_ratio=round(ratio, 2),
                        plain_trace_seconds=round(probe.get("plain_trace_seconds") or 0.0, 3) if probe else None)
        if ratio < XLA_MODERATE:
            return None
        return Finding(
            id="xla_on_cpu", severity="high" if ratio >= XLA_HIGH else "moderate",
            title=f"fit compiles with XLA on a CPU, and its steps are {ratio:.1f}x slower than without "
                  f"({_ms(xla_step)} against {_ms(plain_step)}, measured)",
            evidence=evidence, fix=fix,
            expected_gain=f"{ratio:.1f}x faster steps (the same step built without XLA, timed in the job)")
    why = (probe or {}).get("skipped") or (probe or {}).get("error")
    if why:
        evidence["not_measured"] = why
    return Finding(
        id="xla_on_cpu", severity="low",
        title="fit compiles with XLA (jit_compile=True) on a machine without a GPU, where XLA is often slower",
        evidence=evidence, fix=fix + " tensorgauge run --try-fixes times the job both ways.",
        expected_gain="often several times faster steps on a CPU (up to 6x measured on a conv net); not measured here")


@rule("xla_on_cpu", category="performance", explains_idle=True)
def _xla_on_cpu(f: RunFacts) -> Finding | None:
    probe = next(iter(f.payloads(XlaProbe)), None)
    return xla_on_cpu(f.fit_config, probe, f.fit, len(f.summary.gpu))


def _idle_facts(f: RunFacts) -> tuple[bool, float | None, str | None, list[dict]]:
    """(explained by another finding, other processes' cores, why the input split was not measured, the
    fit's idle waits at iterator teardowns)."""
    others = other_cores(f.samples.between(f.fit.start, f.fit.end)) if f.fit is not None else None
    split = f.input_split
    unmeasured = str(split.get("why")) if split is not None and not split.get("measured") else None
    return any(x.id in idle_explainers() for x in f.found), others, unmeasured, teardown_waits(f)


@rule("cores_idle", category="performance", after_idle_explainers=True, version=3)  # 3: waits read outside the tool's work
def _cores_idle(f: RunFacts) -> Finding | None:
    return cores_idle(f.fit, f.cores_allowed, *_idle_facts(f))


@rule("idle_cause_unknown", category="performance", after_idle_explainers=True, version=3)  # 3: waits read outside the tool's work
def _idle_cause_unknown(f: RunFacts) -> Finding | None:
    return idle_cause_unknown(f.fit, f.cores_allowed, *_idle_facts(f))


def predict_in_loop(phases: list[Phase], probe: PredictProbe | None, wall: float) -> Finding | None:
    """Many small ``predict`` calls: each pays predict's fixed cost (a tf.data pipeline, a
    callback list, a compiled function lookup) for a batch or two."""
    small = [p for p in model_calls(phases, ("predict",)) if (p.steps or 0) <= PREDICT_SMALL_STEPS]
    if len(small) < PREDICT_LOOP_CALLS:
        return None
    seconds = sum(p.wall_seconds for p in small)
    per_call = statistics.median(p.wall_seconds for p in small)
    evidence: dict = {"small_predict_calls": len(small), "predict_seconds": round(seconds, 3),
                      "median_call_seconds": round(per_call, 6)}
    gain = "usually several times faster for one batch (measured on the job's model when its input is an array)"
    if probe and not probe.get("error") and probe.get("direct_seconds") and probe.get("predict_seconds"):
        ratio = probe["predict_seconds"] / probe["direct_seconds"]
        evidence.update(probe_rows=probe.get("rows"), probe_predict_seconds=probe["predict_seconds"],
                        probe_direct_seconds=probe["direct_seconds"], measured_speedup=round(ratio, 2))
        if ratio < PREDICT_MIN_GAIN:
            return None
        saved = seconds * (1 - 1 / ratio)
        gain = (f"model(x, training=False) took {_ms(probe['direct_seconds'])} a call against predict's "
                f"{_ms(probe['predict_seconds'])} on this job's model ({ratio:.1f}x, measured): about "
                f"{saved:.2f} s of the {seconds:.2f} s")
        severe = seconds >= PREDICT_HIGH_SHARE * wall and ratio >= 3
    else:
        severe = False
    return Finding(
        id="predict_in_loop", severity="high" if severe else "moderate",
        title=f"model.predict was called {len(small)} times on a batch or two ({_ms(per_call)} a call, "
              f"{seconds:.2f} s in all)",
        evidence=evidence,
        fix="For one batch call the model directly: model(x, training=False) (add .numpy() for an array), "
            "inside a @tf.function for more; or collect the inputs and call predict once on all of them.",
        expected_gain=gain)


@rule("predict_in_loop", category="performance")
def _predict_in_loop(f: RunFacts) -> Finding | None:
    return predict_in_loop(f.phases, f.first_ok(PredictProbe), f.record.wall_seconds or 0.0)
