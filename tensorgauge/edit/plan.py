"""Which edits a run's findings call for, and where: one :class:`Edit` per code change (or a
:class:`Refusal` that says why not), from the findings, the input's stage costs and the recorded sites.
Pure: the sources are read and changed by :mod:`.patch`.

What an edit may do to the training (``numbers``): "equal" where it must not change a single loss
(prefetch, a parallel map that keeps its order, a cache of a deterministic stage), "close" where it may by
round-off (steps_per_execution, a compiled step instead of an eager one, a step built without XLA).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tensorgauge.edit import codemods
from tensorgauge.edit.compiled_step import compile_step
from tensorgauge.edit.sites import Pipeline, RecordedSites, Site
from tensorgauge.model import Finding
from tensorgauge.units import format_bytes

Numbers = Literal["equal", "close", "changes"]
CACHE_MEMORY_SHARE = 0.5  # a cache may hold at most this share of the machine's memory
CACHE_MIN_SAVED_SHARE = 0.2  # a cache before a random stage must save this share of the input's cost
# The method that makes each stage, by its dataset class; a class not here: any of the dataset calls.
STAGE_CALLS = {"_MapDataset": ("map",), "_ParallelMapDataset": ("map",), "_BatchDataset": ("batch",),
               "_ParallelBatchDataset": ("batch",), "_PaddedBatchDataset": ("padded_batch",),
               "_ShuffleDataset": ("shuffle",), "_RepeatDataset": ("repeat",), "_FilterDataset": ("filter",),
               "_TensorSliceDataset": ("from_tensor_slices",), "_TensorDataset": ("from_tensors",),
               "_PrefetchDataset": ("prefetch",), "CacheDataset": ("cache",), "_CacheDataset": ("cache",),
               "_TakeDataset": ("take",), "_UnbatchDataset": ("unbatch",), "_RangeDataset": ("range",),
               "_FlatMapDataset": ("flat_map", "from_generator"), "_ZipDataset": ("zip",),
               "_InterleaveDataset": ("interleave",), "_ParallelInterleaveDataset": ("interleave",)}
ANY_DATASET_CALL = tuple(sorted({n for names in STAGE_CALLS.values() for n in names} | {"list_files"}))


@dataclass
class Edit:
    finding: str  # the finding's id
    fix: str  # what it does, as a short name (prefetch, parallel_map, cache, steps_per_execution, ...)
    site: Site
    summary: str  # one line for the user
    numbers: Numbers
    change: Callable[[str, str], str]  # (the file's source, its name for tensorflow) -> the source edited
    note: str | None = None
    needs_tf: bool = False  # the edit names tensorflow: an import is added where the file has none
    steps_per_call: int = 1  # steps_per_execution=N: a step the tool times with it is N training steps
    pays_in: Literal["time", "memory"] = "time"  # what --verify judges it by: training time, or the memory peak


@dataclass
class Refusal:
    finding: str
    fix: str
    site: Site | None
    why: str


Planned = Edit | Refusal


def _autotuned(change: Callable[[str, str], str]) -> Callable[[str, str], str]:
    """A change given ``tf.data.AUTOTUNE`` in the name the file imports TensorFlow as."""
    return lambda source, tf: change(source, f"{tf}.data.AUTOTUNE")


def _plain(change: Callable[[str], str]) -> Callable[[str, str], str]:
    return lambda source, tf: change(source)


def _short(site: Site | None) -> str:
    return f"{site.path.rsplit('/', 1)[-1]}:{site.line}" if site else "?"


def _named(stage: dict) -> str:
    function = f" {stage['function']}" if stage.get("function") else ""
    return f"{stage.get('stage', '?')}{function} (made at {_short(Site.parse(stage.get('site')))})"


def _calls(stage: dict) -> tuple[str, ...]:
    """The method that made a stage, as the hook saw it called (else as its dataset class tells)."""
    return (stage["method"],) if stage.get("method") else STAGE_CALLS.get(str(stage.get("cls")), ANY_DATASET_CALL)


def _random(stage: dict) -> bool:
    return bool(stage.get("random")) or str(stage.get("stage", "")).startswith("Shuffle")


def _costliest(finding: Finding, stages: list[dict]) -> int | None:
    """The index of the stage the input's costliest was (by its name and function's place), else the last map."""
    named = finding.evidence.get("costliest_stage") or {}
    for i, stage in enumerate(stages):
        if named and stage.get("stage") == named.get("stage") and stage.get("location") == named.get("location"):
            return i
    maps = [i for i, s in enumerate(stages) if "Map" in str(s.get("stage"))]
    return maps[-1] if maps and not named else None


def _stage_shares(split: dict | None, stages: list[dict]) -> dict[int, float]:
    """Each pipeline stage's share of the input's cost, where the split timed it (matched in order)."""
    rows = list((split or {}).get("stages") or [])
    out: dict[int, float] = {}
    at = 0
    for i, stage in enumerate(stages):
        for j in range(at, len(rows)):
            if rows[j].get("stage") == stage.get("stage") and rows[j].get("location") == stage.get("location"):
                out[i] = float(rows[j].get("share") or 0.0)
                at = j + 1
                break
    return out


def shared_site(finding: Finding, stage: dict, fix: str) -> Refusal | str | None:
    """A stage made by a helper the job calls for more than one pipeline: a refusal where a library calls it
    too, else a note that the edit changes every pipeline it builds (None: one pipeline)."""
    callers = [c for c in stage.get("callers") or [] if c != "library"]
    site = Site.parse(stage.get("site"))
    if "library" in (stage.get("callers") or []):
        return Refusal(finding.id, fix, site, f"the helper that makes {_named(stage)} is called by a library too: "
                       "an edit there would change pipelines that are not the job's")
    if len(callers) > 1:
        where = ", ".join(_short(Site.parse(c)) for c in callers)
        return (f"the helper holding it builds {len(callers)} pipelines (called from {where}): the edit changes "
                "each of them")
    return None


def _shared_or(finding: Finding, stage: dict, fix: str, edit: Edit) -> Planned:
    shared = shared_site(finding, stage, fix)
    if isinstance(shared, Refusal):
        return shared
    if shared:
        edit.note = f"{edit.note}; {shared}" if edit.note else shared
    return edit


def prefetch_edit(finding: Finding, pipeline: Pipeline) -> Planned | None:
    stages = pipeline.stages
    if not stages or any(str(s.get("stage", "")).startswith("Prefetch") for s in stages[-2:]):
        return None  # the pipeline ends with a prefetch already (an Options stage may follow it)
    last = stages[-1]
    site = Site.parse(last.get("site"))
    names = _calls(last)
    if site is not None:
        return _shared_or(finding, last, "prefetch", Edit(
            finding.id, "prefetch", site, f".prefetch(tf.data.AUTOTUNE) after {_named(last)}, the pipeline's "
            "last stage: the next batch is made while the step computes", "equal",
            _autotuned(lambda src, auto: codemods.chain_after(src, site.line, names, "prefetch", auto)),
            needs_tf=True))
    if pipeline.site is not None and pipeline.consumer == "fit":
        fit = pipeline.site
        return Edit(finding.id, "prefetch", fit, f".prefetch(tf.data.AUTOTUNE) on the dataset given to fit "
                    f"({_short(fit)}): its last stage was made by a library", "equal",
                    _autotuned(lambda src, auto: codemods.chain_on_argument(src, fit.line, ("fit",), "prefetch",
                                                                            auto)), needs_tf=True)
    return Refusal(finding.id, "prefetch", None, "the pipeline's last stage was not made in the job's own code")


def parallel_edit(finding: Finding, stages: list[dict], costly: int | None) -> Planned | None:
    if costly is None:
        return None
    stage = stages[costly]
    if stage.get("cls") != "_MapDataset" or stage.get("parallel"):
        return None
    site = Site.parse(stage.get("site"))
    if site is None:
        return Refusal(finding.id, "parallel_map", None, f"{_named(stage)} was made by a library, not the job's code")
    note = ("it calls Python, which holds the GIL: parallel calls may help little (--verify times it)"
            if stage.get("python") else None)
    return _shared_or(finding, stage, "parallel_map", Edit(
        finding.id, "parallel_map", site, f"num_parallel_calls=tf.data.AUTOTUNE on {_named(stage)}, the costliest "
        "stage, which runs on one thread (its order kept)", "equal",
        _autotuned(lambda src, auto: codemods.set_keyword(src, site.line, ("map",), "num_parallel_calls", auto)),
        note, needs_tf=True))


def cache_edit(finding: Finding, stages: list[dict], costly: int | None, split: dict | None,
               memory_bytes: int | None) -> Planned | None:
    if costly is None:
        return None
    if any(str(s.get("stage", "")).startswith("Cache") for s in stages[costly + 1:]):
        return None  # cached after it already
    randoms = [i for i, s in enumerate(stages) if _random(s)]
    first_random = randoms[0] if randoms else len(stages)
    target, note = costly, None
    if first_random <= costly:
        shares = _stage_shares(split, stages)
        before = [i for i in range(first_random) if Site.parse(stages[i].get("site")) and i in shares]
        saved = sum(shares[i] for i in range(first_random) if i in shares)
        random_stage = stages[first_random]
        if not before or saved < CACHE_MIN_SAVED_SHARE:
            return Refusal(finding.id, "cache", Site.parse(stages[costly].get("site")),
                           f"the costliest stage, {_named(stages[costly])}, comes after the random "
                           f"{_named(random_stage)}: a cache after it would repeat the first epoch's random draws "
                           f"every epoch; the stages before the random one cost {saved:.0%} of the input "
                           "(cache the deterministic work before the random stage, reordering the pipeline)")
        target = before[-1]
        note = (f"before the random {_named(random_stage)}, which still draws anew each epoch; it saves the "
                f"{saved:.0%} of the input's cost the stages before it take")
    stage = stages[target]
    site = Site.parse(stage.get("site"))
    made_in = Site.parse(stage.get("made_in"))
    if site is None and made_in is not None:  # made by a library function the job called: cache what it returns
        target = max(i for i in range(target, len(stages)) if stages[i].get("made_in") == stage.get("made_in")
                     and not any(_random(s) for s in stages[target:i + 1])) if not _random(stage) else target
        stage, site = stages[target], made_in
    if site is None:
        return Refusal(finding.id, "cache", None, f"{_named(stage)} was made by a library, not the job's code")
    elements, size = stage.get("elements"), stage.get("element_bytes")
    if isinstance(elements, int) and elements == -1:
        return Refusal(finding.id, "cache", site, f"{_named(stage)} is infinite (a repeat() before it): its cache "
                       "would never be complete")
    if isinstance(elements, int) and elements > 0 and size and memory_bytes:
        holds = elements * int(size)
        if holds > CACHE_MEMORY_SHARE * memory_bytes:
            return Refusal(finding.id, "cache", site, f"a cache after {_named(stage)} would hold {format_bytes(holds)}"
                           f" ({elements} elements of {format_bytes(int(size))}), over half of the machine's "
                           f"{format_bytes(memory_bytes)}")
    if stage.get("python"):
        caution = "it calls Python, which tensorgauge cannot check is deterministic: --verify compares the losses"
        note = f"{note}; {caution}" if note else caution
    held = f", holding {format_bytes(elements * int(size))}" if isinstance(elements, int) and elements > 0 and size \
        else ""
    names = _calls(stage)
    what = _named(stage)
    if stage.get("made_by") and not stage.get("site"):
        names, what = (str(stage["made_by"]),), f"the dataset {stage['made_by']}() returns ({_short(site)})"
    return _shared_or(finding, stage, "cache", Edit(
        finding.id, "cache", site, f".cache() after {what}: every epoch after the first reads its "
        f"results{held}", "equal", _plain(lambda src: codemods.chain_after(src, site.line, names, "cache")), note))


def input_edits(finding: Finding, sites: RecordedSites, split: dict | None, memory_bytes: int | None) -> list[Planned]:
    pipelines = [p for p in sites.pipelines if p.stages]
    if not pipelines:
        fits = sites.calls.get("fit", [])
        if fits:
            site, data = fits[0]
            return [Refusal(finding.id, "input", site, f"fit is given {data.get('input', 'arrays')} at {_short(site)}, "
                            "not a tf.data pipeline: rebuilding the input as one is a change tensorgauge does not "
                            "write")]
        return [Refusal(finding.id, "input", None, "the run recorded no pipeline the job's code built")]
    pipeline = next((p for p in pipelines if p.consumer == "fit"), pipelines[0])
    stages = pipeline.stages
    costly = _costliest(finding, stages)
    planned = [cache_edit(finding, stages, costly, split, memory_bytes), parallel_edit(finding, stages, costly),
               prefetch_edit(finding, pipeline)]
    return [p for p in planned if p is not None]


def _compile_site(finding: Finding, sites: RecordedSites, fix: str, given: str | None = None) -> Site | Refusal:
    compiles = sites.compile_for(sites.fit_model())
    if given is not None:
        compiles = [c for c in compiles if given in (c[1].get("given") or [])] or compiles
    distinct = sorted({site for site, _ in compiles}, key=str)
    if not distinct:
        return Refusal(finding.id, fix, None, "the run recorded no compile() call in the job's code")
    if len(distinct) > 1:
        return Refusal(finding.id, fix, None, "compile() is called at " + ", ".join(map(_short, distinct)) +
                       ": which one compiles the fit's model is not known")
    return distinct[0]


def small_batch_edits(finding: Finding, sites: RecordedSites) -> list[Planned]:
    if int(finding.evidence.get("steps_per_execution") or 1) > 1 or sites.pipelines and all(
            p.consumer == "loop" for p in sites.pipelines):
        return []
    n = int(finding.evidence.get("trial_steps_per_execution") or 32)
    site = _compile_site(finding, sites, "steps_per_execution")
    if isinstance(site, Refusal):
        return [site]
    return [Edit(finding.id, "steps_per_execution", site, f"compile(..., steps_per_execution={n}): fit dispatches "
                 f"{n} steps per call from Python", "close",
                 _plain(lambda src: codemods.set_keyword(src, site.line, ("compile",), "steps_per_execution", str(n))),
                 steps_per_call=n)]


def _remove_compile_flag(finding: Finding, sites: RecordedSites, flag: str, fix: str, summary: str) -> list[Planned]:
    site = _compile_site(finding, sites, fix, given=flag)
    if isinstance(site, Refusal):
        return [site]
    compiles = [c for c in sites.compile_for(sites.fit_model()) if c[0] == site]
    if compiles and flag not in (compiles[0][1].get("given") or []):
        return [Refusal(finding.id, fix, site, f"compile() at {_short(site)} is not given {flag}=: it is set "
                        f"elsewhere (model.{flag} = ...), which tensorgauge does not edit")]
    return [Edit(finding.id, fix, site, summary, "close",
                 _plain(lambda src: codemods.remove_keyword(src, site.line, ("compile",), flag, only="True")))]


def eager_edits(finding: Finding, sites: RecordedSites) -> list[Planned]:
    if finding.evidence.get("run_eagerly"):
        return _remove_compile_flag(finding, sites, "run_eagerly", "no_run_eagerly",
                                    "run_eagerly=True removed from compile(): fit runs a compiled graph")
    if finding.evidence.get("functions_run_eagerly"):
        return [Refusal(finding.id, "no_run_eagerly", None, "tf.config.run_functions_eagerly(True) is called: "
                        "remove that call (its site is not recorded)")]
    gradients = sites.sites("gradient")
    if not gradients:
        return [Refusal(finding.id, "tf_function", None, "the run recorded no eager GradientTape.gradient call site")]
    site = gradients[0]
    return [Edit(finding.id, "tf_function", site, f"@tf.function on the training step that calls "
                 f"tape.gradient at {_short(site)} (moved into a function where the loop holds it): each step "
                 "runs as one compiled graph", "close",
                 lambda src, tf: compile_step(src, site.line, tf), needs_tf=True)]


def xla_edits(finding: Finding, sites: RecordedSites) -> list[Planned]:
    return _remove_compile_flag(finding, sites, "jit_compile", "no_jit",
                                "jit_compile=True removed from compile(): on a CPU the step is built without XLA")


def retracing_edits(finding: Finding, sites: RecordedSites) -> list[Planned]:
    traces = finding.evidence.get("traces") or {}
    if not traces:
        return []
    if int(finding.evidence.get("instances") or 0) > sum(traces.values()) // 2:
        return [Refusal(finding.id, "reduce_retracing", None, "each trace is a new tf.function: create it once, "
                        "outside the loop that makes it (a move tensorgauge does not make)")]
    named = next(iter(traces))
    function, _, where = named.rpartition(" (")
    base, _, line = where.rstrip(")").rpartition(":")
    paths = sorted({p for p in sites.files if p.rsplit("/", 1)[-1] == base})
    if len(paths) != 1 or not line.isdigit():
        return [Refusal(finding.id, "reduce_retracing", None, f"the file of {named} is not among the files the "
                        "run recorded" if not paths else f"{base} names {len(paths)} recorded files")]
    site = Site(paths[0], int(line))
    return [Edit(finding.id, "reduce_retracing", site, f"@tf.function(reduce_retracing=True) on {function} "
                 f"({_short(site)}): shapes that vary are traced once as a general signature", "equal",
                 lambda src, tf: codemods.set_decorator_keyword(src, site.line, (f"{tf}.function",),
                                                                "reduce_retracing", "True"))]


def clear_session_edits(finding: Finding, sites: RecordedSites) -> list[Planned]:
    """``clear_session()`` first in the loop that builds the models: the outermost user frame of a model's
    construction that is in a loop (the construction itself, or the call of the helper that builds it)."""
    stacks = [data.get("stack") or [] for _, data in sites.calls.get("model", [])]
    frames = list(dict.fromkeys(Site.parse(f) for stack in stacks for f in reversed(stack)))
    if not frames:
        return [Refusal(finding.id, "clear_session", None, "the run recorded no site where the models are built")]
    site = next(f for f in frames if f is not None)

    def change(source: str, tf: str) -> str:
        keras = codemods.module_alias(source, "keras")
        call = f"{keras}.backend.clear_session()" if keras else f"{tf}.keras.backend.clear_session()"
        return codemods.first_in_loop(source, site.line, call)

    return [Edit(finding.id, "clear_session", site, f"keras.backend.clear_session() first in the loop that builds "
                 f"the models ({_short(site)}): each model's graph and state is let go before the next", "equal",
                 change, needs_tf=True, pays_in="memory")]


THREAD_SETTERS = {"intra_op_threads": "set_intra_op_parallelism_threads",
                  "inter_op_threads": "set_inter_op_parallelism_threads"}


def _removing(line: int, name: str) -> Callable[[str, str], str]:
    return lambda source, tf: codemods.remove_call_statement(source, line, (name,))


def thread_edits(finding: Finding, sites: RecordedSites) -> list[Planned]:
    """The ``tf.config.threading`` call that holds TensorFlow below the CPUs allowed, removed; a limit set by the
    environment or the affinity mask is not the code's."""
    out: list[Planned] = []
    for limit, setter in THREAD_SETTERS.items():
        if limit not in finding.evidence:
            continue
        for site in dict.fromkeys(sites.sites(setter)):
            out.append(Edit(finding.id, "thread_pools", site, f"tf.config.threading.{setter}(...) removed "
                            f"({_short(site)}): TensorFlow sizes its pool to the CPUs allowed", "close",
                            _removing(site.line, setter)))
    if not out:
        out.append(Refusal(finding.id, "thread_pools", None, "the limit is not set by a tf.config.threading call in "
                           "the job's code (an environment variable or the affinity mask): unset it where the job "
                           "is started"))
    return out


def predict_edits(finding: Finding, sites: RecordedSites) -> list[Planned]:
    predicts = sites.sites("predict")
    if len(set(predicts)) != 1:
        return [Refusal(finding.id, "direct_call", None, "predict() is called at " + (
            ", ".join(map(_short, sorted(set(predicts), key=str))) or "no recorded place") +
            ": which one is in the loop is not known")]
    site = predicts[0]
    return [Edit(finding.id, "direct_call", site, f"model(x, training=False) in place of model.predict(x) at "
                 f"{_short(site)}: one call without predict's per-call set-up", "equal",
                 _plain(lambda src: codemods.predict_to_call(src, site.line)))]


def loader_edits(finding: Finding, sites: RecordedSites, cores: int) -> list[Planned]:
    loaders = [(s, d) for s, d in sites.calls.get("dataloader", []) if not d.get("num_workers")]
    if not loaders:
        return []
    site = loaders[0][0]
    workers = max(1, min(cores, 8))
    return [Edit(finding.id, "loader_workers", site, f"DataLoader(num_workers={workers}, persistent_workers=True) "
                 f"at {_short(site)}: batches are made in {workers} worker processes, kept across epochs", "equal",
                 _plain(lambda src: codemods.set_keyword(
                     codemods.set_keyword(src, site.line, ("DataLoader",), "num_workers", str(workers)),
                     site.line, ("DataLoader",), "persistent_workers", "True")))]


def plan(findings: list[Finding], sites: RecordedSites, split: dict | None = None, memory_bytes: int | None = None,
         cores: int = 1) -> list[Planned]:
    """The edits (and refusals) for every finding whose fix is a code change."""
    out: list[Planned] = []
    for finding in findings:
        if finding.id == "input_bound":
            if sites.calls.get("dataloader"):
                out += loader_edits(finding, sites, cores)
            else:
                out += input_edits(finding, sites, split, memory_bytes)
        elif finding.id == "small_batch":
            out += small_batch_edits(finding, sites)
        elif finding.id == "eager_execution":
            out += eager_edits(finding, sites)
        elif finding.id == "xla_on_cpu":
            out += xla_edits(finding, sites)
        elif finding.id == "predict_in_loop":
            out += predict_edits(finding, sites)
        elif finding.id == "retracing":
            out += retracing_edits(finding, sites)
        elif finding.id == "models_not_cleared":
            out += clear_session_edits(finding, sites)
        elif finding.id == "thread_limited":
            out += thread_edits(finding, sites)
    return out


CODE_FINDINGS = ("input_bound", "small_batch", "eager_execution", "xla_on_cpu", "predict_in_loop", "retracing",
                 "models_not_cleared", "thread_limited")
