"""Real Keras jobs that make the mistakes users ask about: each finding against what the job
measured itself, and silence where Keras' own plumbing only looks like the mistake."""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_tf

from tensorgauge.analyse.diagnose import SMALL_STEP_UNTRIED_SECONDS, SPE_MIN_GAIN, spe_gain
from tensorgauge.analyse.phases import main_fit, seconds_outside
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.hook.protocol import SMALL_STEP_SECONDS
from tensorgauge.store import Store

pytestmark = [needs_tf, pytest.mark.tf]
JOBS = Path(__file__).parent / "jobs"


def run_job(tg_cmd, store_path, *args) -> dict:
    result = subprocess.run([*tg_cmd, "run", "-q", "--", sys.executable, *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    report = RunReport.load(Store.open(store_path), "last")
    return {f.id: f for f in report.findings}


def test_retracing_predict_in_a_loop_and_models_not_cleared(store_path, tg_cmd, tmp_path):
    truth_path = tmp_path / "truth.json"
    found = run_job(tg_cmd, store_path, str(JOBS / "keras_misuse.py"), str(truth_path))
    truth = json.loads(truth_path.read_text())
    # Our tf.function, retraced on 8 shapes; never Keras' per-fit tf.data functions (fit ran 12 times).
    retracing = found["retracing"]
    line = (JOBS / "keras_misuse.py").read_text().splitlines().index("@tf.function") + 1
    assert retracing.evidence["traces"] == {f"step (keras_misuse.py:{line})": truth["step_shapes"]}
    assert retracing.evidence["instances"] == 1 and retracing.evidence["tracing_seconds"] > 0
    # predict on 8 rows, 40 times: the gain measured in the job agrees with the job's own timing.
    predict = found["predict_in_loop"]
    assert predict.evidence["small_predict_calls"] == 40
    own = truth["predict_seconds"] / truth["direct_seconds"]
    # Two timings of sub-millisecond calls minutes apart on a shared VM: the order of magnitude is the
    # claim (24x against 49x was seen under a full suite, 17x against 52x beside another test process), so
    # a factor of 5.
    assert own > 3 and own / 5 < predict.evidence["measured_speedup"] < own * 5
    # One model fit 12 times and 10 more in a sweep: 11 the job built (not Sequential's inner ones).
    assert found["models_not_cleared"].evidence["models_since_clear"] == truth["models"]
    assert "memory_leak" not in found


def test_memory_kept_across_calls_is_a_leak(store_path, tg_cmd):
    found = run_job(tg_cmd, store_path, str(JOBS / "leaky_calls.py"))
    leak = found["memory_leak"]
    assert leak.evidence["calls"] == 10 and leak.evidence["kinds"] == ["evaluate"]
    # The job keeps 40 MB a call.
    assert 40e6 * 0.8 < leak.evidence["growth_per_call_late_bytes"] < 40e6 * 1.25
    assert "lists that collect" in leak.fix
    assert "models_not_cleared" not in found  # it cleared the session before each model


def test_pauses_at_epoch_starts_are_stalls(store_path, tg_cmd, tmp_path):
    truth_path = tmp_path / "truth.json"
    found = run_job(tg_cmd, store_path, str(JOBS / "epoch_stalls.py"), str(truth_path))
    truth = json.loads(truth_path.read_text())
    stalls = found["stalls"].evidence
    # The generator paused as each of 4 epochs began; the first epoch's is the fit's start-up. (It may pause
    # once more after the fit: the tool's timing of the pipeline's stages runs the generator again, a pause of
    # the tool's own, not a stall.)
    # Besides, fit may return late once: deleting the last epoch's iterator waits for tf.data's autotuning
    # thread, at random, bare too (analyse/pauses.py), a pause of the job's (once in CI: 4 stalls).
    at_starts = [x for x in stalls["stalls"] if x["at_epoch_start"]]
    assert truth["pauses"] in (4, 5) and stalls["at_epoch_start"] == 3, stalls
    assert all(x.get("after_last_step") for x in stalls["stalls"] if not x["at_epoch_start"]), stalls
    assert sorted(x["epoch"] for x in at_starts) == ["epoch 2", "epoch 3", "epoch 4"]
    assert all(x["seconds"] >= truth["pause_seconds"] * 0.95 for x in at_starts)
    # The generator slept: the job's cores sat idle, but its pipeline runs Python of its own, which is
    # what it may have waited on, so not the autotuning advice.
    assert all(x["cores_busy"] < 0.5 for x in at_starts)
    config = next(e.data for e in RunReport.load(Store.open(store_path), "last").events if e.kind == "fit_config")
    assert config["dataset_autotune"] is True and config["dataset_python_ops"]
    assert "epochs start" in found["stalls"].fix and "autotune" not in found["stalls"].fix


def test_compute_probe_runs_on_the_shapes_of_real_batches(store_path, tg_cmd, tmp_path):
    """Windows of any length ((None, None, 7) in the spec): the A/B's compute-only steps run on the fit's
    real batches (256, 120, 7), not zeros of (32, 32, 7), and their time matches the job's own A/B."""
    truth_path = tmp_path / "truth.json"
    result = subprocess.run([*tg_cmd, "run", "-q", "--diagnose", "--", sys.executable, str(JOBS / "weather_like.py"),
                             str(truth_path), "--shape-only"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    truth = json.loads(truth_path.read_text())
    report = RunReport.load(Store.open(store_path), "last")
    tried = [e.data for e in report.events if e.kind == "input_ab"]
    probe = next((ab for ab in tried if ab.get("compute_step_seconds")), None)
    assert probe is not None, tried
    assert probe["source"] == "the fit's own next batches, pulled ahead" and probe["shapes"][0] == truth["batch_shape"]
    # Zeros of (32, 32, 7) gave a limit 4-6x too low. The compute-only step against the job's own timing of
    # its step on one cached batch (0.98-1.05x) is a speed of the machine's moment, measured over rounds by
    # benchmarks/independent_truths.py; here: timed, on the real batch's shapes.
    median = statistics.median(t for steps in probe["compute_step_seconds"] for t in steps)
    assert median > 0 and probe["shapes"][0] == truth["batch_shape"]
    # The profiler's own stop and the A/B's excursions are not stalls (other pauses of this 2-core VM may be).
    found = {f.id: f for f in report.findings}
    # The probe's event is sent as its stop ends (the step that stopped it goes on after that, the job's: seen
    # beside another test, 1.06 s more, a stall of the VM's moment that begins there).
    own = [(e.t - (e.data.get("stop_seconds") or 0.0), e.t) for e in report.events
           if e.kind == "input_probe" and e.data.get("step_seconds")]
    own += [(e.t - a, e.t - b) for e in report.events if e.kind == "input_ab" for a, b in e.data.get("excursions_before", [])]
    # A stall begins outside them (nor just before the probe's stop, in the step that holds it), and its seconds
    # leave out what of them falls between its begin and end; 10 ms of slack (an epoch start of 2.3 s, the job's
    # own, once ended 0.4 ms into the next excursion's first clock read).
    for stall in found["stalls"].evidence["stalls"] if "stalls" in found else []:
        begin, end = stall["t"], stall["ends"]
        assert not any(a - 0.05 < begin < b - 0.01 for a, b in own), (stall, own)
        assert stall["seconds"] <= seconds_outside(begin, end - begin, own) + 0.01, (stall, own)


def others_busy(samples) -> float:
    """The median cores the machine kept busy beyond the job's own (the monitor's among them), over the run."""
    beyond = [sum(s.cpu_percent) / 100 - s.cores_busy for s in samples if s.cpu_percent and s.cores_busy is not None]
    return statistics.median(beyond) if beyond else 0.0


def test_a_prefetched_map_taking_the_cores_counts_as_input_bound_in_a_plain_run(store_path, tg_cmd, tmp_path):
    """No wait in IteratorGetNext, yet the map's threads slow every step: the A/B counts the loss
    against the same step on one cached batch, as the job's own A/B does."""
    truth_path = tmp_path / "truth.json"
    found = run_job(tg_cmd, store_path, str(JOBS / "input_competes.py"), str(truth_path))
    truth = json.loads(truth_path.read_text())
    lost = 1 - truth["compute_only_step_seconds"] / truth["step_seconds"]
    report = RunReport.load(Store.open(store_path), "last")
    events = report.events
    ab = [e.data for e in events if e.kind == "input_ab"]
    split = report.input_split or {}
    if split.get("disturbed_rounds") and split.get("rounds", 0) < 3:
        # Another test's job came or went in the rounds (in CI, beside it: other loads of 0.46 and 0.96 cores
        # on a round's two sides, 4 rounds of 4): those left out, the others are too few for a verdict. It is
        # withheld, never denied.
        assert split["verdict"].startswith("within noise"), (ab, truth)
        return
    assert split.get("rounds", 0) >= 3, (ab, truth)
    # The competition for the cores is the premise: on a quiet machine the map costs the step 25-45%. Other
    # work on the cores takes them from the map and the step at its own rhythm, and the truth, timed after
    # the fit, is of another moment (beside another job: once 7.5%, once 49% with the tool's rounds seeing
    # none, once 4.9% where the rounds saw 42%): the verdict is checked where the job had the cores.
    store = Store.open(store_path)
    others = others_busy(store.samples(report.record.run_id))
    if lost < 0.15 or others > 0.6:  # 0.1-0.4 on a quiet VM: the monitor, the tool, the hypervisor's share
        return
    if lost < 0.25:  # near the threshold the rounds' noise may leave it open (beside a one-core hog: 17%)
        assert "input_bound" in found or report.input_split["verdict"].startswith("within noise"), (ab, truth)
        return
    assert "input_bound" in found, (ab, truth)
    # A pipeline of tf.data's own ops, autotuned as by default: told in every run.
    config = next(e.data for e in events if e.kind == "fit_config")
    assert config["dataset_autotune"] is True and config["dataset_python_ops"] == []
    evidence = found["input_bound"].evidence
    measured = evidence["input_seconds_per_step"] / evidence["step_seconds"]
    assert 0.5 < measured / lost < 2.0, (evidence, truth)
    if evidence.get("profiled_wait_seconds_per_step") is not None:  # the profiler says how: not by waiting
        assert "competing for" in found["input_bound"].title or "taking the cores" in found["input_bound"].title


def test_tiny_steps_get_the_measured_gain_of_steps_per_execution(store_path, tg_cmd, tmp_path):
    """--diagnose times the fit's model with 32 steps a call against one, on one repeated batch, and puts
    the model back. (The gain it measures against the same fit compiled with steps_per_execution=32
    without the tool is a speed of the moment, measured by benchmarks/independent_truths.py.)"""
    truth_path = tmp_path / "truth.json"
    result = subprocess.run([*tg_cmd, "run", "-q", "--diagnose", "--", sys.executable, str(JOBS / "tiny_steps.py"),
                             str(truth_path), "--no-ab"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    truth = json.loads(truth_path.read_text())
    assert truth["steps_per_execution_after"] == 1  # the trial put the model's setting back
    report = RunReport.load(Store.open(store_path), "last")
    (trial,) = [e.data for e in report.events if e.kind == "spe_probe"]
    assert trial["steps_per_execution"] == 32 and trial["single_step_seconds"] and trial["multi_call_seconds"]
    single, multi, _ = spe_gain(trial)
    # The ~1 ms steps are told small under 5 ms a step where the trial gained (both: the machine's moment).
    if main_fit(report.phases).step_seconds_p50 < SMALL_STEP_SECONDS and single / multi >= SPE_MIN_GAIN:
        finding = {f.id: f for f in report.findings}["small_batch"]
        evidence = finding.evidence
        assert evidence["trial_steps_per_execution"] == 32 and "measured here" in finding.expected_gain
        assert evidence["trial_single_step_seconds"] == pytest.approx(single, rel=1e-3)
        assert evidence["trial_step_seconds"] == pytest.approx(multi, rel=1e-3)
    else:
        assert "small_batch" not in {f.id for f in report.findings}
    # Without --diagnose the trial (a second train function traced) is not run, and the finding says so. Untried,
    # it is told under 4 ms a step alone (the ~1 ms steps took over 4 ms once, beside another test on a slow
    # moment of the VM: then the trial's to say, and no finding).
    plain = run_job(tg_cmd, store_path, str(JOBS / "tiny_steps.py"), str(truth_path), "--no-ab")
    untried = RunReport.load(Store.open(store_path), "last")
    (skipped,) = [e.data for e in untried.events if e.kind == "spe_probe"]
    assert "--diagnose" in skipped["skipped"] and not skipped.get("single_step_seconds")
    fit = main_fit(untried.phases)
    if fit.step_seconds_p50 < SMALL_STEP_UNTRIED_SECONDS:
        assert "--diagnose" in plain["small_batch"].expected_gain
    else:
        assert "small_batch" not in plain


def test_xla_on_a_cpu_is_timed_against_the_same_step_without_it(store_path, tg_cmd):
    result = subprocess.run([*tg_cmd, "run", "-q", "--diagnose", "--", sys.executable, str(JOBS / "xla_on_cpu.py")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    report = RunReport.load(Store.open(store_path), "last")
    probe = next(e.data for e in report.events if e.kind == "xla_probe")
    assert probe.get("xla_step_seconds") and probe.get("plain_step_seconds"), probe
    ratio = statistics.median(probe["xla_step_seconds"]) / statistics.median(probe["plain_step_seconds"])
    found = {f.id: f for f in report.findings}
    if ratio >= 1.1:  # XLA is slower on this CPU (6x measured here): named, with the ratio measured
        assert found["xla_on_cpu"].evidence["measured_ratio"] == pytest.approx(ratio, rel=0.01)
        assert "jit_compile=False" in found["xla_on_cpu"].fix
    else:
        assert "xla_on_cpu" not in found
    # the probe put the job's XLA train function back: the fit's steps after it ran as before
    assert report.record.exit_code == 0
