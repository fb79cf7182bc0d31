"""The diagnosis rules on hand-built runs."""

from dataclasses import replace

import numpy as np
import pytest

from tensorgauge.analyse.diagnose import (
    cores_idle,
    eager_execution,
    idle_cause_unknown,
    retracing,
    small_batch,
    thread_limited,
)
from tensorgauge.analyse.findings import find
from tensorgauge.analyse.pauses import diagnosis_pauses, fit_pauses, stalls, startup_dominated
from tensorgauge.analyse.summary import summarise
from tensorgauge.model import Event, Phase, RunRecord
from tensorgauge.steps import StepDigest


def digest(seconds: list[float], start: float, phase: int | None = None) -> StepDigest:
    """The steps ``seconds``, back to back from ``start``."""
    ends = list(np.cumsum(seconds) + start)
    d = StepDigest(phase)
    d.add(seconds, ends)
    return d


def fit(cores=1.0, wall=10.0, p50=0.02, step_max=0.5):
    return Phase(name="fit", kind="fit", start=5.0, end=5.0 + wall, cores_busy_mean=cores,
                 step_seconds_p50=p50, step_seconds_max=step_max, steps=100)


def test_eager_and_retracing():
    assert eager_execution({"run_eagerly": True}, fit(), []).severity == "high"
    assert "run_functions_eagerly" in eager_execution({"functions_run_eagerly": True}, fit(), []).title
    assert eager_execution({"run_eagerly": False, "functions_run_eagerly": False}, fit(), []) is None


def test_custom_loop_computing_gradients_eagerly():
    def counts(*ns):
        return [Event(t=1.0 + n / 100, pid=1, kind="eager_gradients", data={"count": n, "seconds": n / 100})
                for n in ns]

    loop = eager_execution(None, None, counts(8, 16, 32))
    assert loop.severity == "high" and "@tf.function" in loop.fix
    assert loop.evidence == {"eager_gradient_calls": 32, "seconds": 0.32, "steps_per_second": 100.0}
    assert eager_execution(None, None, counts(8)) is None  # a few eager gradients: a test, not a loop
    assert eager_execution({"run_eagerly": False}, fit(), counts(8, 16)) is None  # fit's own, not a custom loop


def trace(name: str, n: int = 1, origin: str = "user", where: str | None = "train.py:12", **data) -> Event:
    return Event(t=float(n), pid=1, kind="trace", data={"function": name, "origin": origin, "where": where,
                                                         "instance_trace": n, **data})


def test_retracing_of_the_users_function():
    traces = [trace("step", n, seconds=0.25, rss_delta_bytes=2 << 20) for n in range(1, 9)]
    finding = retracing(traces + [trace("train_function", 1)] * 2)
    assert finding.severity == "moderate" and finding.title == "tf.function 'step' (train.py:12) was traced 8 times"
    assert finding.evidence == {"traces": {"step (train.py:12)": 8}, "instances": 1, "tracing_seconds": 2.0,
                                "memory_bytes": 16 << 20, "memory_bytes_per_trace": 2 << 20}
    assert "input_signature" in finding.fix and "2.00 s of tracing and 16.0 MiB" in finding.expected_gain
    assert retracing(traces[:5]) is None
    assert retracing([trace("step", n) for n in range(1, 26)]).severity == "high"


def test_a_tf_function_created_in_a_loop_is_retracing_too():
    finding = retracing([trace("step", 1) for _ in range(7)])
    assert "created anew" in finding.title and "7 instances" in finding.title and "once, outside" in finding.fix


def test_tf_data_and_keras_plumbing_is_never_retracing():
    """Keras builds a new tf.data pipeline per fit, and a train function per model: traced anew,
    never retraced by the user (seen as 'Dataset_map_permutation traced 12 times')."""
    plumbing = [trace(name, 1, origin="library", where="trainer.py:100")
                for name in ("Dataset_map_permutation", "one_step_on_data", "Dataset_map_lambda")
                for _ in range(20)]
    assert retracing(plumbing) is None
    # Recorded before trace events had an origin: judged by name.
    legacy = [Event(t=1.0, pid=1, kind="trace", data={"function": name})
              for name in ("Dataset_flat_map_slice_batch_indices", "one_step_on_data") for _ in range(12)]
    assert retracing(legacy) is None
    assert retracing(legacy + [Event(t=2.0, pid=1, kind="trace", data={"function": "step"})] * 6).evidence[
        "traces"] == {"step": 6}


def test_thread_limited_needs_the_limit_to_bind():
    assert thread_limited({"intra_op_threads": 1}, {}, fit(cores=0.98), allowed=2.0).severity == "high"
    by_env = thread_limited({"intra_op_threads": 0}, {"thread_env": {"TF_NUM_INTRAOP_THREADS": "2"}, "affinity_cpus": 4},
                            fit(cores=1.9), allowed=4.0)
    assert by_env.evidence["intra_op_threads"] == 2 and by_env.severity == "high"
    assert thread_limited({"intra_op_threads": 1}, {}, fit(cores=0.4), allowed=2.0) is None  # not what binds
    assert thread_limited({"intra_op_threads": 2}, {}, fit(cores=1.9), allowed=2.0) is None  # no limit below
    assert thread_limited({"intra_op_threads": 1}, {}, None, allowed=2.0) is None
    # A fit held to one thread that paused a fifth of the time (mean 0.79): the median still binds.
    from tensorgauge.model import Sample
    from tensorgauge.series import SampleSeries

    busy = [1.0] * 80 + [0.0] * 21
    series = SampleSeries.from_samples([Sample(t=5.0 + 0.1 * i, cpu_seconds=0.0, cores_busy=b, rss_bytes=1, threads=1,
                                               processes=1) for i, b in enumerate(busy)])
    paused = fit(cores=0.79)
    assert thread_limited({"intra_op_threads": 1}, {}, paused, allowed=2.0) is None
    found = thread_limited({"intra_op_threads": 1}, {}, paused, allowed=2.0, samples=series)
    assert found.severity == "high" and found.evidence["fit_cores_busy_median"] == 1.0


def test_small_batch_startup_and_idle():
    assert small_batch({"batch_size": 8}, fit(p50=0.001)).severity == "moderate"
    assert small_batch({"batch_size": 512}, fit(p50=0.001)) is None
    assert small_batch({"batch_size": 8}, fit(p50=0.01)) is None
    # 3-4 ms steps are still about half dispatch (a tf_keras tutorial: 2.2x and 1.4x with steps_per_execution=32).
    assert small_batch({"batch_size": 32}, fit(p50=0.0038)) is not None
    # 4-5 ms: only where the trial measured the gain (a step's speed of the moment would decide otherwise).
    assert small_batch({"batch_size": 32}, fit(p50=0.0048)) is None
    spe = {"steps_per_execution": 32, "single_step_seconds": [0.0048] * 8, "multi_call_seconds": [0.0768] * 4}
    assert small_batch({"batch_size": 32}, fit(p50=0.0048), spe) is not None  # 2x measured
    assert "steps_per_execution=32" in small_batch({"batch_size": 8}, fit(p50=0.001)).fix
    assert "not measured" in small_batch({"batch_size": 8}, fit(p50=0.001)).expected_gain
    # Measured with --diagnose: 32 steps a call ran a step in 0.4 ms against 1.0 ms.
    trial = {"steps_per_execution": 32, "single_step_seconds": [0.001] * 8, "multi_call_seconds": [0.0128] * 4}
    measured = small_batch({"batch_size": 8}, fit(p50=0.001), trial)
    assert measured.expected_gain.startswith("2.5x faster steps, measured here")
    assert measured.evidence["trial_step_seconds"] == pytest.approx(0.0004)
    # 100 steps of 1 ms in a 10 s fit: the fix saves 0.06 s of it, a small part: low. In a 0.15 s fit: moderate.
    assert measured.severity == "low" and measured.evidence["fit_seconds_saved"] == pytest.approx(0.06)
    assert "(1%)" in measured.expected_gain
    assert small_batch({"batch_size": 8}, fit(p50=0.001, wall=0.15), trial).severity == "moderate"
    # A trial that gained nothing shows dispatch does not dominate: no finding.
    flat = {**trial, "multi_call_seconds": [0.030] * 4}
    assert small_batch({"batch_size": 8}, fit(p50=0.001), flat) is None
    assert small_batch({"batch_size": 8}, fit(p50=0.001), {"skipped": "..."}).expected_gain.startswith("not measured")
    loop = Phase(name="train loop", kind="fit", start=0.0, end=10.0, step_seconds_p50=0.0007, steps=3000)
    loop_fix = small_batch({"batch_size": 32, "loop": True}, loop).fix
    assert "compile(" not in loop_fix and "tf.range" in loop_fix  # a custom loop has no compile()
    assert "jax.lax.scan" in small_batch({"batch_size": 32, "loop": True, "backend": "jax"}, loop).fix
    torch_fix = small_batch({"batch_size": 32, "loop": True, "backend": "torch"}, loop).fix
    assert "torch.compile" in torch_fix and "tf." not in torch_fix  # a PyTorch loop: PyTorch's own compiler
    imp = Phase(name="import tensorflow", kind="import", start=0.2, end=4.2)
    first_slow = digest([0.8] + [0.01] * 20, start=5.0)
    assert startup_dominated([imp, fit(wall=1.0)], wall=9.0, digests=[first_slow]).severity == "low"
    torch_import = Phase(name="import keras", kind="import", start=0.2, end=4.2)  # Keras on PyTorch: no TensorFlow
    assert "importing keras," in startup_dominated([torch_import, fit(wall=1.0)], wall=9.0, digests=[first_slow]).title
    assert startup_dominated([imp, fit(wall=20.0)], wall=25.0, digests=[first_slow]) is None
    # A slow step later on is not start-up: only the fit's first step counts.
    late_slow = digest([0.01] * 20 + [0.8], start=5.0)
    assert startup_dominated([imp, fit(wall=1.0)], wall=9.0, digests=[late_slow]) is None
    assert cores_idle(fit(cores=0.5), allowed=2.0, explained=False).severity == "moderate"
    assert cores_idle(fit(cores=0.5), allowed=2.0, explained=True) is None
    assert cores_idle(fit(cores=1.5), allowed=2.0, explained=False) is None
    # Cores another process kept busy were not idle (a healthy fit on a loaded CI machine: 0.94 of 2).
    assert cores_idle(fit(cores=0.94), allowed=2.0, explained=False, others=0.8) is None
    assert cores_idle(fit(cores=0.94), allowed=2.0, explained=False, others=0.02).evidence["other_cores_mean"] == 0.02


def test_idle_cores_with_the_input_unmeasured_claim_no_cause():
    """The input split could not be measured: the input may be why the cores sat idle, so no cores_idle
    (whose advice would be a guess); idle_cause_unknown says so and how to measure it."""
    why = "the A/B failed: InvalidArgumentError: found OOV values"
    assert cores_idle(fit(cores=0.71), allowed=2.0, explained=False, input_unmeasured=why) is None
    unknown = idle_cause_unknown(fit(cores=0.71), 2.0, False, None, why)
    assert unknown.severity == "low" and "cause is unknown" in unknown.title and "0.71 of 2" in unknown.title
    assert "--diagnose" in unknown.fix and why in unknown.fix and unknown.evidence["input_not_measured"] == why
    assert idle_cause_unknown(fit(cores=0.71), 2.0, False, None, None) is None  # measured: cores_idle's to say
    assert idle_cause_unknown(fit(cores=0.71), 2.0, True, None, why) is None  # another finding explains them
    assert idle_cause_unknown(fit(cores=1.5), 2.0, False, None, why) is None  # not idle


def test_diagnose_orders_by_severity_and_reads_the_run():
    record = RunRecord(run_id="r", command=["x"], started_at="2026", wall_seconds=30.0,
                       env={"host": {"cores_allowed": 2.0}, "job": {"affinity_cpus": 2}})
    events = [Event(t=4.0, pid=1, kind="fit_config", data={"run_eagerly": True, "batch_size": 16,
                                                            "intra_op_threads": 0}),
              Event(t=9.0, pid=1, kind="input_ab",
                    data={"real_step_seconds": [[0.1] * 10] * 5, "compute_step_seconds": [[0.09] * 5] * 5})]
    findings = find(record, [], events, [fit(cores=0.5, wall=20.0)], summarise(record, []), category="performance")
    assert [f.id for f in findings] == ["eager_execution", "input_bound"]


def test_cpu_oversubscribed_from_runnable_threads():
    from tensorgauge.analyse.diagnose import cpu_oversubscribed
    from tensorgauge.model import Sample
    from tensorgauge.series import SampleSeries

    def samples(runnable):
        return SampleSeries.from_samples([Sample(t=6.0 + i, cpu_seconds=0, cores_busy=2, rss_bytes=1, threads=40,
                                                 processes=1, runnable=r) for i, r in enumerate(runnable)])

    finding = cpu_oversubscribed(samples([9, 10, 10, None, 11]), fit(), cpus=2.0, threads_peak=40)
    assert finding.severity == "high" and finding.evidence["runnable_threads_median"] == 10
    assert cpu_oversubscribed(samples([7, 7, 8]), fit(), cpus=2.0, threads_peak=9).severity == "moderate"
    assert cpu_oversubscribed(samples([4, 5, 5]), fit(), cpus=2.0, threads_peak=9) is None
    # A median past the threshold that a quarter of the samples are far under: bursts, not a sustained
    # contention (keras-io's weather forecaster, whose pools sized to the cores trained slower).
    bursts = [2, 2, 2, 3, 6, 6, 7, 7, 7, 7, 8, 9]
    assert cpu_oversubscribed(samples(bursts), fit(), cpus=2.0, threads_peak=32) is None
    sustained = cpu_oversubscribed(samples([6, 6, 7, 7, 7, 7, 8, 9]), fit(), cpus=2.0, threads_peak=32)
    assert sustained.severity == "moderate" and sustained.evidence["runnable_threads_p25"] == 6.75
    assert cpu_oversubscribed(samples([10, 10]), fit(), cpus=2.0, threads_peak=9) is None  # too few samples
    outside = [Sample(t=100.0 + i, cpu_seconds=0, cores_busy=2, rss_bytes=1, threads=1, processes=1, runnable=20)
               for i in range(5)]
    assert cpu_oversubscribed(SampleSeries.from_samples(outside), fit(), cpus=2.0, threads_peak=1) is None  # not in fit


def test_oversubscribed_job_for_real(store_path):
    """Five busy processes per CPU for 6 s (three samples of four past the threshold), sampled by the real
    monitor."""
    import os
    import sys

    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.cli import main
    from tensorgauge.store import Store

    cpus = os.cpu_count() or 1
    code = ("import multiprocessing as mp, time\n"
            "def spin():\n    t = time.time()\n    while time.time() - t < 6: pass\n"
            f"ps = [mp.Process(target=spin) for _ in range({5 * cpus})]\n"
            "[p.start() for p in ps]; [p.join() for p in ps]\n")
    assert main(["run", "-q", "--", sys.executable, "-c", code]) == 0
    report = RunReport.load(Store.open(store_path), "last")
    found = {f.id: f for f in report.findings}
    assert "cpu_oversubscribed" in found
    assert found["cpu_oversubscribed"].evidence["runnable_per_cpu"] >= 3.0


def test_stalls_at_epoch_starts_and_mid_epoch():
    fit_phase = Phase(name="fit", kind="fit", start=0.0, end=40.0, step_seconds_p50=0.01, steps=3000)
    epochs = [Phase(name=f"epoch {i + 1}", kind="epoch", start=10.0 * i, end=10.0 * (i + 1), parent=0)
              for i in range(4)]
    # Epoch 1 starts with a 2 s first step (tracing: start-up, not a stall); epochs 3 and 4 wait 1.5 s
    # for their first step; epoch 2 has a 1.2 s pause mid-epoch.
    digests = [digest([2.0, 0.5] + [0.01] * 100, start=0.0, phase=1),
               digest([0.01] * 100 + [1.2] + [0.01] * 100, start=10.0, phase=2),
               digest([0.01] * 100, start=21.5, phase=3), digest([0.01] * 850, start=31.5, phase=4)]
    finding = stalls(fit_phase, epochs, digests)
    assert finding.evidence["count"] == 3 and finding.evidence["at_epoch_start"] == 2
    assert [(x["epoch"], x["seconds"], x["at_epoch_start"]) for x in finding.evidence["stalls"]] == [
        ("epoch 3", 1.51, True), ("epoch 4", 1.51, True), ("epoch 2", 1.2, False)]
    assert finding.evidence["stalls"][0]["t"] == 20.0 and finding.evidence["lost_seconds"] == 4.19
    assert finding.severity == "moderate" and "epochs start" in finding.fix  # 4.2 s of a 40 s fit: 10%
    assert "fit was given arrays" in stalls(fit_phase, epochs, digests, arrays=True).fix
    assert "longest, 1.5 s, at an epoch's start in epoch 3 at 20.0 s" in finding.title
    # A wait before the first step and a slow first step are one pause; a later digest of the same
    # epoch (a long epoch is digested a minute at a time) does not restart the epoch.
    both = [digests[0], digest([1.0] + [0.01] * 50, start=20.5, phase=3),
            digest([0.01] * 50, start=26.0, phase=3)]
    one = stalls(replace(fit_phase, end=26.5), epochs, both)  # (fit returns at its last step)
    assert [(x["epoch"], x["seconds"]) for x in one.evidence["stalls"]] == [("epoch 3", 1.5)]
    # Mid-epoch pauses only: the other advice.
    mid = stalls(replace(fit_phase, end=13.2), epochs, digests[:2])
    assert mid.evidence["count"] == 1 and "callbacks" in mid.fix and mid.severity == "low"  # one pause: no pattern
    # One outlier does not grade the stalls: a 9 s pause among three of 1.2 s in a 21.6 s fit is not high
    # (12.6 s lost, 58%), as the 3.6 s of the others (17%) say.
    outlier = stalls(replace(fit_phase, end=21.6), epochs, [digest([0.8] + [0.01] * 100, start=0.0),
                                         digest([0.01] * 100 + [1.2] + [0.01] * 100 + [1.2] + [0.01] * 100 + [1.2]
                                                + [0.01] * 100 + [9.0] + [0.01] * 300, start=2.0)])
    assert outlier.evidence["count"] == 4 and outlier.severity == "moderate", outlier.evidence
    # A steady fit (its first steps slow only): nothing.
    assert stalls(replace(fit_phase, end=11.0), epochs, [digests[0], digest([0.01] * 100, start=10.0)]) is None


def _weather_like_fit():
    """Keras' weather forecaster as it ran bare: 3 epochs of 40 ms steps, each followed by a 3 s validation
    pass of 30 ms steps; epochs 2 and 3 wait 4.5 and 4.0 s for their first step and the first validation
    pass ends with a 1.8 s wait, each at 0.02-0.04 cores (tf.data deleting an iterator); 1.6 cores busy the
    rest of the time."""
    epochs = [Phase(name="epoch 1", kind="epoch", start=0.0, end=14.8, parent=0),
              Phase(name="epoch 2", kind="epoch", start=14.8, end=32.3, parent=0),
              Phase(name="epoch 3", kind="epoch", start=32.3, end=49.3, parent=0)]
    validations = [Phase(name="validation", kind="evaluate", start=10.0, end=14.8, parent=1, step_seconds_p50=0.03),
                   Phase(name="validation", kind="evaluate", start=29.3, end=32.3, parent=2, step_seconds_p50=0.03),
                   Phase(name="validation", kind="evaluate", start=46.3, end=49.3, parent=3, step_seconds_p50=0.03)]
    fit_phase = Phase(name="fit", kind="fit", start=0.0, end=49.3, step_seconds_p50=0.04, steps=750)
    # The first validation's first step traces the test function (1.5 s): start-up, not a stall.
    digests = [digest([1.0] + [0.04] * 225, start=0.0), digest([1.5] + [0.03] * 50 + [1.8], start=10.0),
               digest([4.54] + [0.04] * 249, start=14.8), digest([0.03] * 100, start=29.3),
               digest([4.04] + [0.04] * 249, start=32.3), digest([0.03] * 100, start=46.3)]
    pauses = [(13.0, 14.8), (14.8, 19.3), (32.3, 36.3)]

    def cpu_at(t):
        busy = 1.6 * t - sum(1.58 * max(0.0, min(t, b) - a) for a, b in pauses)
        return busy

    return fit_phase, epochs, validations, digests, cpu_at


def test_a_longer_pause_after_the_last_step_among_epoch_start_stalls_leaves_the_fix_to_the_epoch_starts():
    """Epochs 2-4 wait 1.5 s for their first step; fit returns 2.5 s after its last (tf.data's teardown, at
    random): one outlier, the longest, does not turn the advice from the pattern that repeats."""
    fit_phase = Phase(name="fit", kind="fit", start=0.0, end=40.5, step_seconds_p50=0.01, steps=3000)
    epochs = [Phase(name=f"epoch {i + 1}", kind="epoch", start=10.0 * i, end=10.0 * (i + 1) + (0.5 if i == 3 else 0),
                    parent=0) for i in range(4)]
    digests = [digest([2.0] + [0.01] * 800, start=0.0, phase=1), digest([1.5] + [0.01] * 850, start=10.0, phase=2),
               digest([1.5] + [0.01] * 850, start=20.0, phase=3), digest([1.5] + [0.01] * 650, start=30.0, phase=4)]
    finding = stalls(fit_phase, epochs, digests)
    assert finding.evidence["at_epoch_start"] == 3 and finding.evidence["stalls"][0].get("after_last_step")
    assert "epochs start" in finding.fix and "on_train_end" not in finding.fix
    assert "after its last step, before fit returned" in finding.title  # the title still names the longest


def test_idle_pauses_of_a_tf_data_pipeline_with_autotuning_get_the_autotune_fix():
    fit_phase, epochs, validations, digests, cpu = _weather_like_fit()
    pipeline = {"dataset": True, "dataset_autotune": True, "dataset_python_ops": []}
    found = stalls(fit_phase, epochs, digests, nested=[*epochs, *validations], cpu_at=cpu, pipeline=pipeline)
    assert [(x["epoch"], x["seconds"], x["at_epoch_start"], x.get("in_validation")) for x in found.evidence["stalls"]] \
        == [("epoch 2", 4.54, True, None), ("epoch 3", 4.04, True, None), ("epoch 1", 1.8, False, True)]
    assert [x["cores_busy"] for x in found.evidence["stalls"]] == [0.03, 0.04, 0.02]  # (the first step computes)
    assert "autotune.enabled = False" in found.fix and "at most 0.04 cores busy" in found.fix
    # Its gain depends on the program (an LSTM's fit got slower): "try it", not a promised gain.
    assert "9% and 26% slower" in found.fix and found.expected_gain.startswith("not measured on this job: try it")
    # Python of the job's own in the pipeline (a generator) may be what it waited on: not this advice.
    other = stalls(fit_phase, epochs, digests, nested=[*epochs, *validations], cpu_at=cpu,
                   pipeline={**pipeline, "dataset_python_ops": ["EagerPyFunc"]})
    assert "autotune" not in other.fix and "epochs start" in other.fix
    for told in ({**pipeline, "dataset_autotune": False}, {**pipeline, "dataset_python_ops": None}, {}):
        assert "autotune" not in stalls(fit_phase, epochs, digests, nested=[*epochs, *validations], cpu_at=cpu,
                                         pipeline=told).fix
    # fit given arrays: Keras' own pipeline, autotuned on TensorFlow (on JAX, Keras iterates the arrays itself).
    keras_own = {"dataset": False, "backend": "tensorflow"}
    arrays = stalls(fit_phase, epochs, digests, nested=[*epochs, *validations], cpu_at=cpu, pipeline=keras_own,
                    arrays=True)
    assert "autotune.enabled = False" in arrays.fix and "from_tensor_slices((x, y))" in arrays.fix
    on_jax = stalls(fit_phase, epochs, digests, nested=[*epochs, *validations], cpu_at=cpu,
                    pipeline={**keras_own, "backend": "jax"}, arrays=True)
    assert "autotune" not in on_jax.fix and "fit was given arrays" in on_jax.fix
    # Without the job's CPU, or with its cores busy through the pauses, nothing says it only waited.
    assert "autotune" not in stalls(fit_phase, epochs, digests, nested=[*epochs, *validations], pipeline=pipeline).fix
    busy = stalls(fit_phase, epochs, digests, nested=[*epochs, *validations], cpu_at=lambda t: 1.6 * t,
                  pipeline=pipeline)
    assert busy.evidence["stalls"][0]["cores_busy"] == 1.6 and "autotune" not in busy.fix


def test_idle_pauses_where_iterators_are_deleted_count_only_when_they_repeat():
    """TensorFlow's iterator teardown pauses at random: one or two idle pauses as epochs start or fit returns
    came and went from run to run of the same program. Three are the program's; busy ones always count."""
    fit_phase, epochs, validations, digests, cpu = _weather_like_fit()
    pipeline = {"dataset": True, "dataset_autotune": True, "dataset_python_ops": []}
    steady = digest([0.04] * 249, start=32.3)
    two = [d for d in digests if d.first[0][0] < 32.3 or d.first[0][0] > 46.3] + [steady]
    assert stalls(fit_phase, epochs, two, nested=[*epochs, *validations], cpu_at=cpu, pipeline=pipeline) is None
    # The same two pauses with the job's cores busy through them: it computed (a buffer refilled), not chance.
    busy = stalls(fit_phase, epochs, two, nested=[*epochs, *validations], cpu_at=lambda t: 1.6 * t, pipeline=pipeline)
    assert busy is not None and busy.evidence["count"] == 2
    # Without the job's CPU nothing tells a teardown's wait from work: the pauses count as before.
    assert stalls(fit_phase, epochs, two, nested=[*epochs, *validations], pipeline=pipeline).evidence["count"] == 2
    three = stalls(fit_phase, epochs, digests, nested=[*epochs, *validations], cpu_at=cpu, pipeline=pipeline)
    assert three.evidence["count"] == 3
    # A lone pause as fit returns with the pipeline's threads finishing a batch (0.3 cores): a teardown's too.
    fit_phase = Phase(name="fit", kind="fit", start=0.0, end=7.0, step_seconds_p50=0.01, steps=500)
    alone = [Phase(name="epoch 1", kind="epoch", start=0.0, end=7.0, parent=0)]
    last = digest([0.01] * 500, start=0.0)  # the last step ends at 5.0 s; fit returns at 7 s
    assert stalls(fit_phase, alone, [last], cpu_at=lambda t: min(t, 5.0) * 1.6 + max(0.0, t - 5.0) * 0.3) is None
    assert stalls(fit_phase, alone, [last], cpu_at=lambda t: 1.6 * t) is not None  # computing: a stall


def test_a_pause_as_fit_returns_is_read_outside_the_tools_own_work_after_the_last_step():
    """Seen in CI beside a hog: the profiler's stop and the stage timing (2.2 s, a core busy) ran after the last
    step, then the fit's iterator teardown waited 3.2 s with no core busy. The pause is that wait: it begins as
    the tool's work ends, and its cores are read over it alone (0.72 read over the first 3.2 s from the last
    step, the tool's work among them, made it count as a stall)."""
    fit_phase = Phase(name="fit", kind="fit", start=0.0, end=10.0, step_seconds_p50=0.1, steps=46)
    alone = [Phase(name="epoch 1", kind="epoch", start=0.0, end=4.6, parent=0)]
    last = digest([0.1] * 46, start=0.0)  # the last step ends at 4.6 s; fit returns at 10.0 s
    own = [(4.55, 4.95), (4.9, 6.8)]  # the profiler's stop, then the stage timing (they overlap)

    def cpu(t):  # a core busy through the steps and the tool's work, none in the teardown's wait
        return min(t, 6.8) + max(0.0, t - 9.9)

    (pause,) = fit_pauses(fit_phase, alone, [last], own, cpu_at=cpu).values()
    assert pause["t"] == 6.8 and pause["seconds"] == pytest.approx(3.2) and pause["cores_busy"] <= 0.05
    assert stalls(fit_phase, alone, [last], own, cpu_at=cpu) is None  # a lone idle teardown: chance
    busy = stalls(fit_phase, alone, [last], own, cpu_at=lambda t: t)  # the job computed through it: a stall
    assert busy is not None and busy.evidence["stalls"][0]["cores_busy"] == pytest.approx(1.0, abs=0.01)


def test_a_slow_validation_step_is_held_against_the_validations_own_median():
    fit_phase, epochs, validations, digests, _ = _weather_like_fit()
    # Validation steps of 0.3 s against training steps of 40 ms: 0.9 s is 3x the validation's, no stall.
    slow = [replace(v, step_seconds_p50=0.3) for v in validations]
    steady = [digests[0], digest([1.5] + [0.3] * 8 + [0.9], start=10.0), digests[2], digests[3]]
    found = stalls(fit_phase, epochs, steady, nested=[*epochs, *slow])
    assert [x["epoch"] for x in found.evidence["stalls"]] == ["epoch 2"]


def test_the_diagnose_windows_own_pauses_are_not_stalls():
    fit_phase = Phase(name="fit", kind="fit", start=0.0, end=10.0, step_seconds_p50=0.01, steps=1000)
    epochs = [Phase(name="epoch 1", kind="epoch", start=0.0, end=20.0, parent=0)]
    # Step 21 holds the profiler's stop and trace parsing (1.6 s): its input_probe is sent at 5.0 s.
    steps = [0.01] * 20 + [1.61] + [0.01] * 500
    own = diagnosis_pauses([{"stop_seconds": 1.6, "start_seconds": 0.2, "step_seconds": [0.01] * 10}], [5.0])
    assert np.allclose(own, [(3.4, 5.0), (3.1, 3.3)])
    d = digest(steps, start=5.0 - sum(steps[:21]))  # step 21 ends as the probe is sent
    assert stalls(fit_phase, epochs, [d]) is not None  # without knowing its own pauses: a false stall
    assert stalls(fit_phase, epochs, [d], own) is None
    # The A/B's compute-only excursions are the tool's own pauses too.
    assert stalls(fit_phase, epochs, [d], diagnosis_pauses([], [], [[3.39, 5.0]])) is None


def test_a_step_that_holds_the_profilers_stop_is_a_pause_from_where_the_stop_ends():
    """Seen in CI beside another test: the step that stopped the profiler (2.84 s of the tool's) went on 1.06 s
    after the stop. The stall is that 1.06 s, and it begins as the stop ends, not where the step began."""
    fit_phase = Phase(name="fit", kind="fit", start=0.0, end=18.9, step_seconds_p50=0.05, steps=301)
    epochs = [Phase(name="epoch 1", kind="epoch", start=0.0, end=18.9, parent=0)]
    steps = [0.05] * 200 + [2.84 + 1.06] + [0.05] * 100
    d = digest(steps, start=0.0)  # the long step begins at 10.0 s; fit returns as the last step ends
    own = diagnosis_pauses([{"stop_seconds": 2.84, "start_seconds": 0.0, "step_seconds": [0.05] * 10}], [12.84])
    (pause,) = fit_pauses(fit_phase, epochs, [d], own).values()
    assert pause["t"] == pytest.approx(12.84) and pause["seconds"] == pytest.approx(1.06, abs=1e-3)
    assert pause["ends"] == pytest.approx(13.9)
    # Not the tool's: a step with no stop in it, as long, is a pause from its own begin.
    (plain,) = fit_pauses(fit_phase, epochs, [d]).values()
    assert plain["t"] == pytest.approx(10.0) and plain["seconds"] == pytest.approx(3.9, abs=1e-3)
    # A step with the tool's work in its middle (an excursion): its parts either side, from its begin to its end.
    d = digest([0.05] * 200 + [1.3] + [0.05] * 100, start=0.0)
    shorter = replace(fit_phase, end=16.3), [replace(epochs[0], end=16.3)]
    (split,) = fit_pauses(*shorter, [d], [(10.01, 10.21)]).values()
    assert (split["t"], split["ends"]) == (10.0, 11.3) and split["seconds"] == pytest.approx(1.1, abs=1e-3)


def test_a_pause_after_the_last_step_before_fit_returns_is_a_stall_and_not_idle_cores():
    fit_phase = Phase(name="fit", kind="fit", start=0.0, end=25.0, step_seconds_p50=0.01, steps=500,
                      cores_busy_mean=0.2)
    epochs = [Phase(name="epoch 1", kind="epoch", start=0.0, end=5.2, parent=0)]
    validation = Phase(name="validation", kind="evaluate", start=5.0, end=6.0, parent=1)
    d = digest([0.01] * 500, start=0.0)  # the last step ends at 5.0 s; fit returns at 25 s
    found = stalls(fit_phase, epochs, [d], nested=[epochs[0], validation])
    assert found.evidence["stalls"] == [{"t": 6.0, "seconds": 19.0, "ends": 25.0, "epoch": "fit", "at_epoch_start": False,
                                        "after_last_step": True}]
    assert found.title.endswith("after its last step, before fit returned at 6.0 s") and "on_train_end" in found.fix
    # A single pause is low however long (76% of the fit here): one pause is no pattern, and TensorFlow's
    # teardown pauses come and go from run to run; the title still gives its seconds and share.
    assert found.severity == "low" and "19.0 s" in found.title
    # A step that spans a validation pass (the last of an epoch, timed to the next) is not a pause.
    spanning = digest([0.01] * 100 + [4.0] + [0.01] * 100, start=0.0)  # a 4 s step ending at 5.0 s
    fit_span = Phase(name="fit", kind="fit", start=0.0, end=6.0, step_seconds_p50=0.01, steps=201)
    valid = Phase(name="validation", kind="evaluate", start=1.05, end=4.95, parent=1)
    whole = [Phase(name="epoch 1", kind="epoch", start=0.0, end=6.0, parent=0)]
    assert stalls(fit_span, whole, [spanning]) is not None
    assert stalls(fit_span, whole, [spanning], nested=[whole[0], valid]) is None
    # cores_idle is left to the stall: no "larger batch" advice for a pause
    record = RunRecord(run_id="r", command=["x"], started_at="2026", wall_seconds=30.0,
                       env={"host": {"cores_allowed": 2.0}})
    events = [Event(t=25.0, pid=1, kind="step_digest", data=d.to_payload())]
    ids = [f.id for f in find(record, [], events, [fit_phase, *epochs, validation], category="performance")]
    assert "stalls" in ids and "cores_idle" not in ids


def test_xla_on_cpu_needs_jit_compile_and_no_gpu_and_a_slower_step():
    from tensorgauge.analyse.diagnose import xla_on_cpu

    fit = Phase("fit", "fit", 0.0, 30.0, step_seconds_p50=0.3)
    config = {"jit_compile": "True"}
    slower = {"xla_step_seconds": [0.30, 0.31, 0.29], "plain_step_seconds": [0.05, 0.05, 0.06],
              "plain_trace_seconds": 1.2}
    finding = xla_on_cpu(config, slower, fit, gpus=0)
    assert finding.severity == "high" and finding.evidence["measured_ratio"] == 6.0
    assert xla_on_cpu(config, slower, fit, gpus=1) is None  # on a GPU XLA usually helps
    assert xla_on_cpu({"jit_compile": "False"}, slower, fit, gpus=0) is None
    assert xla_on_cpu(config, {"xla_step_seconds": [0.05], "plain_step_seconds": [0.05]}, fit, gpus=0) is None
    unmeasured = xla_on_cpu(config, {"skipped": "needs a second trace"}, fit, gpus=0)
    assert unmeasured.severity == "low" and "--try-fixes" in unmeasured.fix
    assert unmeasured.evidence["not_measured"] == "needs a second trace"


def test_eager_loop_gain_from_the_probe_and_the_loops_wait():
    def loop_finding(*extra):
        events = [Event(t=1.0, pid=1, kind="eager_gradients", data={"count": 32, "seconds": 1.0}), *extra]
        loop = Phase(name="train loop", kind="fit", start=0.0, end=2.0, step_seconds_p50=0.022)
        return eager_execution(None, loop, events)

    assert "not measured here: too short" in loop_finding(Event(t=2.0, pid=1, kind="eager_probe",
                                                               data={"skipped": "too short"})).expected_gain
    probe = Event(t=2.0, pid=1, kind="eager_probe", data={"eager_step_seconds": [0.02] * 5, "graph_step_seconds": [0.002] * 5,
                                                   "trace_seconds": 0.3})
    waits = Event(t=3.0, pid=1, kind="loop_input", data={"steps": 41, "next_seconds_total": 0.08})  # 2 ms a step
    finding = loop_finding(probe, waits)
    # (22 ms - 2 ms wait) x 0.1 + 2 ms: the wait in next() does not compile away.
    assert finding.evidence["expected_step_seconds"] == 0.004 and "10.0x" in finding.expected_gain
    assert "22.0 ms to about 4.0 ms (5.5x)" in finding.expected_gain


def test_eager_probe_is_due_after_its_steps_and_by_default_only_in_a_long_loop():
    from tensorgauge.hook.eager_probe import AUTO_AFTER_SECONDS, PROBE_AT, due

    assert not due(PROBE_AT - 1, 1e6, "always") and due(PROBE_AT, 1.0, "always")
    assert not due(PROBE_AT, AUTO_AFTER_SECONDS - 1, "auto") and due(PROBE_AT, AUTO_AFTER_SECONDS, "auto")
    assert not due(10**6, 1e6, "")


def test_an_idle_wait_as_fit_returns_is_not_cores_idle_during_training():
    # TensorFlow's CNN tutorial, 1 run of 5: three epochs at ~1.5 cores, then fit waited 5 s to return
    # (an iterator's teardown, no core busy): 0.8 cores over the whole fit, against 1.4 in its other runs.
    from tensorgauge.model import Sample

    fit_phase = Phase(name="fit", kind="fit", start=0.0, end=11.0, step_seconds_p50=0.008, steps=564,
                      cores_busy_mean=0.82, cpu_seconds=9.0)
    epochs = [Phase(name=f"epoch {i + 1}", kind="epoch", start=2.0 * i, end=2.0 * (i + 1), parent=0) for i in range(3)]
    d = digest([0.008] * 750, start=0.0)  # the last step ends at 6.0 s; fit returns at 11 s
    samples = [Sample(t=0.1 * i, cpu_seconds=min(0.1 * i, 6.0) * 1.5, cores_busy=1.5 if i < 60 else 0.0,
                      rss_bytes=1, threads=1, processes=1) for i in range(111)]
    record = RunRecord(run_id="r", command=["x"], started_at="2026", wall_seconds=12.0,
                       env={"host": {"cores_allowed": 2.0}})
    events = [Event(t=11.0, pid=1, kind="step_digest", data=d.to_payload())]
    ids = [f.id for f in find(record, samples, events, [fit_phase, *epochs], category="performance")]
    assert "stalls" not in ids and "cores_idle" not in ids  # one teardown wait: chance, and no idle training
    # The same fit idle while it trained: still found, at the cores busy over its training.
    slow = [replace(s, cpu_seconds=s.cpu_seconds / 3) for s in samples]
    found = next(f for f in find(record, slow, events, [replace(fit_phase, cores_busy_mean=0.27), *epochs],
                                 category="performance") if f.id == "idle_cause_unknown")  # no A/B here
    assert found.evidence["fit_cores_busy_mean"] == pytest.approx(0.5, abs=0.02)
    assert found.evidence["teardown_wait_seconds"] == pytest.approx(5.0, abs=0.1)
