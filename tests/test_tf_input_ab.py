"""The input verdict on real jobs: the A/B a careful engineer would run (real steps against the same
steps on one cached batch), in fit and in custom loops, and a JAX custom loop counted by its calls."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import jax_env, needs_jax, needs_tf

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.hook.input_ab import VERDICT_ALLOWANCES
from tensorgauge.hook.protocol import INPUT_MODERATE
from tensorgauge.store import Store

pytestmark = [needs_tf, pytest.mark.tf]
JOBS = Path(__file__).parent / "jobs"


def record(tg_cmd, store_path, *args, env: dict[str, str] | None = None) -> RunReport:
    result = subprocess.run([*tg_cmd, "run", "-q", "--", sys.executable, *args], capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return RunReport.load(Store.open(store_path), "last")


def test_a_fit_waiting_on_a_serial_python_map_is_input_bound_by_the_ab(store_path, tg_cmd, tmp_path):
    ab = tmp_path / "ab.json"
    # A 20 ms sleep a batch: well over the threshold on a slow machine too. At 10 ms (55-66% of the step on a
    # quiet machine) a fresh clone at a slow moment of the VM read 8.5-13% and once withheld the verdict (five
    # undisturbed rounds); at 6 ms (35%) it was withheld in 1 run of 8: see docs/measurements.md.
    report = record(tg_cmd, store_path, str(JOBS / "input_cost.py"), "--slow", "--sleep-ms", "20", "--ab", str(ab))
    truth = json.loads(ab.read_text())
    split = report.input_split
    # The rounds a verdict needs, and those run while they lean to a cost they do not establish, may spend the
    # verdict's allowances (VERDICT_ALLOWANCES), never more (0.48 s of 0.40 once in CI: five rounds).
    allowed = VERDICT_ALLOWANCES * report.input_split["allowance_seconds"]
    assert report.input_split["cost_seconds"] <= allowed + 0.05
    if split["disturbed_rounds"] and not split["established"]:
        # Another process came or went in some rounds (another test's job, beside it): those left out, the
        # others may be too few or too spread for a verdict. It is withheld, never denied.
        assert split["verdict"].startswith("within noise"), split
        return
    assert split["rounds"] >= 3 and split["established"], split
    finding = next(f for f in report.findings if f.id == "input_bound")
    # The job's own A/B (the same fit on one cached batch) finds a cost too: about a third of its step on a quiet
    # machine (19-47% seen at 10 ms); beside a one-core hog on a slow moment of the VM, 13% (the tool's: 8.5%), as
    # the compute-only step grows and the sleep does not. How close the two come is a measurement
    # (benchmarks/diagnose_accuracy.py), not a truth of one run: here, the direction and the verdict's own bar.
    own = 1 - truth["compute_only_step_seconds"] / truth["step_seconds"]
    assert own > 0 and finding.evidence["input_share"] >= INPUT_MODERATE
    assert "num_parallel_calls" in finding.fix and "prefetch" in finding.fix  # neither is in its pipeline


def test_a_healthy_cached_prefetched_custom_loop_is_not_input_bound(store_path, tg_cmd):
    report = record(tg_cmd, store_path, str(JOBS / "input_cost.py"), "--loop")
    split = report.input_split
    # next() on its iterator costs what next() on a cached batch costs: step overhead, not input.
    assert split["measured"] and split["pairs"] >= 32 and split["step_overhead_seconds"] > 0
    assert "input_bound" not in {f.id for f in report.findings}, split


@needs_jax
def test_a_jax_custom_loop_is_counted_by_its_calls_with_its_evaluation(store_path, tg_cmd, tmp_path):
    truth_path = tmp_path / "truth.json"
    report = record(tg_cmd, store_path, str(JOBS / "jax_loop.py"), str(truth_path), env=jax_env())
    truth = json.loads(truth_path.read_text())
    loop = next(p for p in report.phases if p.name == "train loop")
    assert loop.steps == truth["steps"]  # every call of the jitted step, not its traces
    evaluation = [p for p in report.phases if p.kind == "evaluate"]
    assert sum(p.steps or 0 for p in evaluation) == truth["eval_steps"]
    traces = [e.data for e in report.events if e.kind == "trace" and e.data.get("framework") == "jax"]
    assert {t["function"] for t in traces} == {"train_step", "eval_step"}
    found = {f.id: f for f in report.findings}
    assert "stalls" not in found and "input_bound" not in found  # its compiles are not pauses
    loop_config = next(e.data for e in report.events if e.kind == "fit_config" and e.data.get("loop"))
    assert loop_config["backend"] == "jax"
    if "small_batch" in found:  # advice for a jax.jit loop, not a tf.function's
        assert "jax.lax.scan" in found["small_batch"].fix


def test_the_compute_only_input_has_fits_spec_and_holds_nothing_of_the_jobs_pipeline():
    out = subprocess.run([sys.executable, str(JOBS / "cached_inputs.py")], capture_output=True, text=True, check=True)
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    cases = {line["case"]: line for line in lines if "case" in line}
    assert set(cases) == {"open batch", "fixed batch", "dict features", "generator", "arrays", "large shuffle buffer"}
    assert all(c["spec_matches"] and c["repeats"] for c in cases.values()), cases  # no new trace, one batch
    assert cases["open batch"]["source"] == "a real batch" and cases["open batch"]["shapes"] == [[8, 3], [8, 1]]
    assert cases["generator"]["source"].startswith("zeros")  # a generator is not restarted to peek
    assert cases["large shuffle buffer"]["source"].startswith("zeros")  # nor a pipeline filling 64 MiB to peek
    assert cases["arrays"]["batch_dim"] is None  # as fit batches arrays: the last batch may be smaller
    # The fit's own batches pulled ahead: stacked where they share a shape, else concatenated, in the fit's spec.
    stashes = {line["stash"]: line for line in lines if "stash" in line}
    assert set(stashes) == {"last batch smaller", "dict features", "strings", "ragged", "sparse"}
    assert all(s["spec_matches"] and s["in_order"] for s in stashes.values()), stashes
    # Deleting an autotuned iterator waits for tf.data's autotuner thread (2 s idle at the end of a fit seen).
    assert lines[-2] == {"autotune": False}
    buffers = lines[-1]["buffers"]
    assert buffers["aligned slices"]["holds_bytes"] == 0 and buffers["aligned slices"]["shared_bytes"] == 64
    assert buffers["unaligned slices"]["holds_bytes"] == 10 * 12  # the 3-float rows are copied, the others shared
    assert buffers["mapped"]["holds_bytes"] == 100 * 64 and buffers["mapped"]["shared_bytes"] == 0
