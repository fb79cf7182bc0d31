"""Pages of the findings about speed: why the steps are slow, or why training is not stepping."""

from __future__ import annotations

from tensorgauge.analyse import diagnose as d
from tensorgauge.analyse import epoch_starts, input_rules, pauses
from tensorgauge.analyse import input_split as split
from tensorgauge.analyse.rule_docs.base import RuleDoc, pct
from tensorgauge.analyse.rules import idle_explainers
from tensorgauge.hook.protocol import (
    AB_DISTURBED_CORES,
    AB_EXTRA_ROUNDS,
    AB_MIN_ROUNDS,
    INPUT_HIGH,
    INPUT_MODERATE,
    SMALL_BATCH,
    SMALL_STEP_SECONDS,
    SPE_TRIAL,
    WINDOW_START,
)
from tensorgauge.model import Finding

DOCS = (
    RuleDoc(
        id="input_bound", category="performance",
        summary="The training step waits for its input: the data pipeline, not the model, sets the pace.",
        meaning="Keras fetches each batch inside the compiled train step, so time spent reading, decoding or "
                "augmenting data is part of the step time. When that part is large, a faster model or more "
                "cores for the model change nothing: the pipeline has to get faster.",
        measured="By an A/B inside the job, on its own model and data. After the fit's first "
                 f"{WINDOW_START} steps the fit's own train function is timed on the fit's iterator (real steps) and, "
                 "in between, on batches already made (compute-only steps, no input work): the fit's own next "
                 "batches, pulled from its iterator at once (then a wait, at most twice the pull, for the pipeline's "
                 "threads to refill its buffers) and trained on in order, one per step, so the job "
                 "trains on the same batches in the same order and no step is added (batches too large to hold "
                 "get extra steps on one batch the fit produced, every variable they touch put back after). "
                 "Rounds of both are interleaved so that drift falls on both sides. Input's "
                 "share of the step is 1 - compute-only median / real median. The A/B stays within 1% of the "
                 "fit's length (or 0.4 s for a short fit); `--diagnose` lifts that bound and adds a profiler "
                 "window that says whether the step waits for its batch or competes with the pipeline's threads "
                 "for the cores. A custom training loop is measured by timing its `next()` against `next()` on a "
                 "cached batch; a fit on Keras' JAX or PyTorch backend by timing Keras' data iterator, in rounds "
                 "of batches with a 95% interval. Rounds are sized by time as well as steps (short steps get "
                 "more of them); a fit too short for rounds has all its steps after the warm-up timed against "
                 "compute-only steps run as it ends. Input paid as epochs start (a shuffle buffer refilled "
                 "through the map before each epoch's first step) is measured from each epoch's start to the end "
                 "of its first step, against the fit's training time. Where input costs the steps (or with "
                 "`--diagnose`), as the fit ends (a custom loop's, as the job exits) each prefix of its tf.data "
                 "pipeline (up to each map, filter, interleave, batch, generator) is pulled on its own from a new "
                 "iterator for a short window (its cost the median of three runs of pulls) within "
                 "the same allowance: a stage's own cost per batch is its prefix's less the one before, plus its "
                 "own part of the prefix's first pull (a new iterator starting: its function made ready, its "
                 "buffers filled; a shuffle buffer's fill goes to the stages before the shuffle), which fit pays "
                 "each epoch, spread over the epoch's batches; with its "
                 "share of the input's cost and the cores it kept busy; the function it runs (a map's, a "
                 "`py_function`'s, a generator's) is named with its file:line. A fit fed by a Keras `PyDataset` "
                 "has its `__getitem__` named and timed the same way.",
        thresholds=(
            f"moderate: input is at least {pct(INPUT_MODERATE)} of the step, and the rounds bear it out (no single "
            f"round carries the verdict: every round at {pct(INPUT_MODERATE)} or more for a pooled "
            f"{pct(2 * INPUT_MODERATE)} and {split.AGREEMENT_Z:g} standard errors of the rounds' mean more, as "
            f"their own steps' scatter puts it; all but one of {split.OUTVOTING_ROUNDS} rounds for "
            f"{pct(3 * INPUT_MODERATE)}; {pct(split.MAJORITY)} of {split.MAJORITY_ROUNDS} or more rounds for "
            f"{pct(4 * INPUT_MODERATE)}; or the rounds' mean above {pct(INPUT_MODERATE)} by Student's t at 97.5%, "
            "their spread read no closer than their steps' scatter allows; each round the A/B ran because those "
            "before it were in doubt, and each later fit that measured again, is one more look, and the 2.5% is "
            "split over the looks)",
            f"high: input is at least {pct(INPUT_HIGH)} of the step",
            "every share carries its 95% interval (Student's t over the rounds, or over the rounds that outvoted "
            f"the rest); a share not established whose interval reaches {pct(INPUT_MODERATE)} is reported as "
            "\"within noise\" on the `input` line, never as a finding; \"no input cost\" only where the whole "
            f"interval is under {pct(INPUT_MODERATE)}",
            f"a round whose other processes kept {AB_DISTURBED_CORES:g} cores more (or fewer) busy in its real "
            "steps than in its compute-only ones (a neighbour that came or went: the machine's busy CPU less the "
            "job's, its worker processes included) is left out, and the A/B runs up to "
            f"{AB_EXTRA_ROUNDS} more in place of such rounds; where any was, a verdict needs "
            f"{AB_MIN_ROUNDS} rounds of the others",
            f"low where other processes kept {input_rules.BUSY_MACHINE_CORES:g} cores or more, "
            f"and {pct(input_rules.BUSY_MACHINE_SHARE)} of the job's CPUs or more, busy through the rounds: the "
            "pipeline and the step shared what they left, so part of the cost is the machine's; unless the "
            "cost holds were the pipeline as many times faster as they could have slowed it (the job's CPUs "
            "over those they left it: a real step that much shorter, at the lower end of the interval, still "
            f"{pct(INPUT_MODERATE)} or more above the compute-only one)",
            f"at epoch starts: a wait of {epoch_starts.EPOCH_START_FACTOR:g}x the median step and at least "
            f"{epoch_starts.EPOCH_START_MIN_SECONDS:g} s past a step, in epochs after the first, at "
            f"{pct(INPUT_MODERATE)} of the training time or more, with {input_rules.EPOCH_START_BUSY:g} or more "
            "of the job's cores busy through the waits (idle waits are `stalls`' to tell), where the steps "
            "themselves showed no cost",
            f"the fix takes the cores into account: at {pct(input_rules.SATURATED)} of the allowed cores busy, "
            "more parallelism cannot help and the advice is to do less work per element",
        ),
        fix="The finding's fix is fitted to the pipeline's stages, read from the job: what it already does "
            "(prefetch, a parallel map, a cache) is not advised again. Where the stages were timed, the costliest "
            "is named first with its own fix: a Python stage vectorised (its function named), a serial map given "
            "`num_parallel_calls` (with the cores it would need), a deterministic stage before the shuffle cached "
            "after it (with the memory it takes), a file reader interleaved, a PyTorch `DataLoader`'s slow dataset "
            "`__getitem__` or `collate_fn` given `num_workers` (the function named). In order of what usually helps most: "
            "`.cache()` after a deterministic `map` (each epoch after the first skips the map); "
            "`map(..., num_parallel_calls=tf.data.AUTOTUNE)` while cores are free; `.prefetch(tf.data.AUTOTUNE)` "
            "at the end; preprocessing once, offline, when the cores are already saturated.",
        check="`tensorgauge run --try-fixes -- python train.py` times a window of the first fit as it is and with "
              "each fix that needs no code edit (parallel map, prefetch, cache), and marks the fixes that reach "
              "the compute-only step. After changing the code, run it again: the `input` line of "
              "`tensorgauge show last` gives the new share.",
        example=Finding(
            id="input_bound", severity="high",
            title="Input costs 34% of each training step (18.1 ms of 53.0 ms; the same step on one cached batch "
                  "takes 34.9 ms)",
            fix="The costliest stage is Map (py_function) augment (train.py:42), 81% of the input's cost (15.2 ms a "
                "batch): vectorise augment (train.py:42) with TensorFlow ops (or move it into the model): it runs "
                "Python for every element, holding the GIL, so parallel calls help little. Otherwise: The pipeline "
                "already prefetches and maps in parallel. Add .cache() after the map, so every epoch after the "
                "first skips it (tensorgauge run --try-fixes times it).",
            expected_gain="up to 1.52x faster steps (53.0 ms -> 34.9 ms: the step without input, measured in this "
                          "run, 19% to 43% of the step by round)")),
    RuleDoc(
        id="xla_on_cpu", category="performance",
        summary="fit compiles with XLA (`jit_compile=True`) on a machine without a GPU.",
        meaning="XLA fuses operations into larger kernels, which pays off on GPUs. On a CPU, TensorFlow's own "
                "kernels (with oneDNN) are often faster, and XLA's compilation adds seconds at the start.",
        measured="Read from the fit's configuration (`jit_compile`) and the GPUs TensorFlow sees. Where the "
                 "cost bound allows (or with `--diagnose` / `--try-fixes`), the hook builds the same train step "
                 "without XLA and times both on one batch, restoring every variable after.",
        thresholds=(
            f"moderate: the XLA step is at least {d.XLA_MODERATE:g}x slower than the step without it",
            f"high: at least {d.XLA_HIGH:g}x slower",
            "low: not measured (the second trace did not fit the cost bound); the finding then says so",
            "TensorFlow only: on JAX, XLA is how every step runs",
        ),
        fix="`model.compile(..., jit_compile=False)`, or leave `jit_compile` at its default `\"auto\"`, which "
            "turns XLA on only where there is a GPU.",
        check="`tensorgauge run --try-fixes -- python train.py` times the `no_jit` fix; or run the job again and "
              "compare the fit's `step p50` in `tensorgauge show last` with the earlier run "
              "(`tensorgauge compare OLD NEW`).",
        example=Finding(
            id="xla_on_cpu", severity="high",
            title="fit compiles with XLA on a CPU, and its steps are 4.9x slower than without (41.0 ms against "
                  "8.4 ms, measured)",
            fix="On a CPU, compile without XLA: model.compile(..., jit_compile=False) (or leave it at 'auto', which "
                "turns XLA on only where a GPU is).",
            expected_gain="4.9x faster steps (the same step built without XLA, timed in the job)")),
    RuleDoc(
        id="eager_execution", category="performance",
        summary="Training runs eagerly: every operation is dispatched from Python, one by one.",
        meaning="A `fit` with `run_eagerly=True` (or `tf.config.run_functions_eagerly(True)`), a JAX fit with "
                "`jit_compile=False`, or a custom loop that computes gradients outside any `tf.function`, runs "
                "each op separately from Python instead of as one compiled graph. Small and medium models are "
                "then several times slower.",
        measured="The fit's configuration says whether it runs eagerly. For a custom loop the hook counts "
                 "`GradientTape.gradient` calls made outside any `tf.function`; with `--diagnose` (or by default "
                 "once the loop has run 200 s) it also times a step of the loop's own model and optimizer eagerly "
                 "and inside a `tf.function`, on one of its batches, and scales the loop's step by that ratio.",
        thresholds=(
            "high: fit runs eagerly (`run_eagerly`, `run_functions_eagerly`, or on JAX `jit_compile=False`)",
            f"high: with no fit, a custom loop calls `GradientTape.gradient` eagerly {d.EAGER_GRADIENTS} times or "
            "more",
            "never on PyTorch, whose steps are eager by design",
        ),
        fix="Remove `run_eagerly=True` (keep it for debugging); in a custom loop, decorate the train step with "
            "`@tf.function` (on JAX: `jax.jit`). Keep eager mode for debugging only.",
        check="`tensorgauge run --try-fixes -- python train.py` times a `fit` with eager execution off "
              "(`no_eager`). For a custom loop, `tensorgauge run --diagnose` gives the measured gain; after the "
              "change, the finding is gone and the `train loop` phase's `step p50` drops.",
        example=Finding(
            id="eager_execution", severity="high",
            title="fit runs eagerly (run_eagerly=True): every op is dispatched from Python, step by step",
            fix="Remove run_eagerly=True from compile() (or set model.run_eagerly = False) and call "
                "tf.config.run_functions_eagerly(False): fit then runs a compiled graph. Keep eager mode for "
                "debugging only.",
            expected_gain="not measured in this run: tensorgauge run --try-fixes times it (no_eager); graph "
                          "execution was 18.6x faster on tensorgauge's eager scenario")),
    RuleDoc(
        id="retracing", category="performance",
        summary="A `tf.function` (or `jax.jit` function) of the job's own code was traced again and again.",
        meaning="Each trace builds and optimises a new graph (0.1-1 s each) and keeps it in memory. Traces "
                "repeat when the function is called with new shapes or new Python values, or when a new "
                "`tf.function` object is created at each call (inside a loop or another function).",
        measured="The hook counts every trace of every `tf.function` and every compilation of a `jax.jit` "
                 "function, with where it is defined, the seconds spent tracing and the RSS each trace added. "
                 "tf.data's and Keras' own functions are left out: they are built afresh for each pipeline and "
                 "fit by design.",
        thresholds=(
            f"moderate: one function of the job's code traced more than {d.RETRACES_MODERATE} times",
            f"high: more than {d.RETRACES_HIGH} times",
        ),
        fix="Create the function once (at module level or in `__init__`) and call that instance; give it a fixed "
            "`input_signature` (or `reduce_retracing=True`); pass tensors, not Python numbers; keep batch shapes "
            "constant (`drop_remainder=True`). On JAX: constant shapes, `static_argnums` only for rarely changing "
            "arguments.",
        check="Run the job again: `tensorgauge show last --json` lists the traces per function under the "
              "finding's evidence; with the fix the finding is gone.",
        example=Finding(
            id="retracing", severity="moderate",
            title="tf.function 'train_step' (train.py:41) was traced 12 times",
            fix="Give the function a fixed input_signature (or reduce_retracing=True), pass tensors instead of "
                "Python numbers, and keep batch shapes constant (drop_remainder=True).",
            expected_gain="the 12 traces cost 4.81 s of tracing and 96.0 MiB of memory the traces took (measured); "
                          "a stable function traces once")),
    RuleDoc(
        id="predict_in_loop", category="performance",
        summary="`model.predict` was called many times on a batch or two.",
        meaning="Each `predict` call builds a data pipeline, a callback list and looks up its compiled "
                "function: a fixed cost that dwarfs the work for one batch. Calling the model directly skips it.",
        measured="The hook counts `predict` calls and their batches. At the threshold call it times "
                 "`model(x, training=False)` against `predict` on the same input, on the job's own model.",
        thresholds=(
            f"moderate: {d.PREDICT_LOOP_CALLS} or more `predict` calls of at most {d.PREDICT_SMALL_STEPS} batches "
            "each",
            f"high: those calls take at least {pct(d.PREDICT_HIGH_SHARE)} of the run and the direct call is "
            "3x faster or more",
            f"none when the direct call, measured, is less than {d.PREDICT_MIN_GAIN:g}x faster",
        ),
        fix="For one batch call the model directly: `model(x, training=False)` (add `.numpy()` for an array), "
            "inside a `@tf.function` for more; or collect the inputs and call `predict` once on all of them.",
        check="Run the job again: the `predict` phases disappear from `tensorgauge show last` and the time they "
              "took goes to the phase that calls the model.",
        example=Finding(
            id="predict_in_loop", severity="high",
            title="model.predict was called 900 times on a batch or two (68.7 ms a call, 61.80 s in all)",
            fix="For one batch call the model directly: model(x, training=False) (add .numpy() for an array), "
                "inside a @tf.function for more; or collect the inputs and call predict once on all of them.",
            expected_gain="model(x, training=False) took 8.6 ms a call against predict's 68.7 ms on this job's "
                          "model (8.0x, measured): about 54.06 s of the 61.80 s")),
    RuleDoc(
        id="thread_limited", category="performance",
        summary="TensorFlow (or the whole job) is held to fewer CPUs than it may use, and uses all it has.",
        meaning="A small intra-op thread pool (`TF_NUM_INTRAOP_THREADS`, "
                "`tf.config.threading.set_intra_op_parallelism_threads`) or a narrow affinity mask (`taskset`) "
                "caps the cores a step can use. When the fit keeps that many busy, the cap is what binds.",
        measured="The pool size comes from the fit's configuration and the environment, the affinity from the "
                 "job's process; the cores busy from the samples during the fit (their mean, or their median "
                 "when a pause would hide the limit).",
        thresholds=(
            f"moderate: a limit below the CPUs allowed, and the fit keeps at least {pct(d.THREAD_BOUND)} of it busy",
            "high: the CPUs allowed are twice the limit or more",
        ),
        fix="Remove the limit (or set it to the CPUs allowed) and widen the affinity mask.",
        check="`tensorgauge run --try-fixes -- python train.py` times the `threads` fix (pools sized to the CPUs "
              "allowed); after the change, the fit's `cores` column in `tensorgauge show last` rises.",
        example=Finding(
            id="thread_limited", severity="high",
            title="TensorFlow is held to 1 of 2 CPUs (intra op threads = 1) and uses all it has",
            fix="Let TensorFlow use the CPUs it may: remove tf.config.threading.set_intra_op_parallelism_threads(1) "
                "/ TF_NUM_INTRAOP_THREADS (or set them to 2) and widen the affinity mask (taskset).",
            expected_gain="up to 2.0x for compute-bound steps")),
    RuleDoc(
        id="cpu_oversubscribed", category="performance",
        summary="Far more threads want to run than there are CPUs.",
        meaning="With many runnable threads per CPU, threads are preempted in the middle of synchronised "
                "operations and wait for each other: several jobs on one machine, or thread pools sized "
                "without regard to each other (TensorFlow's, BLAS's, a data loader's).",
        measured="The machine's runnable threads (running or waiting for a CPU), sampled once a second, during "
                 "the fit (or the whole run), against the machine's CPUs.",
        thresholds=(
            f"moderate: {d.OVERSUBSCRIBED_MODERATE:g} or more runnable threads per CPU in three samples of four "
            "(their lower quartile)",
            f"high: besides, a median of {d.OVERSUBSCRIBED_HIGH:g} or more",
        ),
        fix="Give each thread a core: size TensorFlow's pools (`TF_NUM_INTRAOP_THREADS` = cores, "
            "`TF_NUM_INTEROP_THREADS` = 2), set `OMP_NUM_THREADS=1` when numpy work runs inside tf.data, and do "
            "not run several jobs on the same CPUs (`taskset`, or `tensorgauge run --max-cpus`).",
        check="Run again and look at `runnable threads on the machine` in `tensorgauge show last` (its mean and "
              "peak per CPU), or the report's chart of it.",
        example=Finding(
            id="cpu_oversubscribed", severity="moderate",
            title="7 threads compete for 2 CPUs (3.5 per CPU) during training",
            fix="Give each thread a core: size TensorFlow's pools (TF_NUM_INTRAOP_THREADS = cores, "
                "TF_NUM_INTEROP_THREADS = 2), set OMP_NUM_THREADS=1 when numpy work runs inside tf.data, and do "
                "not run several jobs on the same CPUs (give each its own with taskset or tensorgauge run "
                "--max-cpus).",
            expected_gain="not measured: less time lost to context switches and to threads preempted inside "
                          "synchronised ops")),
    RuleDoc(
        id="small_batch", category="performance",
        summary="Steps are so short that Python's dispatch of each step costs as much as its work.",
        meaning="Every step of `fit` or of a custom loop returns to Python: a few hundred microseconds of fixed "
                "cost. With tiny steps on small batches that cost dominates. Several steps per compiled call, "
                "or a larger batch, spread it.",
        measured="The fit's median step and its batch (read from the arrays, or from the pipeline's `batch` "
                 f"stage). With `--diagnose` the hook times the job's train function with "
                 f"`steps_per_execution={SPE_TRIAL}` against one step a call, on one repeated batch, restoring "
                 "everything after; by default it is not timed (a second trace costs seconds) and the finding "
                 "says so.",
        thresholds=(
            f"moderate: a median step under {d.SMALL_STEP_UNTRIED_SECONDS * 1000:g} ms on a batch of {SMALL_BATCH} or "
            f"fewer; under {SMALL_STEP_SECONDS * 1000:g} ms where the trial (`--diagnose`) measured a gain",
            f"none when the measured trial gains less than {d.SPE_MIN_GAIN:g}x",
            f"low when the measured fix would save less than {pct(d.SMALL_BATCH_MIN_SHARE)} of the fit's time",
        ),
        fix="Raise the batch size (adjusting the learning rate), or run several steps per compiled call: "
            "`model.compile(steps_per_execution=32)` for `fit`; in a custom loop a `tf.function` that loops over "
            "N batches with `tf.range` (JAX: `jax.lax.scan`; PyTorch: `torch.compile`).",
        check="`tensorgauge run --diagnose -- python train.py` measures the gain on the job's model; after the "
              "change, `tensorgauge show last` gives the new `steps/s`.",
        example=Finding(
            id="small_batch", severity="moderate",
            title="Steps are tiny (0.9 ms, batch 16): per-step overhead dominates",
            fix="Raise batch_size (adjusting the learning rate), or compile(steps_per_execution=32) so Python "
                "dispatches once per 32 steps.",
            expected_gain="2.9x faster steps, measured here: compile(steps_per_execution=32) ran a step in 0.3 ms "
                          "against 0.9 ms, on one repeated batch; about 2.40 s of the fit's 4.10 s (59%)")),
    RuleDoc(
        id="cores_idle", category="performance",
        summary="Training keeps few of its cores busy, and no other finding explains why.",
        meaning="The job may use more cores than it keeps busy, and neither input, eager execution, retracing, "
                "thread limits, oversubscription, tiny steps, XLA nor pauses account for it. Often the model is "
                "too small to spread over the cores, or the job waits on something outside the process.",
        measured="The fit's mean cores busy against the cores allowed (CPU affinity and cgroup quota). Other "
                 "processes' work on the job's CPUs counts as busy: cores another process takes are not idle. "
                 "Idle waits where an iterator is deleted (an epoch's start, a validation pass's end, fit's "
                 "return) are left out: the job waited on TensorFlow there, it did not train (`stalls` "
                 "reports them where they repeat).",
        thresholds=(
            f"moderate: the fit (of a second or more) keeps under {pct(d.IDLE)} of the allowed cores busy, with "
            "the machine's other work on them counted",
            "none when any of these explains it: " + ", ".join(f"`{i}`" for i in idle_explainers()),
            "none when the input split was not measured (the input may be the cause): `idle_cause_unknown` "
            "says so instead",
        ),
        fix="A larger batch gives each op more parallel work; `--diagnose` profiles the steps.",
        check="`tensorgauge run --diagnose -- python train.py`, then `tensorgauge show last`: the fit's `cores` "
              "column, and whether a more specific finding appears.",
        example=Finding(
            id="cores_idle", severity="moderate",
            title="Cores sit idle during training: 0.61 of 2 busy on average",
            fix="A larger batch gives each op more parallel work; tensorgauge run --diagnose profiles the steps.")),
    RuleDoc(
        id="idle_cause_unknown", category="performance",
        summary="Training keeps few of its cores busy, and the input split that could explain it was not measured.",
        meaning="The cores sat idle as they do for `cores_idle`, but the input A/B did not run or failed, so the "
                "input pipeline may be the cause. No cause is claimed: the finding says why the input was not "
                "measured and how to measure it.",
        measured="The fit's mean cores busy against the cores allowed, as for `cores_idle`, in a run whose input "
                 "split says `not measured` (the reason is in the evidence, `input_not_measured`).",
        thresholds=(
            f"low: the fit (of a second or more) keeps under {pct(d.IDLE)} of the allowed cores busy, the input "
            "split was not measured, and none of these explains it: "
            + ", ".join(f"`{i}`" for i in idle_explainers()),
        ),
        fix="Measure the input: `tensorgauge run --diagnose` runs the input A/B whatever it costs.",
        check="`tensorgauge run --diagnose -- python train.py`, then `tensorgauge show last`: the `input` line "
              "gives the measured share, and `input_bound` or `cores_idle` takes this finding's place.",
        example=Finding(
            id="idle_cause_unknown", severity="low",
            title="Cores sat idle during training (0.71 of 2 busy on average) and the cause is unknown: the input "
                  "split was not measured",
            fix="Measure it: tensorgauge run --diagnose runs the input A/B whatever it costs (why it did not run "
                "here: diagnosis was off (--no-diagnose)).")),
    RuleDoc(
        id="stalls", category="performance",
        summary="Training paused: steps, epoch starts or the end of fit took far longer than a step.",
        meaning="The fit stopped stepping for seconds at a time: at epoch starts (the input pipeline starting "
                "over), in validation passes, mid-epoch (callbacks, garbage collection, swapping, another "
                "process), or after the last step before `fit` returned. On TensorFlow, deleting an autotuned "
                "tf.data iterator waits for its autotuning thread to wake: the job's cores sit idle meanwhile.",
        measured="From the fit's step times (the slowest steps of every phase are kept exactly), each epoch's "
                 "start to the end of its first step, and the time after the last step (or validation) until "
                 "fit returned. The fit's first steps and the first validation's (tracing, building) are "
                 "start-up; a step that traced its function and the tool's own work (the A/B's excursions, the "
                 "profiler window, the stage timing) are left out. The cores the job kept busy during each "
                 "pause, outside the tool's own work, say whether it computed or waited.",
        thresholds=(
            f"a pause: at least {pauses.STALL_FACTOR:g}x the fit's median step and at least "
            f"{pauses.STALL_MIN_SECONDS:g} s (a validation step against the validation's median)",
            f"the fit's first {pauses.WARMUP_STEPS} steps are start-up, not pauses",
            f"low: at least {pauses.STALL_MIN_LOST_SECONDS:g} s lost in all",
            f"moderate: at least {pct(pauses.STALL_MODERATE_SHARE)} of the fit lost; high: at least "
            f"{pct(pauses.STALL_HIGH_SHARE)}; both counted without the longest pause (one outlier does not "
            "grade them), and a single pause is low: TensorFlow's iterator teardown pauses at random, and a "
            "warning that comes and goes from run to run of the same program says nothing about it",
            f"pauses at under {pauses.TEARDOWN_IDLE_CORES:g} cores busy where an iterator is deleted (an epoch's start, a "
            f"validation pass's end, fit's return) count only when {pauses.TEARDOWN_MIN_REPEATS} or more come in "
            "one fit: TensorFlow 2.21's teardown makes one or two of them at random",
            f"pauses at under {pauses.IDLE_CORES:g} cores busy, in a fit on an autotuned tf.data pipeline that "
            "runs no Python of the job's, get the fix of turning autotuning off",
        ),
        fix="It depends on where the pauses are, and the finding says which: autotuning off for a pipeline "
            "whose cores sat idle (`options = tf.data.Options(); options.autotune.enabled = False; "
            "dataset = dataset.with_options(options)`); a pipeline made once by hand for a fit on arrays; "
            "prefetch, a smaller shuffle buffer and a cache for pauses at epoch starts; your callbacks' schedule "
            "for pauses mid-epoch or after the last step (where the longest comes then and epoch starts are not "
            "most of the pauses). Autotuning off is advice to try and time: it removed "
            "the pauses of one keras-io program and slowed another's fit.",
        check="Run again: the finding lists each pause (time, length, epoch, cores busy) in "
              "`tensorgauge show last --json`; the report's timeline shows what the machine did then. Compare "
              "the fit's wall time with `tensorgauge compare OLD NEW`.",
        example=Finding(
            id="stalls", severity="moderate",
            title="Training stalled 5 times (13.3 s lost, 13% of fit); the longest, 6.0 s, after its last step, "
                  "before fit returned at 118.4 s",
            fix="The job's cores sat idle through the pauses (at most 0.06 cores busy): it waited, it did not "
                "compute. fit reads a tf.data pipeline with autotuning on, and deleting an epoch's iterator waits "
                "until the iterator's autotuning thread wakes. Turn autotuning off for the pipeline, and the "
                "validation data's: options = tf.data.Options(); options.autotune.enabled = False; dataset = "
                "dataset.with_options(options). It can also cost: time your fit with and without it.",
            expected_gain="not measured on this job: try it and time the fit (its pauses lost 13.3 s, 13%)")),
    RuleDoc(
        id="startup_dominated", category="performance",
        summary="Importing the frameworks and building the first step took most of the run.",
        meaning="For a short job, start-up (importing TensorFlow, tracing and building the first step) is "
                "expected to dominate. It is advice, not a fault: longer runs per process amortise it.",
        measured="The wall time of the top-level import phases plus the fit's first step, against the run's.",
        thresholds=(
            f"low: start-up is at least {pct(pauses.STARTUP_SHARE)} of a run of {pauses.STARTUP_MIN_SECONDS:g} s "
            "or more",
        ),
        fix="Train longer per process, or keep one process and run many jobs in it (a notebook, a server) "
            "instead of a new process each time.",
        check="`tensorgauge show last`: the `import` phases' and the fit's share of the wall time.",
        example=Finding(
            id="startup_dominated", severity="low",
            title="Start-up took 62% of the run (4.8 s importing tensorflow, 1.3 s building the first step)",
            fix="For short jobs this is expected. Train longer per process, or keep one process and run many jobs "
                "in it (a notebook, a server) instead of a new process each time.")),
)
