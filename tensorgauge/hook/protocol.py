"""The contract between the hook (inside the job) and the monitor: event kinds,
environment variable names and the payload of each event.

Standard library only: the job imports it. The monitor, the store's bundle
checks and the analysis read the same declarations, so a kind, a variable or
a payload field is named in one place. Every event also carries ``t`` (the
writer's ``time.monotonic()``), ``pid``, ``kind``, and the writer's own ``cpu``
seconds and ``rss`` bytes at that instant (see :class:`Common`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any, TypedDict, TypeVar, cast


def one_line(text: str, limit: int = 300) -> str:
    """An error message as one line of at most ``limit`` characters: its first line, or where that only
    heads a trace (TensorFlow's "Graph execution error:"), the cause at the trace's end."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[0] if lines else ""
    if len(lines) > 1 and line.endswith(":"):
        line = next((x for x in reversed(lines) if not x.startswith("[[")), line)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def error_text(exc: BaseException) -> str:
    """An exception as an event's ``error`` field: its class and :func:`one_line` of its message."""
    line = one_line(str(exc), 300 - len(type(exc).__name__) - 2)
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


# -- environment variables: set by the monitor, read in the job ------------------

EVENTS_ENV = "TENSORGAUGE_EVENTS"  # the channel file
RUN_ID_ENV = "TENSORGAUGE_RUN_ID"
NO_HOOK_ENV = "TENSORGAUGE_NO_HOOK"  # set by the user: no hook in this job
NO_CGROUP_ENV = "TENSORGAUGE_NO_CGROUP"  # set by the user: sample through /proc, no cgroup of our own
DIAGNOSE_ENV = "TENSORGAUGE_DIAGNOSE"  # "auto": the input window within its cost bound; "always": unbounded
STOP_FILE_ENV = "TENSORGAUGE_STOP_FILE"  # created by the monitor: stop training gracefully
CHECKPOINT_ENV = "TENSORGAUGE_CHECKPOINT_DIR"  # where a budget stop leaves its checkpoint
GPU_MEMORY_ENV = "TENSORGAUGE_GPU_MEMORY_LIMIT"  # bytes per GPU
FIX_ENV = "TENSORGAUGE_FIX"  # --try-fixes: the fixes to apply, comma-separated
WINDOW_ENV = "TENSORGAUGE_WINDOW_STEPS"  # --try-fixes: timed steps in the window
WARMUP_ENV = "TENSORGAUGE_WINDOW_WARMUP"  # --try-fixes: steps before the window
FIX_STAGE_ENV = "TENSORGAUGE_FIX_STAGE"  # --try-fixes: the Dataset.map call (its number, from 1) a stage fix applies to
SEED_ENV = "TENSORGAUGE_SEED"  # fix --verify: the random seed every rerun starts from (its losses compared)
SOURCE_OVERRIDES_ENV = "TENSORGAUGE_SOURCE_OVERRIDES"  # fix --verify: modules read from patched copies (JSON)
STEP_LIMIT_ENV = "TENSORGAUGE_STEP_LIMIT"  # fix --verify --steps N: each fit stops after N training steps
WARMUP_STEPS = 3  # --try-fixes: the fewest steps before the window (the train function traced and built)
BUDGET_EXIT_CODE = 75  # EX_TEMPFAIL: the job stopped by its budget; run it again to resume
# Input's share of a step: >= 20% high, 5-20% moderate (the TF Profiler's grading); the A/B in the job
# stops its rounds early once they are clear of these, the analysis grades its verdict by them.
INPUT_HIGH, INPUT_MODERATE = 0.20, 0.05
AB_MIN_ROUNDS = 3  # rounds of real and compute-only steps an input verdict needs
# A round of a backend fit's or a custom loop's next() waits: at least this many batches and seconds, in one epoch.
ROUND_BATCHES, ROUND_SECONDS = 8, 0.25
# A round whose other processes kept this many cores more (or fewer) busy in its real steps than in its
# compute-only ones says nothing of the job's input (a neighbour came or went): the A/B runs another, the
# analysis leaves it out. A healthy fit beside another test's jobs read 23% from four such rounds.
AB_DISTURBED_CORES = 0.3
AB_EXTRA_ROUNDS = 3  # rounds the A/B runs in place of disturbed ones, at most
# A neighbour that kept d more cores busy in a round's real steps than in its compute-only ones, on a machine
# of C CPUs, can slow the real steps by at most (C + d) / C where the step is CPU-bound, and this factor again
# for the caches, memory bandwidth and SMT siblings it shares: a disturbed round whose real steps are slower
# than that still shows an input cost (the input-bound demo beside another test process: rounds of 92-99%).
AB_DISTURBANCE_FACTOR = 2.0


# Student's t at 97.5% one-sided (95% two-sided) over as many looks at the rounds (Bonferroni: 2.5% / looks
# each), by looks and degrees of freedom (a round count less one): scipy.stats.t.ppf(1 - 0.025 / looks, df).
T_BY_LOOKS = {
    1: {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26},
    2: {1: 25.45, 2: 6.21, 3: 4.18, 4: 3.50, 5: 3.16, 6: 2.97, 7: 2.84, 8: 2.75, 9: 2.69},
    3: {1: 38.19, 2: 7.65, 3: 4.86, 4: 3.96, 5: 3.53, 6: 3.29, 7: 3.13, 8: 3.02, 9: 2.93},
    4: {1: 50.92, 2: 8.86, 3: 5.39, 4: 4.31, 5: 3.81, 6: 3.52, 7: 3.34, 8: 3.21, 9: 3.11},
    5: {1: 63.66, 2: 9.92, 3: 5.84, 4: 4.60, 5: 4.03, 6: 3.71, 7: 3.50, 8: 3.36, 9: 3.25},
    6: {1: 76.39, 2: 10.89, 3: 6.23, 4: 4.85, 5: 4.22, 6: 3.86, 7: 3.64, 8: 3.48, 9: 3.36},
}


def t_critical(df: int, looks: int = 1) -> float:
    """Student's t that a mean over ``df + 1`` rounds must clear (97.5% one-sided), where the rounds were tested
    ``looks`` times as they came in (the A/B runs more while they are in doubt: see ``doubt_rounds``), each look
    at 2.5% / looks. Past the table, Cornish-Fisher's expansion of the normal quantile (within 0.01)."""
    looks = min(max(1, looks), max(T_BY_LOOKS))  # more looks than that: as many (the A/B takes at most 5 more)
    table = T_BY_LOOKS[looks]
    if df in table:
        return table[df]
    z = statistics.NormalDist().inv_cdf(1 - 0.025 / looks)
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df * df)


def round_share(real: list[float], compute: list[float]) -> float:
    """Input's share of an A/B round's steps: 1 - the compute-only steps' mean / the real steps' mean. Means,
    not medians: input comes in bursts (a prefetch buffer drained, then a slow step as it refills; an
    epoch's start in the round), and the mean is what the fit pays. A median read keras-io's
    structured-data program (input 83-87% of training by a bare A/B) as -42% to +32%, its means 72-90%."""
    return 1 - statistics.mean(compute) / statistics.mean(real)


def round_share_error(real: list[float], compute: list[float]) -> float:
    """The standard error of a round's :func:`round_share` from the scatter of its own steps (0 with fewer
    than two on a side): what a round of the same job's steps reads apart from another by chance alone."""
    if len(real) < 2 or len(compute) < 2:
        return 0.0
    step, limit = statistics.mean(real), statistics.mean(compute)
    if step <= 0 or limit <= 0:
        return 0.0
    relative = (statistics.stdev(real) / step) ** 2 / len(real) + (statistics.stdev(compute) / limit) ** 2 / len(compute)
    return limit / step * relative ** 0.5


def rounds_spread(shares: list[float], errors: list[float] | None = None) -> float:
    """The standard deviation of the rounds' ``shares``, never below the root mean square of their own
    steps' ``errors`` (:func:`round_share_error`): three rounds can agree closer than their steps allow by
    chance, and Student's t then clears what the next run does not (the healthy demo, bare A/B 0-3.5%, on a
    quiet machine: rounds of 8, 12 and 10% whose steps put each within 2-6 points, t = 4.6 by their own
    spread of 1.8 points; over 43 runs its rounds' spread within a run had a median of 6.5 points)."""
    spread = statistics.stdev(shares) if len(shares) > 1 else 0.0
    return max(spread, steps_error(errors or []))


def steps_error(errors: list[float]) -> float:
    """The root mean square of rounds' :func:`round_share_error`: a round's error, as their steps put it."""
    return statistics.mean(e * e for e in errors) ** 0.5 if errors else 0.0


def share_interval(shares: list[float], errors: list[float] | None = None, looks: int = 1) -> tuple[float, float]:
    """The 95% interval (Student's t, two-sided, over ``looks``: :func:`t_critical`) of the mean of the rounds'
    ``shares``, their spread as :func:`rounds_spread` reads it from them and their steps' ``errors``; one share
    is its own interval."""
    if not shares:
        return 0.0, 0.0
    mean = statistics.mean(shares)
    if len(shares) < 2:
        return mean, mean
    half = t_critical(len(shares) - 1, looks) * rounds_spread(shares, errors) / len(shares) ** 0.5
    return mean - half, mean + half


def rounds_in_doubt(shares: list[float], errors: list[float] | None = None, looks: int = 1) -> bool:
    """Undisturbed rounds (:data:`AB_MIN_ROUNDS` or more) that lean to an input cost, their mean share at
    :data:`INPUT_MODERATE` or more, that their 95% interval (:func:`share_interval`, over ``looks``) does not
    establish: the A/B's planned rounds left may (rounds leaning the other way could only turn "within noise"
    into "no cost", neither a finding)."""
    if len(shares) < AB_MIN_ROUNDS:
        return False
    low, _ = share_interval(shares, errors, looks)
    return low < INPUT_MODERATE <= statistics.mean(shares)


def disturbed_round(other_cores: list[float | None] | None) -> bool:
    """A round of the input A/B whose two sides saw other load :data:`AB_DISTURBED_CORES` apart (see there), or
    whose one side saw that much and the other could not be read (too short a span: the neighbour may have
    been on one side only; the healthy demo beside another test's jobs: a round of 40% read 0.94 cores beside
    its real steps and nothing beside its compute-only ones)."""
    if not other_cores or len(other_cores) < 2:
        return False
    real, compute = other_cores[0], other_cores[1]
    if real is None or compute is None:
        known = real if compute is None else compute
        return known is not None and known >= AB_DISTURBED_CORES
    return abs(real - compute) >= AB_DISTURBED_CORES


def beyond_disturbance(real: list[float], compute: list[float], other_cores: list[float | None] | None,
                       cpus: int | None) -> bool:
    """A disturbed round (:func:`disturbed_round`) whose input cost its disturbance cannot explain: its
    neighbours were busier in its compute-only steps than in its real ones (the share can only be
    understated), or its real steps are slower than :data:`AB_DISTURBANCE_FACTOR` x (C + d) / C of its
    compute-only ones (``cpus``: C; one where unknown, the bound then widest). A side whose load could not
    be read is taken at its worst: the real steps' as busy as the machine, the compute-only steps' idle."""
    if not real or not compute or not other_cores or len(other_cores) < 2:
        return False
    machine = max(1, cpus or 1)
    busy_real, busy_compute = other_cores[0], other_cores[1]
    if busy_real is not None and busy_compute is not None and busy_compute >= busy_real:
        return True
    more = (machine if busy_real is None else busy_real) - (busy_compute or 0.0)
    bound = AB_DISTURBANCE_FACTOR * (machine + max(0.0, more)) / machine
    return statistics.mean(real) > bound * statistics.mean(compute)
# Steps this short on batches this small: dispatch dominates. Keras' per-step dispatch measured ~2.2 ms on a
# 2-core VM (TensorFlow's classification tutorial under tf_keras, 2.5-3.3 ms steps: fit 23.0 and 17.8 s,
# 10.5 and 12.9 s with steps_per_execution=32), so a 5 ms step is still half dispatch; under 3 ms the finding
# came and went with the machine's speed (3 of 5 runs of that tutorial, 4 of 5 of keras-io structured data).
SMALL_STEP_SECONDS, SMALL_BATCH = 0.005, 64
SPE_TRIAL = 32  # the steps_per_execution a small_batch trial times
JOB_ENV = "TENSORGAUGE_JOB"  # the distributed job a worker belongs to
FIND_BATCH_ENV = "TENSORGAUGE_FIND_BATCH"  # --find-batch-size: the memory budget in bytes

WINDOW_START = 10  # training steps before the input window (tracing, warm-up): it needs a fit longer than that
TRAIN_LOOP = "train loop"  # the name of a custom training loop's phase (kind "fit")
BATCH_TRIAL_PHASE = "batch size trial"  # --find-batch-size: each trial's phase (kind "custom"), then its batch


def diagnosis_mode(value: str | None) -> str:
    """The input A/B's setting from :data:`DIAGNOSE_ENV`: "always" (--diagnose), "auto" (within its cost
    bound), or "" (off: --no-diagnose sets "off"; unset, as in ``tensorgauge.monitor()``)."""
    return "always" if value in ("1", "always") else "auto" if value == "auto" else ""


class Kind:
    """Event kinds (the ``kind`` field)."""

    PHASE_BEGIN = "phase_begin"
    PHASE_END = "phase_end"
    STEPS = "steps"
    EXIT = "exit"
    ENV = "env"
    FIT_CONFIG = "fit_config"
    TRACE = "trace"
    EAGER_GRADIENTS = "eager_gradients"
    INPUT_AB = "input_ab"  # a fit's real steps against compute-only steps on one cached batch, in rounds
    INPUT_STAGES = "input_stages"  # each prefix of a fit's tf.data pipeline pulled on its own (hook.stage_costs)
    INPUT_PROBE = "input_probe"
    COMPUTE_PROBE = "compute_probe"
    TRY_WINDOW = "try_window"
    PLACEMENT = "placement"
    DATASET = "dataset"
    BUDGET_STOP = "budget_stop"
    BUDGET_RESUME = "budget_resume"
    BUDGET_CHECKPOINT_FAILED = "budget_checkpoint_failed"
    BUDGET_GPU_MEMORY = "budget_gpu_memory"
    BENCH_RESULT = "bench_result"
    PREDICT_PROBE = "predict_probe"
    MODELS_BUILT = "models_built"
    XLA_PROBE = "xla_probe"  # fit's XLA-compiled step against the same step without XLA, on a CPU
    SPE_PROBE = "spe_probe"  # fit's one-step train function against the same with steps_per_execution=N
    EAGER_PROBE = "eager_probe"  # a custom loop's model, forward and backward, eager against in a tf.function
    LOOP_INPUT = "loop_input"  # a custom training loop's steps and the time its next() calls waited
    FIT_INPUT = "fit_input"  # a fit on JAX or PyTorch: the time Keras' data iterator took for its batches
    MEMORY_FACTS = "memory_facts"  # what a fit's model, optimizer and arrays hold, counted (hook.memory_facts)
    BATCH_TRIAL = "batch_trial"  # --find-batch-size: one short trial of the first fit at one batch size
    BATCH_SEARCH = "batch_search"  # ... and the search's result
    JOB_ERROR = "job_error"  # the exception that ended the job (its type, module, first line)
    CODE_SITES = "code_sites"  # where the job's own code made a pipeline or called compile/predict (hook.call_sites)
    STEP_DIGEST = "step_digest"  # written by the monitor: a phase's steps, compactly (tensorgauge.steps)
    # written by the monitor: a phase still open at the run's end whose end may be among events lost unread
    PHASE_END_UNRECORDED = "phase_end_unrecorded"


MONITOR_KINDS = frozenset({Kind.STEP_DIGEST, Kind.PHASE_END_UNRECORDED})  # never the job's to write


# -- payloads: the fields each kind carries besides the common ones ---------------


class Common(TypedDict, total=False):
    cpu: float | None  # the writer's CPU seconds (user+system, waited-for children included)
    rss: int | None  # the writer's RSS bytes


class PhaseBegin(Common, total=False):
    id: int
    name: str
    phase_kind: str  # one of model.PHASE_KINDS
    parent: int | None


class PhaseEnd(Common, total=False):
    id: int
    error: str | None  # the exception's type when the phase ended by one


class PhaseEndUnrecorded(Common, total=False):
    id: int | None  # the phase's, as its phase_begin gave it


class Steps(Common, total=False):
    phase: int
    seconds: list[float]  # each step's duration
    ends: list[float]  # each step's end (monotonic in the job; seconds from the run's start once stored)


class StepDigest(Common, total=False):
    phase: int | None
    count: int
    seconds_sum: float
    seconds_min: float | None
    seconds_max: float
    first_seconds: list[float]
    first_ends: list[float | None]
    slowest_seconds: list[float]
    slowest_ends: list[float | None]
    rate_start: int  # the run's second the first count of ``rate`` is for
    rate: list[int]  # steps ended in each second from rate_start
    last_end: float | None  # when the last step ended (seconds from the run's start)
    sketch: str  # base64 of the DDSketch protobuf


class Exit(Common, total=False):
    pass


class Env(Common, total=False):
    facts: dict[str, Any]  # model.JOB_FIELDS


class FitConfig(Common, total=False):
    backend: str  # Keras' backend: tensorflow (also tf_keras), jax, torch
    run_eagerly: bool
    intra_op_threads: int | None
    inter_op_threads: int | None
    functions_run_eagerly: bool | None
    jit_compile: str
    steps_per_execution: int | None
    batch_size: int | None
    epochs: int | None
    dataset: bool
    dataset_batches: int | None
    dataset_bytes: int | None
    dataset_random_ops: list[str] | None
    dataset_python_ops: list[str] | None
    dataset_stages: list[str] | None  # the pipeline's stage classes, outermost first (_PrefetchDataset, ...)
    dataset_autotune: bool | None  # tf.data's autotuning is on for the pipeline (its default)
    loop: bool  # sent by a custom training loop's first step (not a fit): its dataset, threads
    eager: bool  # that loop's steps run eagerly


class Trace(Common, total=False):
    function: str
    origin: str  # "user" or "library"
    where: str | None  # file.py:line of the traced Python function
    instance_trace: int  # 1 for a tf.function's first trace, 2 and up for its retraces
    seconds: float
    rss_delta_bytes: int | None
    framework: str  # "jax" for a jax.jit function (its call, compiling included); absent: a tf.function


class EagerGradients(Common, total=False):
    count: int
    seconds: float


class InputAB(Common, total=False):
    real_step_seconds: list[list[float]]  # per round: the train function on the fit's iterator
    compute_step_seconds: list[list[float]]  # per round: the same on batches already made
    cost_seconds: float  # what the A/B added: holding the batches pulled ahead, or extra steps undone after
    allowance_seconds: float | None  # what the diagnosis may cost in this fit (None: unbounded, --diagnose)
    source: str  # what the compute-only steps ran on ("the fit's own next batches, pulled ahead", "a batch the fit
    # produced", repeated, a peeked batch, the arrays' rows)
    shapes: list[list[int]] | None  # the cached batch's tensors' shapes (what the compute-only steps ran on)
    settle_steps: int  # the most untimed real steps after an excursion
    after_fit: bool  # a fit too short for rounds: its steps in blocks, the compute-only steps run as it ended
    setup_seconds: float  # the first excursion's making of the cached batch (in cost_seconds, paid once)
    excursions_before: list[list[float]]  # seconds before this event each excursion began and ended: the tool's pauses
    other_cores: list[list[float | None]]  # per round: cores other processes kept busy in its real, compute-only steps
    untimed_steps: list[float] | None  # [seconds, steps] of the fit's steps between the timed ones (pauses left out)
    machine_cpus: int | None  # the CPUs the machine has (what a neighbour's load is weighed against)
    doubt_rounds: int  # rounds begun because those before them were in doubt: each one more look at the t-test
    skipped: str  # why there is no A/B (a fit too short, the cost bound)
    error: str


class HotLine(TypedDict):
    location: str  # file.py:line in the stage's function
    code: str  # that line's source text
    share: float  # of the samples taken inside the function


class StageTiming(TypedDict, total=False):
    stage: str  # the stage plainly ("Map", "ParallelMap", "Batch", "from_generator", "Map (py_function)")
    cls: str  # its tf.data class (_MapDataset)
    function: str | None  # the user's Python function it runs (a map's, the py_function's, the generator)
    location: str | None  # ... as file.py:line
    python: bool  # it runs Python (a py_function, numpy_function, a generator)
    random: bool  # its function draws random numbers
    parallel: bool  # it runs its function in parallel (num_parallel_calls)
    reader: bool  # it reads files (TFRecord, TextLine, ...)
    before_shuffle: bool  # a shuffle comes after it
    elements_per_batch: int  # its elements in one batch of the fit (the batch size below the batch stage, else 1)
    element_bytes: int | None  # one of its elements, from its spec
    cardinality: int | None  # its elements (-1: infinite, -2: unknown)
    prefix_seconds_per_batch: float  # the pipeline up to and including it, pulled on its own: seconds per batch
    cores: float  # the process's CPU seconds over that pull's wall seconds
    first_pull_seconds: float  # the prefix's first pull (untimed: its iterator starting, buffers filling)
    pulls: int  # batches timed
    map_call: int  # under --try-fixes: which of the process's Dataset.map calls made it (from 1)
    workers: int  # a PyTorch DataLoader's stage (its dataset's, its collate's): the loader's num_workers
    hot_lines: list[HotLine]  # the costliest Python stage's hottest lines, sampled by py-spy (hook.hot_lines)
    hot_samples: int  # py-spy's samples inside the function
    sampling_cpu_seconds: float  # py-spy's own CPU seconds (its whole life)
    sampling_seconds: float  # the sampled window's wall seconds, py-spy's start and stop included
    hot_lines_why: str  # why its lines were not named (py-spy missing, no ptrace permission, the allowance)


class InputStages(Common, total=False):
    stages: list[StageTiming]  # source first; a stage without prefix_seconds_per_batch was not timed
    batch_size: int | None  # the fit's batch (None: the pipeline has no batch stage)
    untimed: str  # why the later stages were not timed (the allowance, a cache, a shuffle buffer to fill)
    cost_seconds: float  # all the pulls
    allowance_seconds: float | None  # what they may cost (None: unbounded, --diagnose)
    skipped: str  # why no stage was timed (the fit's input costs nothing worth it)
    measured_by: str  # how a DataLoader's stages were timed (the loop's own batches, or made again at its end)
    error: str


class InputProbe(Common, total=False):
    step_seconds: list[float]
    get_next_seconds: list[float]
    function_seconds: list[float]
    copies: int
    copy_seconds: float
    collective_seconds: float
    input_work_seconds: float
    input_thread_seconds: float  # tf.data's own threads busy (maps, prefetching), summed over threads
    start_seconds: float
    stop_seconds: float
    allowance_seconds: float | None  # what the diagnosis may cost in this fit (None: unbounded, --diagnose)
    skipped: str  # why no window was profiled (its cost, a distribution strategy, a fit too short)
    error: str


class ComputeProbe(Common, total=False):
    step_seconds: list[float]
    total_seconds: float
    shapes: list[list[int]]  # of the probe's batch, each tensor's (-1: unknown)
    source: str  # where those shapes come from: "a real batch", or zeros shaped by the spec or arrays
    skipped: str  # why no compute-only steps were timed (the cost bound)
    error: str


class EagerProbe(Common, total=False):
    eager_step_seconds: list[float]  # the model's forward and gradients on one of the loop's batches, eagerly
    graph_step_seconds: list[float]  # the same in a tf.function
    trace_seconds: float  # that function's first call (its trace)
    total_seconds: float
    skipped: str
    error: str


class XlaProbe(Common, total=False):
    xla_step_seconds: list[float]  # fit's train function (jit_compile=True) on one repeated batch
    plain_step_seconds: list[float]  # the same, built with jit_compile=False
    plain_trace_seconds: float  # the first call of that function (its trace)
    total_seconds: float
    skipped: str
    error: str


class SpeProbe(Common, total=False):
    steps_per_execution: int  # N, of the trial
    single_step_seconds: list[float]  # fit's train function (one step a call) on one repeated batch
    multi_call_seconds: list[float]  # the same built with steps_per_execution=N: N steps a call
    trace_seconds: float  # that function's first call (its trace)
    total_seconds: float
    skipped: str
    error: str


class TryWindow(Common, total=False):
    fixes: list[str]
    step_seconds: list[float]
    next_seconds: list[float]  # a custom loop's: each step's wait in next() (its compute-only limit is the rest)


class Placement(Common, total=False):
    after: str  # "fit" or "load"
    devices: dict[str, dict[str, int]]  # {"GPU:0": {"bytes": n, "variables": n}}


class Dataset(Common, total=False):
    op: str  # "from_tensor_slices", "shuffle", "prefetch" (a set size) or "cache" (in memory)
    bytes: int  # from_tensor_slices: the arrays' bytes
    copied_bytes: int | None  # ... and the RSS the call added (TensorFlow's copies of them)
    elements: int  # the input's cardinality (-1: infinite, -2: unknown)
    buffer_size: int
    element_bytes: int | None  # one element, from its spec (None: a shape not known)
    shared_bytes: int  # shuffle: of an element, the bytes that are slices of a from_tensor_slices tensor
    holds_bytes: int | None  # what the buffer holds when full


class MemoryFacts(Common, total=False):
    when: str  # "steps": before a fit's third batch (its rss: the state before the steps); "end": as it ended
    weights_bytes: int  # the model's distinct variables, shape x dtype size
    weights_by_dtype: dict[str, int]
    weights_by_device: dict[str, int]
    optimizer_bytes: int  # the optimizer's variables (slots, step counter, learning rate)
    optimizer_by_device: dict[str, int]
    input_arrays_bytes: int | None  # arrays handed to fit as x and y (None: a dataset or generator)
    gpu_allocators: list[dict]  # [{"device", "bytes_in_use", "peak_bytes"}]: the framework allocator's figures


class BatchTrial(Common, total=False):
    batch_size: int
    peak_bytes: int  # the process's RSS peak during the trial (read every 2 ms)
    steps: int
    step_seconds: float | None  # median, the first step (it traces) left out
    examples_per_second: float | None
    seconds: float  # the trial's wall time
    error: str | None  # the exception's type when the trial failed


class BatchSearch(Common, total=False):
    budget_bytes: int
    target_bytes: int  # the share of the budget no trial may pass
    original_batch_size: int
    recommended_batch_size: int | None
    largest_within_budget: int | None  # what memory alone allows
    throughput_peak_batch_size: int | None  # the smallest trial batch as fast as the fastest (within 5%)
    recommendation_reason: str | None  # why the recommendation is below what memory allows
    fixed_bytes: int | None  # the line fitted to peak against batch size: fixed + per example x batch
    per_example_bytes: int | None
    trials: int
    seconds: float  # all trials together
    how: str  # how the trials reached the batch size
    reason: str  # why there was no search
    caveat: str


class JobError(Common, total=False):
    type: str  # the exception's class name
    module: str  # ... and its module
    message: str  # its first line, at most 300 characters


class BudgetStop(Common, total=False):
    checkpoint: str | None
    epoch: int  # 0-based
    step: int  # the steps of that epoch the checkpoint's weights hold


class BudgetResume(Common, total=False):
    checkpoint: str
    epoch: int  # 0-based
    step: int  # the steps of that epoch already trained before the stop
    steps: int | None  # steps per epoch, when known: the resumed epoch trains steps - step
    text: str  # "epoch 3, from step 42 of 100"


class BudgetCheckpointFailed(Common, total=False):
    error: str


class BudgetGpuMemory(Common, total=False):
    limit_bytes: int
    gpus: int
    error: str | None


class PredictProbe(Common, total=False):
    calls: int  # predict calls so far
    rows: int  # rows of the probed input
    predict_seconds: float  # median wall time of the last predict calls
    direct_seconds: float  # median wall time of model(x, training=False) on the same input
    error: str


class ModelsBuilt(Common, total=False):
    count: int  # Keras models built so far
    since_clear: int  # since the last clear_session()
    clears: int  # clear_session() calls so far


class LoopInput(Common, total=False):
    steps: int  # optimizer updates so far (each a step of the train loop)
    epochs: int  # times the loop began iterating a dataset again
    eager: bool  # the updates ran eagerly (not inside a tf.function)
    step_seconds_p50: float  # over the steps kept (the first excluded: it traces)
    next_seconds_p50: float  # per step, the time next() on the loop's iterator took
    step_seconds_total: float
    next_seconds_total: float
    eval_steps: int  # model calls without gradients between training steps
    # [a real next(), next() on one of the loop's batches cached, 0 timed before the real one / 1 after, the
    # thread's CPU seconds in the cached next()] every few steps
    next_pairs: list[list[float]]
    pairs_cost_seconds: float  # what the cached next() calls cost (left out of the steps)
    next_rounds: list[list[float]]  # [seconds in next(), step seconds, steps] of consecutive steps (see FitInput)
    loader: str | None  # the iterator's kind where it is not tf.data's: "DataLoader" (PyTorch)


class FitInput(Common, total=False):
    backend: str  # Keras' backend: jax, torch
    batches: int  # next() calls on the fit's data iterator (steps x steps_per_execution)
    seconds: float  # all of them
    first_seconds: float  # the first (it starts the iterator)
    epoch_start_seconds: float  # each epoch's first next() together (an epoch's iterator starting)
    rounds: list[list[float]]  # [seconds in next(), seconds spanned, batches] of consecutive batches in an epoch


class CodeSites(Common, total=False):
    call: str  # "fit"/"loop" (a pipeline read), "compile", "predict", "gradient" (eager), "model", "dataloader",
    # "set_intra_op_parallelism_threads", "set_inter_op_parallelism_threads",
    # "fit_losses"
    site: str | None  # "/abs/path.py:line" of the user's call
    stack: list[str]  # "model": the user's frames, innermost first
    stages: list[dict]  # fit/loop: its tf.data pipeline, source first (hook.stage_names.describe + "site",
    # "method" (the call that made it), "calls", "callers", "deterministic", "elements", "element_bytes"; a
    # stage a library made: "made_in", the job's call of that library function, and "made_by", its name)
    given: list[str]  # compile: the speed arguments it was given (run_eagerly, jit_compile, steps_per_execution)
    input: str  # fit without a dataset: the type of its x
    losses: list[float]  # fit_losses: the fit's per-epoch training loss (History)
    model: int  # compile, fit: the model's id() in the job (which compile configured the fit's model)
    num_workers: int  # dataloader: the workers it was given (0: the main process loads)
    files: dict[str, str | None]  # the SHA-256 of each file named, as the job read it


class BenchResult(Common, total=False):
    name: str
    group: str
    value: float
    unit: str
    higher_is_better: bool
    seconds: float


PAYLOADS: dict[str, type] = {
    Kind.PHASE_BEGIN: PhaseBegin, Kind.PHASE_END: PhaseEnd, Kind.STEPS: Steps, Kind.EXIT: Exit, Kind.ENV: Env,
    Kind.FIT_CONFIG: FitConfig, Kind.TRACE: Trace, Kind.EAGER_GRADIENTS: EagerGradients,
    Kind.INPUT_AB: InputAB, Kind.INPUT_STAGES: InputStages, Kind.INPUT_PROBE: InputProbe, Kind.COMPUTE_PROBE: ComputeProbe, Kind.TRY_WINDOW: TryWindow,
    Kind.PLACEMENT: Placement, Kind.DATASET: Dataset, Kind.BUDGET_STOP: BudgetStop,
    Kind.BUDGET_RESUME: BudgetResume, Kind.BUDGET_CHECKPOINT_FAILED: BudgetCheckpointFailed,
    Kind.BUDGET_GPU_MEMORY: BudgetGpuMemory, Kind.BENCH_RESULT: BenchResult, Kind.STEP_DIGEST: StepDigest,
    Kind.PHASE_END_UNRECORDED: PhaseEndUnrecorded,
    Kind.PREDICT_PROBE: PredictProbe, Kind.MODELS_BUILT: ModelsBuilt, Kind.LOOP_INPUT: LoopInput,
    Kind.XLA_PROBE: XlaProbe, Kind.SPE_PROBE: SpeProbe,
    Kind.EAGER_PROBE: EagerProbe, Kind.FIT_INPUT: FitInput, Kind.MEMORY_FACTS: MemoryFacts, Kind.JOB_ERROR: JobError,
    Kind.BATCH_TRIAL: BatchTrial, Kind.BATCH_SEARCH: BatchSearch, Kind.CODE_SITES: CodeSites,
}

KIND_OF: dict[type, str] = {payload: kind for kind, payload in PAYLOADS.items()}
P = TypeVar("P", bound=Mapping[str, Any])


def kind_of(payload: type) -> str:
    """The event kind whose payload is the TypedDict ``payload``."""
    return KIND_OF[payload]


def as_payload(data: Mapping[str, Any], payload: type[P]) -> P:
    """An event's data read as the TypedDict its kind declares (for the type checker: no copy)."""
    return cast(P, data)
