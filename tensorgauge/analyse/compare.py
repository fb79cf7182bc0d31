"""Two runs side by side: what differs in their environments, what differs in their
results (benchmarks or phases), and which environment difference plausibly
causes which result difference, ranked by the size of the effect (pure).

A result's ``slowdown`` is how many times longer B took than A for the same
work (throughput A / throughput B; seconds B / seconds A): 2.0 means B is
twice as slow, 0.5 twice as fast.

A side that did not complete (:mod:`.ending`) is said first, with where it ended; a phase it cut
is compared by its steps alone (its wall, CPU time and memory are those of a part).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from tensorgauge.analyse.bench import bench_results
from tensorgauge.analyse.ending import Ending, ending
from tensorgauge.analyse.job_changes import format_value, job_changes
from tensorgauge.analyse.placement import gpus_seen
from tensorgauge.hook.protocol import FitConfig
from tensorgauge.model import payloads

SIGNIFICANT = 1.10  # a result that changed by 10% or more (either way) needs an explanation
COMPUTE = ("numpy", "tf_ops", "keras", "tf_data", "fit", "evaluate", "predict")
TENSORFLOW = ("tf_ops", "keras", "tf_data", "fit", "evaluate", "predict", "save", "load", "io", "import")


@dataclass
class Side:
    """One run to compare: its record and analysed report."""

    label: str
    report: Any  # RunReport

    @property
    def host(self) -> dict:
        return self.report.record.env.get("host") or {}

    @property
    def job(self) -> dict:
        return self.report.record.env.get("job") or {}


@dataclass
class Cause:
    id: str
    label: str
    read: Callable[[Side], Any]
    affects: tuple[str, ...]  # benchmark groups and phase kinds
    why: str  # how it acts, in plain words


def _env_var(side: Side, name: str):
    return (side.host.get("env_vars") or {}).get(name) or (side.job.get("thread_env") or {}).get(name)


def _onednn(side: Side) -> str | None:
    """oneDNN as TensorFlow reported it, and the setting: 'off (TF_ENABLE_ONEDNN_OPTS=0)'."""
    on, flag = side.job.get("onednn_enabled"), _env_var(side, "TF_ENABLE_ONEDNN_OPTS")
    if on is None and flag is None:
        return None
    state = "unknown" if on is None else "on" if on else "off"
    return f"{state} (TF_ENABLE_ONEDNN_OPTS={'unset' if flag is None else flag})"


def _blas(side: Side):
    """The BLAS libraries and versions (their thread counts follow the CPUs allowed and OMP_NUM_THREADS)."""
    pools = side.job.get("blas") or []
    return ", ".join(sorted({f"{p.get('internal_api')} {p.get('version')}" for p in pools if isinstance(p, dict)})) \
        or None


def _backend(side: Side):
    """Keras' backend and its version (runs recorded before 0.2 carry neither)."""
    backend = side.job.get("keras_backend")
    return f"{backend} {side.job.get('backend_version') or ''}".strip() if backend else None


def _step_compile(side: Side) -> str | None:
    """How the first fit's (or custom loop's) step runs, in the words of its backend."""
    config = next(iter(payloads(side.report.events, FitConfig)), None)
    if config is None:
        return None
    if config.get("loop"):
        return "eager loop" if config.get("eager") else "tf.function loop"
    backend = config.get("backend") or "tensorflow"
    eager, jit = config.get("run_eagerly") or config.get("functions_run_eagerly"), config.get("jit_compile") == "True"
    if backend == "jax":
        return "eager (JAX ops one by one)" if eager or not jit else "jax.jit (XLA)"
    if backend == "torch":
        return "torch.compile" if jit and not eager else "eager (PyTorch)"
    return "eager (run_eagerly)" if eager else "tf.function graph, XLA" if jit else "tf.function graph"


def _input_path(side: Side) -> str | None:
    """How batches reach the step: tf.data inside TensorFlow's compiled step, or Keras' Python iterator
    converting them for JAX or PyTorch (measured as the steps' input wait)."""
    backend = side.job.get("keras_backend")
    if backend is None:
        return None
    if backend == "tensorflow":
        return "tf.data, inside the compiled step"
    return f"Keras' Python iterator, converted to {backend} tensors"


CAUSES = [
    Cause("cpus", "CPUs allowed", lambda s: s.host.get("cores_allowed"), COMPUTE,
          "parallel kernels (matmul, convolutions, BLAS) spread over the CPUs the job may use"),
    Cause("onednn", "oneDNN (TF_ENABLE_ONEDNN_OPTS)", _onednn, ("tf_ops", "keras", "fit", "evaluate", "predict"),
          "oneDNN's fused, vectorised CPU kernels for matmul and convolutions"),
    Cause("cpu_model", "CPU model", lambda s: s.host.get("cpu_model"), COMPUTE,
          "per-core speed, cache sizes and memory bandwidth"),
    Cause("cpu_flags", "CPU instruction sets", lambda s: tuple(s.host.get("cpu_flags") or ()) or None,
          ("numpy", "tf_ops", "keras", "fit", "evaluate", "predict"),
          "wider vector units (AVX-512, AMX) run more floating-point work per cycle"),
    Cause("tensorflow", "TensorFlow version", lambda s: s.job.get("tensorflow_version"), TENSORFLOW,
          "kernels, graph optimisations and defaults change between releases"),
    Cause("backend", "Keras backend", _backend,
          ("import", "keras", "fit", "epoch", "evaluate", "predict", "save", "load", "compile", "input", "memory"),
          "the framework that runs the model: how it compiles the step (TensorFlow graphs, XLA on JAX, eager "
          "PyTorch), its kernels, and the conversion of NumPy or tf.data batches into its tensors"),
    Cause("keras", "Keras version", lambda s: s.job.get("keras_version"), ("keras", "fit", "evaluate", "predict"),
          "the training loop and its defaults"),
    Cause("cuda", "CUDA / cuDNN build",
          lambda s: tuple(str((s.job.get("tf_build") or {}).get(k)) for k in ("cuda_version", "cudnn_version"))
          if s.job.get("tf_build") else None, TENSORFLOW, "which GPU kernels TensorFlow can use"),
    Cause("gpu", "GPUs", lambda s: tuple(s.host.get("gpus") or ()) or None, TENSORFLOW,
          "whether and on what the TensorFlow work runs off the CPU"),
    Cause("gpus_visible", "GPUs visible to the job's framework", lambda s: gpus_seen(s.job), TENSORFLOW,
          "a GPU the framework (TensorFlow, JAX, PyTorch) cannot see does no work"),
    Cause("compile", "how the step runs (jit_compile, run_eagerly)", _step_compile,
          ("keras", "fit", "epoch", "evaluate", "predict", "compile"),
          "the cost of the first step (tracing, compiling: XLA, torch.compile) against the speed of every later "
          "one; an eager step dispatches each op from Python"),
    Cause("input", "how batches reach the step", _input_path, ("input",),
          "the per-step cost of making each batch and converting it (NumPy or tf.data) into the backend's tensors"),
    Cause("tf_threads", "TensorFlow thread pools",
          lambda s: (s.job.get("intra_op_threads"), s.job.get("inter_op_threads"),
                     _env_var(s, "TF_NUM_INTRAOP_THREADS"), _env_var(s, "TF_NUM_INTEROP_THREADS"))
          if s.job and s.job.get("keras_backend") in (None, "tensorflow") else None,  # they run TensorFlow's steps
          ("tf_ops", "keras", "tf_data", "fit", "evaluate", "predict"),
          "the number of threads each op and the graph may use"),
    Cause("omp", "OMP_NUM_THREADS", lambda s: _env_var(s, "OMP_NUM_THREADS"), ("numpy",),
          "numpy's BLAS threads"),
    Cause("blas", "numpy's BLAS", _blas, ("numpy",), "the library behind numpy's matmul"),
    Cause("numpy", "numpy version", lambda s: s.job.get("numpy_version"), ("numpy",), "numpy itself"),
    Cause("python", "Python version", lambda s: s.job.get("python") or s.host.get("monitor_python"),
          ("import", "keras", "fit"), "the interpreter running the Python loop"),
    Cause("memory", "memory (RAM, cgroup limit)",
          lambda s: (s.host.get("ram_bytes"), s.host.get("cgroup_memory_limit_bytes")), (),
          "memory only matters when a job nears the limit (swapping, OOM)"),
    Cause("cpu_quota", "cgroup CPU quota", lambda s: s.host.get("cgroup_cpu_quota_cores"), COMPUTE,
          "a quota throttles the job when it uses more cores than the quota"),
]


@dataclass
class Result:
    name: str
    kind: str  # "bench" or "phase"
    group: str  # benchmark group or phase kind
    a: float
    b: float
    unit: str
    slowdown: float
    measure: str = "wall"  # of a phase: wall, step p50, first step, input per step, compute per step, CPU, RSS peak

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "group": self.group, "measure": self.measure, "a": self.a, "b": self.b,
                "unit": self.unit, "slowdown": float(f"{self.slowdown:.4g}")}  # 0.011 would read 91x for 89x


@dataclass
class Comparison:
    a: Side
    b: Side
    environment: list[dict] = field(default_factory=list)  # {cause, label, a, b}
    results: list[Result] = field(default_factory=list)
    explanations: list[dict] = field(default_factory=list)
    unexplained: list[Result] = field(default_factory=list)
    job_changes: list[str] = field(default_factory=list)  # what changed in the job itself (as check names it)
    largest: Result | None = None  # the phase whose wall time changed most (significantly), in seconds
    endings: tuple[Ending, Ending] | None = None  # how A and B ended

    @property
    def cut(self) -> list[str]:
        """A line for each side that did not complete: 'B was killed by signal 15 (SIGTERM) in 'epoch 2'...'."""
        out = []
        for name, ended in zip(("A", "B"), self.endings or ()):
            if not ended.completed:
                cut = ": the phases it cut are compared by their steps alone" if ended.where else ""
                out.append(f"{name} {ended.describe()}{cut}.")
        return out

    @property
    def headline(self) -> str | None:
        """Where the two runs differ most, in one line."""
        r = self.largest
        if r is None:
            return None
        return (f"They differ most in {r.name}: B is {format_slowdown(r.slowdown, r.unit)} "
                f"({format_figure(r.a, r.unit)} -> {format_figure(r.b, r.unit)}).")

    def to_dict(self) -> dict:
        def side(s: Side, ended: Ending | None) -> dict:
            r = s.report.record
            return {"label": s.label, "run_id": r.run_id, "name": r.name, "started_at": r.started_at,
                    "hostname": s.host.get("hostname"), "ending": ended.to_dict() if ended else None}

        ended_a, ended_b = self.endings or (None, None)
        return {"schema": "tensorgauge.compare/1", "a": side(self.a, ended_a), "b": side(self.b, ended_b),
                "cut": self.cut,
                "environment": self.environment, "results": [r.to_dict() for r in self.results],
                "explanations": self.explanations, "unexplained": [r.to_dict() for r in self.unexplained],
                "job_changes": self.job_changes,
                "largest": self.largest.to_dict() if self.largest else None, "headline": self.headline}


def reasons(doc: dict) -> list[str]:
    """A comparison's (``to_dict``) explanations, most likely first: what changed in the job itself (the
    most direct cause, as ``check`` names it), then the environment differences with a measured effect."""
    return ([f"The job changed: {c}." for c in doc.get("job_changes") or []]
            + [e["text"] for e in doc["explanations"] if e["affected"]])


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def environment_differences(a: Side, b: Side) -> list[dict]:
    found = []
    for cause in CAUSES:
        va, vb = cause.read(a), cause.read(b)
        if va != vb and not (va is None or vb is None):
            found.append({"cause": cause.id, "label": cause.label, "a": _plain(va), "b": _plain(vb)})
    return found


def _bench_results(a: Side, b: Side) -> list[Result]:
    ra = bench_results(a.report.events, a.report.phases)
    rb = bench_results(b.report.events, b.report.phases)
    out = []
    for name, x in ra.items():
        y = rb.get(name)
        if not y or not _positive(x.get("value")) or not _positive(y.get("value")):
            continue
        slowdown = x["value"] / y["value"] if x.get("higher_is_better") else y["value"] / x["value"]
        out.append(Result(name, "bench", str(x.get("group")), x["value"], y["value"], str(x.get("unit")), slowdown,
                          "value"))
    return out


def _positive(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and math.isfinite(value)


def _input_wait(side: Side) -> float | None:
    split = side.report.input_split or {}
    return split.get("input_wait_seconds") if split.get("measured") else None


MODEL_CALLS = ("fit", "evaluate", "predict")
AMOUNTS = ("CPU-s", "bytes")  # results that are amounts used, not speeds: B uses more or less
MIN_CPU_SECONDS = 0.05  # a phase's CPU time worth comparing
INPUT_RESULT, COMPUTE_RESULT = "fit input per step", "fit compute per step"
WHOLE_PHASE = ("CPU", "RSS peak")  # a call's measures of the whole phase: not those of a cut one


def _call_results(p, q, a: Side, b: Side) -> list[Result]:
    """A fit, evaluate or predict against its match: the first step (trace, compile), the steady step,
    for the main fit its input wait and compute per step, CPU time and memory."""
    out = []
    first_a, first_b = p.step_seconds_first, q.step_seconds_first
    if _positive(first_a) and _positive(first_b):
        out.append(Result(f"{p.name} first step (trace, compile)", "phase", "compile", round(first_a, 6),
                          round(first_b, 6), "s", first_b / first_a, "first step"))
    # The steady step apart from the phase's wall (which holds start-up: tracing, compiling).
    if _positive(p.step_seconds_p50) and _positive(q.step_seconds_p50):
        out.append(Result(f"{p.name} step p50", "phase", p.kind, round(p.step_seconds_p50, 6),
                          round(q.step_seconds_p50, 6), "s", q.step_seconds_p50 / p.step_seconds_p50, "step p50"))
        wait_a, wait_b = _input_wait(a), _input_wait(b)
        if p.kind == "fit" and _positive(wait_a) and _positive(wait_b):
            out.append(Result(INPUT_RESULT, "phase", "input", round(wait_a, 7), round(wait_b, 7), "s",
                              wait_b / wait_a, "input per step"))
            compute_a, compute_b = p.step_seconds_p50 - wait_a, q.step_seconds_p50 - wait_b
            if _positive(compute_a) and _positive(compute_b):
                out.append(Result(COMPUTE_RESULT, "phase", "fit", round(compute_a, 7), round(compute_b, 7),
                                  "s", compute_b / compute_a, "compute per step"))
    if p.cpu_seconds >= MIN_CPU_SECONDS and q.cpu_seconds >= MIN_CPU_SECONDS:
        out.append(Result(f"{p.name} CPU", "phase", p.kind, round(p.cpu_seconds, 3), round(q.cpu_seconds, 3),
                          "CPU-s", q.cpu_seconds / p.cpu_seconds, "CPU"))
    if p.rss_peak_bytes and q.rss_peak_bytes and _same_memory_measure(a, b):
        out.append(Result(f"{p.name} RSS peak", "phase", "memory", p.rss_peak_bytes, q.rss_peak_bytes, "bytes",
                          q.rss_peak_bytes / p.rss_peak_bytes, "RSS peak"))
    return out


def _same_memory_measure(a: Side, b: Side) -> bool:
    """Both runs' RSS counts shared pages alike (an older run summed each process's)."""
    return bool(a.report.summary.rss_peak_measure == b.report.summary.rss_peak_measure)


def _phase_results(a: Side, b: Side) -> list[Result]:
    """Phases matched by name (the first of each name), compared by wall time; Keras' calls also
    by their steps, CPU time and memory. A phase cut on either side (the job ended inside it) only by
    its steps."""
    first_b: dict = {}
    for p in b.report.phases:
        first_b.setdefault(p.name, p)
    out, seen = [], set()
    for p in a.report.phases:
        q = first_b.get(p.name)
        if p.name in seen or q is None or p.name.startswith("bench "):
            continue
        seen.add(p.name)
        whole = p.complete and q.complete
        if whole and p.wall_seconds >= 0.05 and q.wall_seconds > 0:
            out.append(Result(p.name, "phase", p.kind, round(p.wall_seconds, 4), round(q.wall_seconds, 4), "s",
                              q.wall_seconds / p.wall_seconds))
        if p.kind in MODEL_CALLS and p.parent is None:
            out += [r for r in _call_results(p, q, a, b) if whole or r.measure not in WHOLE_PHASE]
    return out


def _significant(r: Result) -> bool:
    return r.slowdown >= SIGNIFICANT or r.slowdown <= 1 / SIGNIFICANT


def _describe(cause: Cause, diff: dict, affected: list[Result]) -> str:
    figures = "; ".join(f"{r.name} {format_slowdown(r.slowdown, r.unit)}" for r in affected[:12])
    more = f" and {len(affected) - 12} more" if len(affected) > 12 else ""
    text = f"{cause.label}: {format_value(diff['a'])} -> {format_value(diff['b'])}. It governs {cause.why}."
    if affected:
        text += f" Affected: {figures}{more}."
    if cause.id == "onednn" and str(diff["a"]).split()[0] == str(diff["b"]).split()[0]:
        text += (f" TensorFlow reported oneDNN {str(diff['a']).split()[0]} in both runs (by default it is on only "
                 "for CPUs with AVX-512 VNNI/BF16 or AMX), so the setting likely changed nothing here; the figures "
                 "are shared with the other causes.")
    split = {r.name: r for r in affected if r.name in (INPUT_RESULT, COMPUTE_RESULT)}
    if cause.id == "backend" and len(split) == 2:
        i, c = split[INPUT_RESULT], split[COMPUTE_RESULT]
        text += (f" Of fit's step, the input (making each batch and converting it) took {format_figure(i.a, 's')} "
                 f"-> {format_figure(i.b, 's')} and the compute {format_figure(c.a, 's')} -> "
                 f"{format_figure(c.b, 's')} (measured).")
    if cause.id == "cpus" and _positive(diff["a"]) and _positive(diff["b"]):
        text += f" Work that scales with cores can change by up to {max(diff['a'], diff['b']) / min(diff['a'], diff['b']):.1f}x."
    return text


def format_figure(value: float, unit: str) -> str:
    from tensorgauge.units import format_bytes, format_seconds

    if unit == "s":
        return format_seconds(value)
    return format_bytes(int(value)) if unit == "bytes" else f"{value:,.2f} {unit}"


def format_slowdown(slowdown: float, unit: str = "s") -> str:
    """B against A: 'slower'/'faster' for times and rates, 'more'/'less' for CPU time and memory."""
    if round(slowdown, 2) == 1.0:
        return "the same"
    more, less = ("more", "less") if unit in AMOUNTS else ("slower", "faster")
    return f"{slowdown:.2f}x {more}" if slowdown > 1 else f"{1 / slowdown:.2f}x {less}"


def _input_effect(results: list[Result], score: float) -> float:
    """What the input's change alone does to fit's step (a 15x slower input of 0.1 ms barely moves a
    20 ms step): |log((step_a + input_b - input_a) / step_a)|."""
    by_name = {r.name: r for r in results}
    step, wait = by_name.get("fit step p50"), by_name.get(INPUT_RESULT)
    if step is None or wait is None or step.a <= 0:
        return score
    return abs(math.log(max(step.a + wait.b - wait.a, 1e-9) / step.a))


def compare(a: Side, b: Side) -> Comparison:
    """Environment differences, result differences and ranked explanations of B against A."""
    result = Comparison(a, b, environment_differences(a, b), job_changes=job_changes(a, b),
                        endings=(ending(a.report.record, a.report.phases), ending(b.report.record, b.report.phases)))
    bench = _bench_results(a, b)
    # Two bench runs: the benchmarks are the results; their inner fit/save phases would repeat them.
    result.results = bench + [r for r in _phase_results(a, b) if not bench or r.group == "import"]
    changed = [r for r in result.results if _significant(r)]
    causes = {c.id: c for c in CAUSES}
    explained: set[str] = set()
    for diff in result.environment:
        cause = causes[diff["cause"]]
        affected = sorted((r for r in changed if r.group in cause.affects),
                          key=lambda r: -abs(math.log(r.slowdown)))
        explained.update(r.name for r in affected)
        score = max((abs(math.log(r.slowdown)) for r in affected), default=0.0)
        if cause.id == "onednn" and str(diff["a"]).split()[0] == str(diff["b"]).split()[0]:
            score /= 2  # only the setting differs, not the state TensorFlow reported
        if cause.id == "input":
            score = _input_effect(result.results, score)
        result.explanations.append({"cause": cause.id, "label": cause.label, "a": diff["a"], "b": diff["b"],
                                    "score": round(score, 4), "affected": [r.to_dict() for r in affected],
                                    "text": _describe(cause, diff, affected)})
    result.explanations.sort(key=lambda e: (-e["score"], -len(e["affected"])))
    result.unexplained = [r for r in changed if r.name not in explained]
    # The phase that gained or lost the most time (a 44x slower first step of 0.3 s matters less than a
    # fit 1.5 minutes longer); its per-step figures are in the results and the causes.
    walls = [r for r in changed if r.kind == "phase" and r.measure == "wall"]
    result.largest = max(walls, key=lambda r: abs(r.b - r.a), default=None)
    return result
