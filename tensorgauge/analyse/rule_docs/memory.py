"""Pages of the findings about memory: what held it, what grew, what ended the job."""

from __future__ import annotations

from tensorgauge.analyse import memory as m
from tensorgauge.analyse.rule_docs.base import RuleDoc, mib, pct
from tensorgauge.hook.protocol import BUDGET_EXIT_CODE
from tensorgauge.model import Finding

LEAK_RULE = (f"{m.LEAK_MIN_CALLS} or more `fit`/`predict`/`evaluate` calls (the first left out as warm-up); the "
             "median rise of RSS from one call's end to the next, in the earlier and the later half of the calls")

DOCS = (
    RuleDoc(
        id="dataset_in_memory", category="memory",
        summary="The whole data set is held in memory: arrays sliced with `from_tensor_slices`, or a shuffle "
                "buffer as large as the data.",
        meaning="`tf.data.Dataset.from_tensor_slices` copies its arrays into TensorFlow (on TensorFlow 2.21, "
                "twice the arrays' size in RSS); a shuffle buffer that holds every element keeps another copy. "
                "That memory is taken before the first step and held to the end.",
        measured="The hook counts the bytes of the arrays given to `from_tensor_slices` and measures the RSS the "
                 "call added; shuffle buffers are sized from the element spec.",
        thresholds=(f"moderate: `from_tensor_slices` took {mib(m.DATASET_IN_MEMORY_BYTES)} of arrays or more",),
        fix="Stream the data: write it once to TFRecord files and read them with `tf.data.TFRecordDataset`, or "
            "use `tf.data.Dataset.from_generator` / a `keras.utils.PyDataset`; keep the shuffle buffer well "
            "below the data set's size (e.g. 10,000 elements).",
        check="Run again and compare the RSS peak: `tensorgauge compare OLD NEW`, or the `held` line of "
              "`tensorgauge show last` (input arrays and data buffers).",
        example=Finding(
            id="dataset_in_memory", severity="moderate",
            title="The data set is held in memory: from_tensor_slices took 209.3 MiB of arrays",
            fix="Stream the data instead of slicing in-memory arrays: write it once to TFRecord files and read "
                "them with tf.data.TFRecordDataset, or use tf.data.Dataset.from_generator / a "
                "keras.utils.PyDataset; keep the shuffle buffer well below the data set's size (e.g. 10,000 "
                "elements).",
            expected_gain="about 418.6 MiB less memory")),
    RuleDoc(
        id="memory_growth", category="memory",
        summary="Memory rises steadily, epoch after epoch, during training.",
        meaning="Something keeps a reference to every batch or result: a list that collects tensors in a "
                "callback, a history kept in full, a growing cache. Left alone, a long run ends out of memory.",
        measured="The slope (least squares) of the RSS samples from the end of the first epoch (which warms "
                 "allocators up) to the end of the last, and how steady the rise is: its rank (Spearman) "
                 "correlation with time, 1 for any rise that never falls back, whatever the pace of the steps, "
                 "and under 0.9 for one jump between flat stretches. With `--diagnose`, up to where its profiler "
                 "window began: the window holds its trace, and that memory is the tool's.",
        thresholds=(
            f"moderate: RSS rises by at least {mib(m.GROWTH_MIN_BYTES_PER_EPOCH)} and "
            f"{pct(m.GROWTH_SHARE_PER_EPOCH)} of the first epoch's RSS per epoch, with a rank correlation of "
            f"{m.GROWTH_MIN_CORRELATION:g} or more, over two later epochs or more (one when the run was cut short)",
        ),
        fix="Look for lists that collect tensors, arrays or histories inside callbacks or the training loop, and "
            "keep only what you need (e.g. `float(loss)` instead of the tensor).",
        check="Run again and look at the epochs' `RSS peak` column in `tensorgauge show last`: it levels off.",
        example=Finding(
            id="memory_growth", severity="moderate",
            title="Memory grows by 112.0 MiB per epoch during training",
            fix="Something keeps a reference to every batch or result: look for lists that collect tensors, "
                "arrays or histories inside callbacks or the training loop, and keep only what you need (e.g. "
                "float(loss) instead of the tensor).",
            expected_gain="about 112.0 MiB per epoch")),
    RuleDoc(
        id="memory_leak", category="memory",
        summary="Memory grows with every `fit`, `predict` or `evaluate` call and does not level off.",
        meaning="A job that calls the model many times (a sweep, a serving loop, cross-validation) keeps "
                "something from each call. The finding names the likely cause: Keras models built without "
                "`clear_session()`, retraced functions, the job's own code between the calls, or references "
                "kept to each call's results.",
        measured="The RSS at the end of each call, read from the phases. What rose inside the calls and between "
                 "them is told apart; one large allocation between two calls moves one rise, not the median.",
        thresholds=(
            LEAK_RULE,
            f"moderate: the rise is positive early and at least {pct(m.LEAK_KEEPS_RISING)} of that late, and the "
            f"median rise times the calls is at least {mib(m.LEAK_MIN_BYTES)}",
            f"high: at least {mib(m.LEAK_HIGH_BYTES)} in all",
            "a rise that levels off is `memory_plateau` instead",
        ),
        fix="Build the model once and reuse it, or call `keras.backend.clear_session()` before building the next; "
            "give retraced functions fixed signatures; keep only what you need of each call's results "
            "(`float(loss)`, not the tensor).",
        check="Run again: `tensorgauge show last --json` gives the growth per call early and late in the "
              "finding's evidence; with the fix the finding becomes `memory_plateau` or goes. In a test suite, "
              "`@pytest.mark.tensorgauge(max_growth_per_call=\"1MiB\")` keeps it fixed.",
        example=Finding(
            id="memory_leak", severity="moderate",
            title="Memory grows by 4.1 MiB per predict call and does not level off (4.1 MiB x 199 calls after "
                  "the first = 815.9 MiB; RSS rose 820.3 MiB in all)",
            fix="The memory is taken between the calls, in the job's own code: look for lists that collect "
                "tensors, arrays or histories across calls, and keep only what you need (e.g. float(loss)).",
            expected_gain="about 4.1 MiB per call, 815.9 MiB over this run")),
    RuleDoc(
        id="memory_plateau", category="memory",
        summary="Memory rose over repeated calls, then levelled off: a warm-up, not a leak.",
        meaning="Allocators, caches and traced functions fill up once. The rise is real memory the job needs, "
                "but it does not grow without bound.",
        measured="As `memory_leak`: the median rise of RSS from one call's end to the next, early and late.",
        thresholds=(
            LEAK_RULE,
            f"info: a rise that stops (the later half's under {pct(m.LEAK_KEEPS_RISING)} of the earlier half's), "
            f"or that amounts to less than {mib(m.LEAK_MIN_BYTES)}",
        ),
        fix="Nothing to fix. Budget for the plateau.",
        check="If in doubt, run more calls: a plateau stays flat, a leak becomes `memory_leak`.",
        example=Finding(
            id="memory_plateau", severity="info",
            title="Memory rose by 388.2 MiB over 901 predict calls, then levelled off (0 B a call over the later "
                  "half): a warm-up plateau, not a leak",
            fix="Nothing to fix: allocators, caches and traced functions fill up once. Budget for the plateau.",
            expected_gain="none needed")),
    RuleDoc(
        id="models_not_cleared", category="memory",
        summary="Many Keras models were built in one process without `clear_session()`.",
        meaning="Keras keeps global state (layer names, graphs on TensorFlow) for every model built; in a sweep "
                "or a loop of experiments it grows with each model.",
        measured="The hook counts models by identity (a model a model builds for itself, and tf_keras' "
                 "throwaway instance of a functional subclass, are not counted) and `clear_session()` calls, "
                 "with the RSS at each.",
        thresholds=(
            f"low: {m.MODELS_NOT_CLEARED} or more models built since the last `clear_session()`",
            f"moderate: RSS grew by {mib(m.MODELS_HELD_MODERATE)} or more over them",
        ),
        fix="Call `keras.backend.clear_session()` before building each new model (in a sweep, a loop of "
            "experiments, cross-validation), or build the model once and reset its weights.",
        check="Run again: the finding is gone, and the run's RSS peak (`tensorgauge compare OLD NEW`) is lower.",
        example=Finding(
            id="models_not_cleared", severity="moderate",
            title="40 Keras models were built in one process without clear_session() holding 310.5 MiB more "
                  "memory",
            fix="Call keras.backend.clear_session() before building each new model (in a sweep, a loop of "
                "experiments, cross-validation), or build the model once and reset its weights.",
            expected_gain="about 310.5 MiB of memory back")),
    RuleDoc(
        id="memory_budget", category="memory",
        summary="The memory budget (`--max-memory`) stopped the job.",
        meaning="The job reached its budget. At 90% of it training was checkpointed and stopped (exit "
                f"{BUDGET_EXIT_CODE}); past 100% it was killed. The finding says what held the memory at the "
                "peak, from the other memory findings.",
        measured="The budget's own record: the peak, when and in which phase, whether the stop was graceful, "
                 "where the checkpoint is; with a post-mortem (the memory breakdown at the stop).",
        thresholds=("high: whenever the budget stopped the job",),
        fix="Resume by running the same command again: the checkpoint is restored. To fit the budget, follow "
            "the fix of what held the memory (`dataset_in_memory`, `memory_growth`), or lower the batch size "
            "(`tensorgauge run --find-batch-size --max-memory ...` finds the largest that fits).",
        check="Run the same command again with the same budget: it resumes, and `tensorgauge show last` says "
              "whether the budget held.",
        example=Finding(
            id="memory_budget", severity="high",
            title="Stopped by the memory budget of 2.0 GiB: peak 1.8 GiB during 'epoch 3', 209.3 MiB from "
                  "from_tensor_slices",
            fix="Resume by running the same command again: the checkpoint is restored. To fit the budget: Stream "
                "the data instead of slicing in-memory arrays.")),
    RuleDoc(
        id="out_of_memory", category="memory",
        summary="The job died of memory: the kernel's OOM killer, or the framework's out-of-memory error.",
        meaning="The job ended because an allocation failed (`ResourceExhaustedError`, PyTorch's "
                "`OutOfMemoryError`, JAX's `RESOURCE_EXHAUSTED`, Python's `MemoryError`) or the kernel killed "
                "it (the cgroup's OOM counter rose). The finding says where it died and what held the memory.",
        measured="The end cause from the job's exit and the cgroup; the post-mortem from the last phases and "
                 "samples: the phase path (`fit > epoch 2`), the steps done, the RSS, the memory breakdown "
                 "(weights, optimizer, input arrays, data buffers, the steps' working memory, the rest) and its "
                 "largest holder.",
        thresholds=("high: whenever the job died of memory (a budget stop is `memory_budget`)",),
        fix="The finding's fix follows from the largest holder: a smaller shuffle buffer or `cache(filename)`, "
            "streamed data, a smaller batch or mixed precision, an optimizer with fewer slots. "
            "`tensorgauge run --max-memory SIZE` stops a job gracefully, with a checkpoint, before it dies.",
        check="`tensorgauge run --find-batch-size --max-memory SIZE -- python train.py` finds the largest batch "
              "that fits; run again and check `tensorgauge show last` ends with `exit 0`.",
        example=Finding(
            id="out_of_memory", severity="high",
            title="The job ran out of memory: the kernel's OOM killer ended it in fit > epoch 2, after at least "
                  "140 steps at 1.5 GiB RSS; largest holder: tf.data buffers",
            fix="Shrink the shuffle buffer (shuffle(10_000) rather than the whole data set), or cache to a file: "
                "cache(filename).",
            expected_gain="up to 156.3 MiB less memory where it died")),
    RuleDoc(
        id="swap_pressure", category="memory",
        summary="The machine swapped memory out to disk while the job ran: RAM ran short.",
        meaning="When RAM runs short the kernel writes pages to swap and reads them back on use, many times "
                "slower than RAM. Steps then wait for the disk.",
        measured="The machine's swap in use, sampled once a second: its growth from the run's start to its "
                 "peak, when and in which phase, and the least memory available.",
        thresholds=(
            f"moderate: swap in use grew by {mib(m.SWAP_GROWTH_BYTES)} or more",
            f"high: by {mib(m.SWAP_GROWTH_HIGH_BYTES)} or more",
        ),
        fix="Make the job fit in RAM: a smaller batch or model, data streamed from files instead of held in "
            "arrays, fewer jobs on the machine at once; `tensorgauge run --max-memory` keeps the job inside a "
            "budget and stops it gracefully before it swaps.",
        check="Run again: `machine swap used` in `tensorgauge show last` stays flat.",
        example=Finding(
            id="swap_pressure", severity="high",
            title="The machine swapped 1.4 GiB out to disk while the job ran (peak at 212 s during 'epoch 4'): "
                  "RAM ran short",
            fix="Make the job fit in RAM: a smaller batch or model, data streamed from files instead of held in "
                "arrays (see dataset_in_memory), fewer jobs on the machine at once; tensorgauge run --max-memory "
                "keeps the job inside a budget and stops it gracefully before it swaps.",
            expected_gain="steps stop waiting for pages read back from disk, often many times slower than RAM")),
)
