"""Which edits a run's findings call for: where the cache may go (never after a random stage, never over
half the memory, never on an infinite stage), no edit the code has already, and the sites' ambiguities."""

import pytest

from tensorgauge.edit.plan import Edit, Refusal, plan
from tensorgauge.edit.sites import RecordedSites, read_sites
from tensorgauge.hook.protocol import Kind
from tensorgauge.model import Event, Finding

pytest.importorskip("libcst")
TRAIN = "/home/u/job/train.py"


def stage(name, line, cls, **facts):
    return {"stage": name, "cls": cls, "site": f"{TRAIN}:{line}", "random": False, "python": False,
            "parallel": False, "elements": 1000, "element_bytes": 4096, "callers": [], **facts}


def sites(stages, **calls) -> RecordedSites:
    events = [Event(t=1.0, pid=1, kind=Kind.CODE_SITES, data={"call": "fit", "site": f"{TRAIN}:40",
                                                             "stages": stages, "files": {TRAIN: "x"}})]
    for call, lines in calls.items():
        for line, extra in lines:
            events.append(Event(t=1.0, pid=1, kind=Kind.CODE_SITES,
                                data={"call": call, "site": f"{TRAIN}:{line}", **extra}))
    return read_sites(events)


def input_bound(costliest=None) -> Finding:
    return Finding("input_bound", "high", "Input costs 80%", evidence={"costliest_stage": costliest} if costliest
                   else {})


def fixes(planned):
    return {p.fix: p for p in planned}


SLICES = stage("from_tensor_slices", 10, "_TensorSliceDataset")
DECODE = stage("Map", 11, "_MapDataset", function="decode", location="train.py:3")
BATCH = stage("Batch", 13, "_BatchDataset", elements=32)


def test_a_costly_deterministic_map_gets_cache_parallel_calls_and_prefetch():
    planned = fixes(plan([input_bound({"stage": "Map", "location": "train.py:3"})],
                         sites([SLICES, DECODE, BATCH])))
    assert {k: type(v) for k, v in planned.items()} == {"cache": Edit, "parallel_map": Edit, "prefetch": Edit}
    assert planned["cache"].site.line == 11 and planned["parallel_map"].site.line == 11
    assert planned["prefetch"].site.line == 13
    assert all(p.numbers == "equal" for p in planned.values())


def test_no_edit_the_pipeline_has_already():
    parallel = stage("ParallelMap", 11, "_ParallelMapDataset", function="decode", location="train.py:3",
                     parallel=True)
    cached = stage("Cache", 12, "CacheDataset")
    prefetched = stage("Prefetch", 14, "_PrefetchDataset")
    planned = plan([input_bound({"stage": "ParallelMap", "location": "train.py:3"})],
                   sites([SLICES, parallel, cached, BATCH, prefetched]))
    assert planned == []


def test_no_cache_after_a_random_stage_and_the_refusal_says_which():
    shuffle = stage("Shuffle", 11, "_ShuffleDataset")
    decode = stage("Map", 12, "_MapDataset", function="decode", location="train.py:3")
    planned = fixes(plan([input_bound({"stage": "Map", "location": "train.py:3"})],
                         sites([SLICES, shuffle, decode, BATCH])))
    refusal = planned["cache"]
    assert isinstance(refusal, Refusal)
    assert "comes after the random Shuffle" in refusal.why and "train.py:11" in refusal.why
    assert isinstance(planned["parallel_map"], Edit)  # what is safe is still proposed


def test_a_cache_goes_before_a_random_augmentation_when_the_work_before_it_pays():
    augment = stage("Map", 12, "_MapDataset", function="augment", location="train.py:5", random=True)
    fft = stage("Map", 13, "_MapDataset", function="fft", location="train.py:7")
    split = {"stages": [{"stage": "from_tensor_slices", "location": None, "share": 0.05},
                        {"stage": "Map", "location": "train.py:3", "share": 0.40},
                        {"stage": "Map", "location": "train.py:5", "share": 0.05},
                        {"stage": "Map", "location": "train.py:7", "share": 0.50}]}
    planned = fixes(plan([input_bound({"stage": "Map", "location": "train.py:7"})],
                         sites([SLICES, DECODE, augment, fft, BATCH]), split))
    cache = planned["cache"]
    assert isinstance(cache, Edit) and cache.site.line == 11  # after decode, before the random augment
    assert "before the random Map augment" in cache.note and "45%" in cache.note
    cheap = {"stages": [dict(r, share=0.01) if r["location"] == "train.py:3" else r for r in split["stages"]]}
    refused = fixes(plan([input_bound({"stage": "Map", "location": "train.py:7"})],
                         sites([SLICES, DECODE, augment, fft, BATCH]), cheap))["cache"]
    assert isinstance(refused, Refusal) and "cost 6% of the input" in refused.why


def test_no_cache_that_would_hold_over_half_the_memory_or_never_complete():
    big = stage("Map", 11, "_MapDataset", function="decode", location="train.py:3", elements=100_000,
                element_bytes=150_000)
    refusal = fixes(plan([input_bound({"stage": "Map", "location": "train.py:3"})], sites([SLICES, big, BATCH]),
                         memory_bytes=16 << 30))["cache"]
    assert isinstance(refusal, Refusal) and "over half of the machine's" in refusal.why and "14.0 GiB" in refusal.why
    endless = stage("Map", 11, "_MapDataset", function="decode", location="train.py:3", elements=-1)
    refusal = fixes(plan([input_bound({"stage": "Map", "location": "train.py:3"})],
                         sites([SLICES, endless, BATCH])))["cache"]
    assert isinstance(refusal, Refusal) and "infinite" in refusal.why


def test_a_helper_building_two_pipelines_is_named_and_one_a_library_calls_is_refused():
    shared = stage("Map", 11, "_MapDataset", function="decode", location="train.py:3",
                   callers=[f"{TRAIN}:30", f"{TRAIN}:31"])
    cache = fixes(plan([input_bound({"stage": "Map", "location": "train.py:3"})],
                       sites([SLICES, shared, BATCH])))["cache"]
    assert isinstance(cache, Edit) and "builds 2 pipelines (called from train.py:30, train.py:31)" in cache.note
    library = stage("Map", 11, "_MapDataset", function="decode", location="train.py:3", callers=["library"])
    cache = fixes(plan([input_bound({"stage": "Map", "location": "train.py:3"})],
                       sites([SLICES, library, BATCH])))["cache"]
    assert isinstance(cache, Refusal) and "called by a library" in cache.why


def test_a_stage_a_library_made_is_not_edited_but_prefetch_goes_on_fit():
    made = [dict(SLICES, site=None), dict(DECODE, site=None), dict(BATCH, site=None)]
    planned = fixes(plan([input_bound({"stage": "Map", "location": "train.py:3"})], sites(made)))
    assert isinstance(planned["cache"], Refusal) and "made by a library" in planned["cache"].why
    assert isinstance(planned["prefetch"], Edit) and planned["prefetch"].site.line == 40


def test_small_batch_sets_the_measured_steps_per_execution_on_the_fit_models_compile():
    finding = Finding("small_batch", "moderate", "Steps are tiny",
                      evidence={"steps_per_execution": 1, "trial_steps_per_execution": 16})
    events_sites = sites([BATCH], compile=[(20, {"model": 7, "given": []}), (50, {"model": 9, "given": []})])
    events_sites.pipelines[0].model = 9
    edit = plan([finding], events_sites)[0]
    assert isinstance(edit, Edit) and edit.site.line == 50 and "steps_per_execution=16" in edit.summary
    assert edit.numbers == "close"
    two = sites([BATCH], compile=[(20, {"given": []}), (50, {"given": []})])
    assert isinstance(plan([finding], two)[0], Refusal)
    already = Finding("small_batch", "moderate", "tiny", evidence={"steps_per_execution": 8})
    assert plan([already], events_sites) == []


def test_eager_and_xla_remove_only_the_argument_compile_was_given():
    eager = Finding("eager_execution", "high", "eager", evidence={"run_eagerly": True})
    given = sites([BATCH], compile=[(20, {"given": ["run_eagerly"]})])
    assert plan([eager], given)[0].fix == "no_run_eagerly"
    elsewhere = sites([BATCH], compile=[(20, {"given": []})])
    refusal = plan([eager], elsewhere)[0]
    assert isinstance(refusal, Refusal) and "model.run_eagerly = ..." in refusal.why
    xla = Finding("xla_on_cpu", "high", "xla", evidence={"jit_compile": True})
    assert plan([xla], sites([BATCH], compile=[(20, {"given": ["jit_compile"]})]))[0].fix == "no_jit"


def test_a_custom_loop_running_eagerly_gets_tf_function_at_its_gradient_site():
    loop = Finding("eager_execution", "high", "loop", evidence={"eager_gradient_calls": 64})
    edit = plan([loop], sites([BATCH], gradient=[(33, {})]))[0]
    assert isinstance(edit, Edit) and edit.fix == "tf_function" and edit.site.line == 33
    assert isinstance(plan([loop], sites([BATCH]))[0], Refusal)


def test_findings_whose_fix_is_not_code_propose_nothing():
    findings = [Finding("startup_dominated", "low", "start-up"), Finding("memory_growth", "moderate", "grows"),
                Finding("cpu_oversubscribed", "high", "threads", evidence={"runnable_threads_median": 6})]
    assert plan(findings, sites([SLICES, DECODE, BATCH])) == []


def test_a_pipeline_a_library_function_made_is_cached_where_the_job_calls_it():
    made = {"made_in": f"{TRAIN}:20", "made_by": "timeseries_dataset_from_array", "site": None}
    windows = [dict(SLICES, **made), dict(DECODE, **made), dict(BATCH, **made, elements=32)]
    planned = fixes(plan([input_bound({"stage": "Map", "location": "train.py:3"})], sites(windows)))
    cache = planned["cache"]
    assert isinstance(cache, Edit) and cache.site.line == 20
    assert "after the dataset timeseries_dataset_from_array() returns (train.py:20)" in cache.summary
    assert "holding 128.0 KiB" in cache.summary  # what the last stage holds: its 32 elements of 4 KiB
    shuffled = [dict(SLICES, **made), dict(stage("Shuffle", 0, "_ShuffleDataset"), **made), dict(DECODE, **made)]
    refused = fixes(plan([input_bound({"stage": "Map", "location": "train.py:3"})], sites(shuffled)))["cache"]
    assert isinstance(refused, Refusal) and "random Shuffle" in refused.why


def test_a_retraced_function_gets_reduce_retracing_and_one_made_anew_each_time_is_refused():
    retraced = Finding("retracing", "high", "traced 40 times",
                       evidence={"traces": {"train_step (train.py:21)": 40}, "instances": 1})
    edit = plan([retraced], sites([BATCH]))[0]
    assert isinstance(edit, Edit) and edit.site == type(edit.site)(TRAIN, 21) and edit.fix == "reduce_retracing"
    source = "import tensorflow as tf\n" + "\n" * 19 + "@tf.function\ndef train_step(x):\n    return x\n"
    assert "@tf.function(reduce_retracing=True)\n" in edit.change(source, "tf")
    anew = Finding("retracing", "high", "created anew", evidence={"traces": {"f (train.py:21)": 40}, "instances": 40})
    assert isinstance(plan([anew], sites([BATCH]))[0], Refusal)


def test_an_input_bound_fit_on_arrays_says_what_it_does_not_write():
    events = [Event(t=1.0, pid=1, kind=Kind.CODE_SITES, data={"call": "fit", "site": f"{TRAIN}:86", "input": "ndarray"})]
    [refusal] = plan([input_bound()], read_sites(events))
    assert isinstance(refusal, Refusal) and refusal.why.startswith("fit is given ndarray at train.py:86")


def test_a_thread_limit_the_code_sets_is_removed_and_one_from_the_environment_refused():
    limited = Finding("thread_limited", "high", "held to 1 of 2", evidence={"intra_op_threads": 1})
    recorded = sites([BATCH], set_intra_op_parallelism_threads=[(5, {})])
    [edit] = plan([limited], recorded)
    assert isinstance(edit, Edit) and edit.site.line == 5 and edit.fix == "thread_pools"
    [refusal] = plan([limited], sites([BATCH]))
    assert isinstance(refusal, Refusal) and "environment variable" in refusal.why
