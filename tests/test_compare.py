"""compare on fakes: environment differences, result ratios, ranked explanations."""

from tensorgauge.analyse.compare import Side, compare
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.model import Event, RunRecord

HOST = {"hostname": "a", "cpu_model": "EPYC", "cpu_flags": ["avx2", "fma"], "cores_allowed": 2.0,
        "ram_bytes": 24 << 30, "env_vars": {}, "gpus": []}
JOB = {"tensorflow_version": "2.21.0", "onednn_enabled": False, "python": "3.11.7", "numpy_version": "2.4",
       "blas": [{"internal_api": "openblas", "version": "0.3", "num_threads": 2}], "thread_env": {}}
BENCH = [("numpy matmul 2000", "numpy", 140.0, True), ("tf matmul 1000", "tf_ops", 114.0, True),
         ("fit dense batch 512", "keras", 24000.0, True), ("save and load", "io", 0.18, False)]


def side(label, host=None, job=None, speed=None, phases=()):
    speed = speed or {}
    events = [Event(t=1.0 + i, pid=1, kind="bench_result",
                    data={"name": name, "group": group, "value": value / speed.get(group, 1.0)
                          if better else value * speed.get(group, 1.0), "unit": "x", "higher_is_better": better,
                          "seconds": 1.0}) for i, (name, group, value, better) in enumerate(BENCH)]
    for i, (name, kind, start, end) in enumerate(phases):
        events += [Event(t=start, pid=1, kind="phase_begin", data={"id": i + 1, "name": name, "phase_kind": kind}),
                   Event(t=end, pid=1, kind="phase_end", data={"id": i + 1})]
    record = RunRecord(run_id=f"r-{label}", command=["x"], started_at="2026", wall_seconds=30.0, complete=True,
                       env={"host": {**HOST, **(host or {})}, "job": {**JOB, **(job or {})}})
    return Side(label, RunReport.build(record, [], events))


def test_restricted_cpus_and_onednn_are_named_first_with_each_benchmark_quantified():
    a = side("a", job={"onednn_enabled": True})
    b = side("b", host={"cores_allowed": 1.0, "env_vars": {"TF_ENABLE_ONEDNN_OPTS": "0"}},
             job={"onednn_enabled": False, "blas": [{"internal_api": "openblas", "version": "0.3", "num_threads": 1}]},
             speed={"numpy": 1.9, "tf_ops": 2.6, "keras": 1.5})
    result = compare(a, b)
    assert [d["cause"] for d in result.environment] == ["cpus", "onednn"]  # BLAS threads follow the CPUs
    top = [e["cause"] for e in result.explanations]
    assert top == ["cpus", "onednn"]
    cpus, onednn = result.explanations
    assert {r["name"]: r["slowdown"] for r in cpus["affected"]} == {
        "tf matmul 1000": 2.6, "numpy matmul 2000": 1.9, "fit dense batch 512": 1.5}
    assert [r["name"] for r in onednn["affected"]] == ["tf matmul 1000", "fit dense batch 512"]
    assert "on (TF_ENABLE_ONEDNN_OPTS=unset) -> off (TF_ENABLE_ONEDNN_OPTS=0)" in onednn["text"]
    assert "2.60x slower" in onednn["text"] and "up to 2.0x" in cpus["text"]
    assert result.unexplained == []  # save and load did not change


def test_a_setting_that_changed_nothing_ranks_below_a_real_change():
    a = side("a")
    b = side("b", host={"cores_allowed": 1.0, "env_vars": {"TF_ENABLE_ONEDNN_OPTS": "0"}},
             speed={"numpy": 1.9, "tf_ops": 1.9, "keras": 1.5})
    cpus, onednn = compare(a, b).explanations
    assert cpus["cause"] == "cpus" and onednn["score"] < cpus["score"]
    assert "likely changed nothing here" in onednn["text"]


def test_same_machine_two_runs_compare_phase_by_phase():
    phases_a = [("import tensorflow", "import", 0.1, 4.0), ("fit", "fit", 5.0, 15.0), ("save m.keras", "save", 15.0, 15.1)]
    phases_b = [("import tensorflow", "import", 0.1, 4.1), ("fit", "fit", 5.0, 25.0), ("save m.keras", "save", 25.0, 25.1)]
    a, b = side("a", phases=phases_a), side("b", phases=phases_b)
    a.report.events[:] = [e for e in a.report.events if e.kind != "bench_result"]
    b.report.events[:] = [e for e in b.report.events if e.kind != "bench_result"]
    result = compare(a, b)
    assert result.environment == [] and result.explanations == []
    by_name = {r.name: r.slowdown for r in result.results}
    assert by_name["fit"] == 2.0 and round(by_name["import tensorflow"], 3) == 1.026
    assert [r.name for r in result.unexplained] == ["fit"]
    doc = result.to_dict()
    assert doc["schema"] == "tensorgauge.compare/1" and doc["a"]["run_id"] == "r-a"


def test_slowdown_words():
    from tensorgauge.analyse.compare import format_slowdown

    assert [format_slowdown(s) for s in (1.0, 1.004, 2.0, 0.5)] == ["the same", "the same", "2.00x slower",
                                                                       "2.00x faster"]
