"""Each built-in scenario's cause is found; the healthy one gets no performance warning; the
input-bound one gets consistent input evidence (its accuracy against an independent A/B:
benchmarks/diagnose_accuracy.py)."""

import json
import os

import pytest
from conftest import needs_tf

from tensorgauge.analyse.findings import PERFORMANCE_IDS
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.cli import main
from tensorgauge.store import Store

pytestmark = [needs_tf, pytest.mark.tf]


def findings_of(store_path, scenario):
    report = RunReport.load(Store.open(store_path), f"scenario {scenario}")
    return report, {f.id: f for f in report.findings}


# What the machine's other work causes, not the job: another test's job on the same cores makes them
# oversubscribed, and the finding is right to say so.
MACHINE_FINDINGS = {"cpu_oversubscribed"}


def warnings(found):
    """Performance findings that warn (high or moderate) about the job; `low` is advice, e.g. start-up of a
    short job."""
    return [i for i, f in found.items()
            if i in PERFORMANCE_IDS and i not in MACHINE_FINDINGS and f.severity in ("high", "moderate")]


@pytest.mark.parametrize("scenario, cause", [
    ("eager", "eager_execution"), ("eager-loop", "eager_execution"), ("thread-limited", "thread_limited"),
])
def test_scenario_cause_is_found(store_path, capsys, scenario, cause):
    if scenario == "thread-limited" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one thread is no limit on a machine with one CPU")
    assert main(["demo", "--scenario", scenario]) == 0
    _, found = findings_of(store_path, scenario)
    assert cause in found and found[cause].severity == "high"
    assert warnings(found) == [cause]  # and nothing else is blamed
    assert cause in capsys.readouterr().out


@pytest.mark.alone  # another test's jobs beside it come and go at the rounds' own pace
def test_healthy_job_gets_no_warning_in_five_runs(store_path):
    """The healthy demo is the borderline case of the input verdict: on a 2-core VM its A/B pools 0-14%
    of the step around the 5% threshold (an independent A/B, bare: 0-3.5%). Run five times, it gets no
    warning, and a run whose A/B pools at the threshold or above says "within noise". (Advice may differ:
    `startup_dominated`, low, states the run's own start-up share, measured, not estimated, and a run on a
    slow moment of the VM crosses its 50%.) The same five runs, with their shares, are a row of
    benchmarks/verdict_table.py's table in docs/measurements.md; the demo beside a neighbour that comes and
    goes is measured there too, and its rule tested on rounds in test_input_window.py."""
    for run in range(5):
        assert main(["demo", "--scenario", "healthy"]) == 0
        report, _ = findings_of(store_path, "healthy")
        split = report.input_split or {}
        rounds = [{key: e.data.get(key) for key in ("real_step_seconds", "compute_step_seconds", "other_cores",
                                                    "untimed_steps")} for e in report.events if e.kind == "input_ab"]
        print(f"run {run}: the A/B's rounds, whole (an assertion's message is cut short):", json.dumps(rounds))
        assert [(f.id, f.title) for f in report.findings
                if f.severity in ("high", "moderate") and f.id not in MACHINE_FINDINGS] == [], run
        assert not any(e.data.get("error") for e in report.events if e.kind == "input_probe")
        assert split.get("rounds") and not split["established"], (run, split)
        if split["input_share"] >= 0.05:
            assert split["verdict"].startswith("within noise"), (run, split)


def test_input_bound_evidence_matches_an_independent_ab_measurement(store_path):
    assert main(["demo", "--scenario", "input-bound"]) == 0
    _, found = findings_of(store_path, "input-bound")
    # Besides its cause, only a pause between epochs may show: under the tool (--diagnose) epoch 2 sometimes
    # starts 1.4-1.6 s late (1 run in 3 here, once in CI), and once in CI the fit returned 1.3 s after its
    # last step. tf.data deleting an iterator waits for its autotuning thread, at random, bare too (see
    # analyse/pauses.py), so such a pause is the job's, not this scenario's cause. A pause mid-epoch would be.
    assert "input_bound" in warnings(found) and set(warnings(found)) <= {"input_bound", "stalls"}
    assert all(s["at_epoch_start"] or s.get("after_last_step") or s.get("in_validation")
               for s in (found["stalls"].evidence["stalls"] if "stalls" in found else []))
    evidence = found["input_bound"].evidence
    assert found["input_bound"].severity == "high" and evidence["rounds"] >= 3
    # How it waits: in next(), most of the input cost (the map sleeps ~64 ms a batch, the step computes ~6 ms).
    assert evidence["profiled_wait_seconds_per_step"] > 0.5 * evidence["input_seconds_per_step"]
    # The parts are consistent: the compute-only step is what is left of the step once the input is taken out.
    # How close these figures come to an independent A/B of the same job (its own process, without the tool)
    # is a measurement of the machine's moment, not a truth of one run: benchmarks/diagnose_accuracy.py
    # (docs/measurements.md: 0.92 for the wait, 0.99 for the compute-only step, median of 6 rounds).
    assert 0 < evidence["compute_only_step_seconds"] < 0.5 * evidence["input_seconds_per_step"]

def test_bad_scenario_name(capsys):
    assert main(["demo", "--scenario", "nope"]) == 2
    assert "no scenario 'nope' (choose from: default, input-bound" in capsys.readouterr().err
