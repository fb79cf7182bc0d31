"""The findings users ask about most, on hand-built runs: predict in a loop, models built without
clear_session(), memory that keeps growing across calls against a warm-up plateau."""

from tensorgauge.analyse.diagnose import predict_in_loop
from tensorgauge.analyse.findings import find
from tensorgauge.analyse.summary import summarise
from tensorgauge.model import Event, Phase, RunRecord

MIB = 1 << 20


def calls(kind: str, rss_ends: list[int], steps: int = 1, seconds: float = 0.05) -> list[Phase]:
    return [Phase(name=kind, kind=kind, start=10.0 + i, end=10.0 + i + seconds, steps=steps, rss_end_bytes=rss)
            for i, rss in enumerate(rss_ends)]


def findings(phases: list[Phase], events: list[Event] = ()) -> dict:
    record = RunRecord(run_id="r", command=["x"], started_at="2026", wall_seconds=100.0, complete=True)
    found = find(record, [], list(events), phases, summarise(record, []))
    return {f.id: f for f in found}


def test_predict_in_loop_with_the_gain_measured_on_the_jobs_model():
    phases = calls("predict", [500 * MIB] * 40, seconds=0.1)
    probe = {"calls": 20, "rows": 8, "predict_seconds": 0.1, "direct_seconds": 0.002}
    finding = predict_in_loop(phases, probe, wall=10.0)
    assert finding.severity == "high" and finding.evidence["measured_speedup"] == 50.0
    assert "model(x, training=False)" in finding.fix and "50.0x, measured" in finding.expected_gain
    assert finding.evidence["small_predict_calls"] == 40
    assert predict_in_loop(phases, probe, wall=1000.0).severity == "moderate"  # 4 s of 1000: not the main cost
    assert predict_in_loop(phases, None, wall=10.0).severity == "moderate"  # not measured: general advice
    # No gain worth a finding on this model, too few calls, or calls of many batches: silent.
    assert predict_in_loop(phases, {**probe, "direct_seconds": 0.08}, wall=10.0) is None
    assert predict_in_loop(phases[:19], probe, wall=10.0) is None
    assert predict_in_loop(calls("predict", [500 * MIB] * 40, steps=50), probe, wall=10.0) is None
    # A fit's validation is not a predict call of the job's.
    fit = Phase(name="fit", kind="fit", start=0.0, end=100.0)
    inside = [Phase(name="predict", kind="predict", start=1.0 + i, end=1.1 + i, steps=1, parent=0) for i in range(30)]
    assert predict_in_loop([fit, *inside], probe, wall=10.0) is None


def built(count: int, since_clear: int, rss: int, clears: int = 0) -> Event:
    return Event(t=float(count), pid=1, kind="models_built",
                 data={"count": count, "since_clear": since_clear, "clears": clears, "rss": rss})


def test_models_not_cleared_with_the_memory_they_held():
    events = [built(n, n, 500 * MIB + n * 10 * MIB) for n in range(1, 13)]
    found = findings([], events)
    finding = found["models_not_cleared"]
    assert finding.severity == "moderate" and finding.evidence["models_since_clear"] == 12
    assert finding.evidence["rss_growth_bytes"] == 110 * MIB and "110.0 MiB" in finding.title
    # Cleared every third model: never 10 in a row.
    cleared = [built(n, (n - 1) % 3 + 1, 500 * MIB, clears=(n - 1) // 3) for n in range(1, 31)]
    assert "models_not_cleared" not in findings([], cleared)
    # Cleared once, then 10 more: only those count, and only their growth.
    again = [built(n, n, 500 * MIB + n * MIB) for n in range(1, 6)]
    again += [built(5 + n, n, 900 * MIB + n * MIB, clears=1) for n in range(1, 11)]
    assert findings([], again)["models_not_cleared"].evidence["rss_growth_bytes"] == 9 * MIB


def test_memory_that_keeps_growing_across_calls_is_a_leak():
    ends = [400 * MIB] + [500 * MIB + i * 20 * MIB for i in range(10)]
    finding = findings(calls("predict", ends))["memory_leak"]
    assert finding.severity == "moderate" and finding.evidence["growth_per_call_late_bytes"] == 20 * MIB
    assert "20.0 MiB per predict call" in finding.title and "lists that collect tensors" in finding.fix
    assert "20.0 MiB x 9 calls after the first = 180.0 MiB" in finding.title  # the sentence adds up
    # Models built in the loop are named as the likely cause.
    models = [built(n, n, 500 * MIB + n * 20 * MIB) for n in range(1, 12)]
    assert "clear_session" in findings(calls("predict", ends), models)["memory_leak"].fix


def test_one_allocation_before_a_late_call_is_not_a_leak():
    # keras-io's VAE: RSS falls a little over 225 decoder.predict calls, then the script allocates 40 MiB
    # of new arrays before its last call.
    ends = [935 * MIB - i * 25 * 1024 for i in range(225)] + [970 * MIB]
    assert not {"memory_leak", "memory_plateau"} & set(findings(calls("predict", ends)))
    # ... and the same jump after a steady rise of 5 MiB a call does not make the rise level off or stop.
    rising = [500 * MIB + i * 5 * MIB for i in range(20)] + [700 * MIB]
    assert findings(calls("predict", rising))["memory_leak"].evidence["growth_per_call_late_bytes"] == 5 * MIB


def test_memory_taken_between_the_calls_is_told_apart_from_memory_kept_by_them():
    phases = [Phase(name="predict", kind="predict", start=10.0 + i, end=10.5 + i, steps=1,
                    rss_start_bytes=500 * MIB + i * 20 * MIB, rss_end_bytes=500 * MIB + i * 20 * MIB + MIB)
              for i in range(10)]
    leak = findings(phases)["memory_leak"]
    assert leak.evidence["growth_between_calls_bytes"] > leak.evidence["growth_inside_calls_bytes"]
    assert "between the calls, in the job's own code" in leak.fix


def test_memory_that_levels_off_is_a_plateau_not_a_leak():
    ends = [400 * MIB] + [500 * MIB + min(i, 4) * 30 * MIB for i in range(12)]
    found = findings(calls("fit", ends))
    assert "memory_leak" not in found and found["memory_plateau"].severity == "info"
    assert "120.0 MiB over 13 fit calls" in found["memory_plateau"].title
    # Flat, too few calls, or too small a rise: nothing at all.
    assert not {"memory_leak", "memory_plateau"} & set(findings(calls("fit", [500 * MIB] * 12)))
    assert not {"memory_leak", "memory_plateau"} & set(findings(calls("fit", ends[:5])))
    assert not {"memory_leak", "memory_plateau"} & set(findings(calls("fit", [500 * MIB + i * MIB for i in range(12)])))


def test_memory_taken_by_each_new_model_is_not_a_leak():
    """keras-io's wide & deep program: three models, each fitted and evaluated once; RSS rises as each is
    built, not call after call on one model."""
    phases, events = [], []
    for model in range(3):
        built_at = 10.0 + 10 * model
        events.append(Event(t=built_at, pid=1, kind="models_built",
                            data={"count": model + 1, "since_clear": model + 1, "clears": 0}))
        rss = 700 * MIB + model * 50 * MIB
        phases += [Phase(name="fit", kind="fit", start=built_at + 1, end=built_at + 4, steps=194, rss_end_bytes=rss),
                   Phase(name="evaluate", kind="evaluate", start=built_at + 4, end=built_at + 5, steps=36,
                         rss_end_bytes=rss + 4 * MIB)]
    assert not {"memory_leak", "memory_plateau"} & set(findings(phases, events))
    # The same rises with no model built between the calls: memory kept call after call.
    assert "memory_leak" in findings(phases)


def test_memory_kept_by_calls_on_models_built_after_clear_session_is_a_leak():
    """A job that clears the session before each model and keeps each call's results: the new models
    explain nothing, the list does (tests/jobs/leaky_calls.py)."""
    phases, events = [], []
    for call in range(10):
        events.append(Event(t=10.0 + call, pid=1, kind="models_built",
                            data={"count": call + 1, "since_clear": 1, "clears": call + 1}))
        phases.append(Phase(name="evaluate", kind="evaluate", start=10.2 + call, end=10.5 + call, steps=8,
                            rss_end_bytes=600 * MIB + call * 40 * MIB))
    assert "memory_leak" in findings(phases, events)
