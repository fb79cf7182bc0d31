"""Portable bundles: one run in a versioned JSON file (a ``bench`` run carries its
results as ``bench_result`` events).

A bundle is data only: it is parsed with :func:`json.loads` (no NaN or
Infinity), checked field by field against the schema below, and its run is
analysed once before it is accepted, so a bundle that imports is one that
``show``, ``compare`` and ``report`` can read. Nothing in it is ever executed.

    {"schema": "tensorgauge.bundle/1", "tensorgauge_version": str, "created_at": str,
     "run": {RunRecord fields}, "samples": [{Sample fields}], "events": [{"t", "pid", "kind", "data"}]}
"""

from __future__ import annotations

import datetime
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorgauge import __version__
from tensorgauge.errors import TensorgaugeError
from tensorgauge.model import Event, RunRecord, Sample

SCHEMA = "tensorgauge.bundle/1"
MAX_BYTES = 512 << 20
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
NUMBER, OPT_NUMBER, TEXT, OPT_TEXT = "number", "number?", "text", "text?"


class BundleError(TensorgaugeError):
    """A bundle that cannot be read: truncated, not a bundle, another schema, damaged."""


@dataclass
class Bundle:
    record: RunRecord
    samples: list[Sample]
    events: list[Event]

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "tensorgauge_version": __version__,
                "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "run": self.record.to_dict(), "samples": [s.to_dict() for s in self.samples],
                "events": [e.to_dict() for e in self.events]}

    def write(self, path: str | Path) -> None:
        try:
            Path(path).write_text(json.dumps(self.to_dict()) + "\n")
        except OSError as exc:
            raise TensorgaugeError(f"cannot write {path}: {exc.strerror}") from None


RECORD_FIELDS = {"run_id": TEXT, "command": "texts", "started_at": TEXT, "name": OPT_TEXT, "cwd": OPT_TEXT,
                 "interval_seconds": NUMBER, "t0_monotonic": OPT_NUMBER, "tree_source": OPT_TEXT,
                 "wall_seconds": OPT_NUMBER, "exit_code": "int?", "signal": "int?", "oom_killed": "bool",
                 "complete": "bool", "env": "object", "budget": "object?", "cpu_seconds_total": OPT_NUMBER,
                 "rss_max_bytes": "int?"}
SAMPLE_FIELDS = {"t": NUMBER, "cpu_seconds": NUMBER, "cores_busy": OPT_NUMBER, "rss_bytes": "int",
                 "threads": "int", "processes": "int", "read_bytes": "int?", "write_bytes": "int?",
                 "uss_bytes": "int?", "pss_bytes": "int?", "mem_used_bytes": "int?", "mem_available_bytes": "int?",
                 "cpu_percent": "numbers?", "runnable": "int?", "gpus": "list"}
GPU_FIELDS = {"index": "int", "name": OPT_TEXT, "util_percent": OPT_NUMBER, "memory_used_bytes": "int?",
              "memory_total_bytes": "int?", "power_watts": OPT_NUMBER, "job_memory_bytes": "int?"}
EVENT_FIELDS = {"t": NUMBER, "pid": "int", "kind": TEXT, "data": "object"}
# The parts of run.env and run.budget that tensorgauge reads; other fields are kept and never read.
HOST_FIELDS = {"hostname": OPT_TEXT, "cpu_model": OPT_TEXT, "cpu_flags": "texts?", "cores_logical": "int?",
               "cores_physical": "int?", "cpus_allowed": "ints?", "cgroup_cpu_quota_cores": OPT_NUMBER,
               "cores_allowed": OPT_NUMBER, "ram_bytes": "int?", "cgroup_memory_limit_bytes": "int?",
               "os": OPT_TEXT, "os_release": OPT_TEXT, "kernel": OPT_TEXT, "machine": OPT_TEXT,
               "nvidia_driver": OPT_TEXT, "monitor_python": OPT_TEXT, "env_vars": "text_map?", "gpus": "texts?"}
JOB_FIELDS = {"python": OPT_TEXT, "executable": OPT_TEXT, "thread_env": "text_map?", "affinity_cpus": "int?",
              "numpy_version": OPT_TEXT, "blas": "objects?", "tensorflow_version": OPT_TEXT, "tf_build": "object?",
              "onednn_enabled": "bool?", "devices_physical": "texts?", "gpus_visible": "int?",
              "intra_op_threads": "int?", "inter_op_threads": "int?", "keras_version": OPT_TEXT}
WORKER_FIELDS = {"task_type": OPT_TEXT, "task_index": "int?", "worker": OPT_TEXT, "cluster": "object?"}
BUDGET_FIELDS = {"max_memory_bytes": "int?", "max_cpus": OPT_NUMBER, "max_gpu_memory_bytes": "int?",
                 "soft_memory_bytes": "int?", "stopped": "bool?", "reason": OPT_TEXT, "checkpoint": OPT_TEXT,
                 "graceful": "bool?", "peak_bytes": "int?", "peak_t": OPT_NUMBER, "stop_requested_at": OPT_NUMBER,
                 "enforced_by": "texts?", "gpu_memory_limit": "object?", "gpu_memory_peak_bytes": "int?"}
GPU_LIMIT_FIELDS = {"gpus": "int?", "error": OPT_TEXT}
KIND_WORDS = {"number": "a number", "int": "an integer", "bool": "true or false", "text": "text",
              "texts": "a list of texts", "numbers": "a list of numbers", "ints": "a list of integers",
              "objects": "a list of objects", "object": "an object", "text_map": "an object of texts",
              "list": "a list"}


def _is(kind: str, value: Any) -> bool:
    if kind.endswith("?"):
        return value is None or _is(kind[:-1], value)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "text":
        return isinstance(value, str)
    if kind == "texts":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind in ("numbers", "ints", "objects"):
        return isinstance(value, list) and all(_is(kind[:-1], v) for v in value)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "text_map":
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    if kind == "list":
        return isinstance(value, list)
    raise AssertionError(kind)


def _check(obj: Any, fields: dict[str, str], where: str, required: tuple[str, ...]) -> dict:
    if not isinstance(obj, dict):
        raise BundleError(f"{where} is not an object")
    for name in required:
        if name not in obj:
            raise BundleError(f"{where} lacks '{name}'")
    for name, kind in fields.items():
        if name in obj and not _is(kind, obj[name]):
            raise BundleError(f"{where}.{name} is not {KIND_WORDS.get(kind.rstrip('?'), kind.rstrip('?'))}")
    return obj


def from_dict(doc: Any) -> Bundle:
    """A validated bundle, or :class:`BundleError` saying what is wrong."""
    if not isinstance(doc, dict) or "schema" not in doc:
        raise BundleError("not a tensorgauge bundle (no 'schema')")
    schema = doc["schema"]
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith("tensorgauge.bundle/"):
            raise BundleError(f"bundle schema {schema!r} is not supported by tensorgauge {__version__} "
                              f"(it reads {SCHEMA}); upgrade tensorgauge")
        raise BundleError(f"not a tensorgauge bundle (schema {str(schema)[:60]!r})")
    run = _check(doc.get("run"), RECORD_FIELDS, "run", ("run_id", "command", "started_at"))
    if not RUN_ID.match(run["run_id"]):
        raise BundleError("run.run_id is not a run id")
    for part, fields in (("host", HOST_FIELDS), ("job", JOB_FIELDS), ("worker", WORKER_FIELDS)):
        if (run.get("env") or {}).get(part) is not None:
            _check(run["env"][part], fields, f"run.env.{part}", ())
    if run.get("budget") is not None:
        _check(run["budget"], BUDGET_FIELDS, "run.budget", ())
        if run["budget"].get("gpu_memory_limit") is not None:
            _check(run["budget"]["gpu_memory_limit"], GPU_LIMIT_FIELDS, "run.budget.gpu_memory_limit", ())
    for name in ("samples", "events"):
        if not isinstance(doc.get(name), list):
            raise BundleError(f"'{name}' is not a list")
    samples = []
    for i, s in enumerate(doc["samples"]):
        _check(s, SAMPLE_FIELDS, f"samples[{i}]",
               ("t", "cpu_seconds", "cores_busy", "rss_bytes", "threads", "processes"))
        for j, g in enumerate(s.get("gpus") or []):
            _check(g, GPU_FIELDS, f"samples[{i}].gpus[{j}]", ("index",))
        samples.append(Sample.from_dict(s))
    events = [Event(**{k: _check(e, EVENT_FIELDS, f"events[{i}]", tuple(EVENT_FIELDS))[k] for k in EVENT_FIELDS})
              for i, e in enumerate(doc["events"])]
    bundle = Bundle(RunRecord.from_dict(run), samples, events)
    analyse(bundle)
    return bundle


def analyse(bundle: Bundle):
    """The bundle's run analysed (a RunReport), and rendered once as ``show``,
    ``compare`` and ``report`` would, into nothing: data that passed the field
    checks but contradicts itself (event data of the wrong type, say) is a
    BundleError here, never a crash later."""
    import io

    from rich.console import Console

    from tensorgauge.analyse.compare import Side, compare
    from tensorgauge.render.compare import render_compare
    from tensorgauge.render.html import comparison_page, run_page
    from tensorgauge.render.terminal import render_run
    from tensorgauge.report import RunReport

    try:
        report = RunReport.build(bundle.record, bundle.samples, bundle.events)
        console = Console(file=io.StringIO(), width=120)
        render_run(console, report)
        side = Side("bundle", report)
        comparison = compare(side, side)
        render_compare(console, comparison)
        run_page(report, js="")
        comparison_page(side, side, comparison, js="")
    except Exception as exc:
        raise BundleError(f"the bundle's run cannot be analysed, its data is inconsistent "
                          f"({type(exc).__name__}: {str(exc)[:120]})") from None
    return report


def _no_constants(name: str):
    raise BundleError(f"the bundle holds {name}, which is not a number JSON allows")


def read(path: str | Path) -> Bundle:
    """Read and validate a bundle file."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise BundleError(f"{path} is {size >> 20} MiB, larger than a bundle may be ({MAX_BYTES >> 20} MiB)")
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise BundleError(f"{path} is not a bundle (not UTF-8 text)") from None
    return loads(text, str(path))


def loads(text: str, where: str = "bundle") -> Bundle:
    try:
        doc = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{where} is not a bundle, or it is truncated ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise BundleError(f"{where} is nested too deeply to be a bundle") from None
    try:
        return from_dict(doc)
    except BundleError as exc:
        raise BundleError(f"{where}: {exc}") from None


def export_run(store, ref: str) -> Bundle:
    record = store.run(ref)
    return Bundle(record, store.samples(record.run_id), store.events(record.run_id))


def import_bundle(store, bundle: Bundle) -> str:
    """Store the bundle's run (all or nothing); returns its run id."""
    store.import_run(bundle.record, bundle.samples, bundle.events)
    return bundle.record.run_id
