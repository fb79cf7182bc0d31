"""Portable bundles: one run in a versioned JSON file (a ``bench`` run carries its
results as ``bench_result`` events).

A bundle is data only: it is parsed with :func:`json.loads` (no NaN or
Infinity) and checked field by field against the record declarations
(:mod:`tensorgauge.model`) and the hook protocol's payloads
(:mod:`tensorgauge.hook.protocol`). Nothing in it is ever executed.

    {"schema": "tensorgauge.bundle/1", "tensorgauge_version": str, "created_at": str,
     "run": {RunRecord fields}, "samples": [{Sample fields}], "events": [{"t", "pid", "kind", "data"}]}
"""

from __future__ import annotations

import datetime
import json
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorgauge import __version__
from tensorgauge.checks import ValidationError, check_event_data, check_object, check_record
from tensorgauge.errors import TensorgaugeError
from tensorgauge.model import BUDGET_FIELDS, ENV_PARTS, GPU_LIMIT_FIELDS, Event, RunRecord, Sample

SCHEMA = "tensorgauge.bundle/1"
MAX_BYTES = 512 << 20
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


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


def _check_run(run: Any) -> dict:
    check_record(RunRecord, run, "run")
    if not RUN_ID.match(run["run_id"]):
        raise ValidationError("run.run_id is not a run id")
    for part, spec in ENV_PARTS.items():
        if run.get("env", {}).get(part) is not None:
            check_object(run["env"][part], spec, f"run.env.{part}")
    if run.get("budget") is not None:
        check_object(run["budget"], BUDGET_FIELDS, "run.budget")
        if run["budget"].get("gpu_memory_limit") is not None:
            check_object(run["budget"]["gpu_memory_limit"], GPU_LIMIT_FIELDS, "run.budget.gpu_memory_limit")
    return run


def from_dict(doc: Any) -> Bundle:
    """A validated bundle, or :class:`BundleError` saying what is wrong. Every field of
    every record is checked against its declaration, and each event's payload against
    the hook protocol, so a bundle that loads is one the analysis can read."""
    if not isinstance(doc, dict) or "schema" not in doc:
        raise BundleError("not a tensorgauge bundle (no 'schema')")
    schema = doc["schema"]
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith("tensorgauge.bundle/"):
            raise BundleError(f"bundle schema {schema!r} is not supported by tensorgauge {__version__} "
                              f"(it reads {SCHEMA}); upgrade tensorgauge")
        raise BundleError(f"not a tensorgauge bundle (schema {str(schema)[:60]!r})")
    try:
        run = _check_run(doc.get("run"))
        for name in ("samples", "events"):
            if not isinstance(doc.get(name), list):
                raise BundleError(f"'{name}' is not a list")
        samples = [Sample.from_dict(check_record(Sample, s, f"samples[{i}]")) for i, s in enumerate(doc["samples"])]
        events = []
        for i, e in enumerate(doc["events"]):
            check_record(Event, e, f"events[{i}]")
            check_event_data(e["kind"], e.get("data", {}), f"events[{i}].data")
            events.append(Event.from_dict(e))
    except ValidationError as exc:
        raise BundleError(str(exc)) from None
    return Bundle(RunRecord.from_dict(run), samples, events)


def _no_constants(name: str):
    raise BundleError(f"the bundle holds {name}, which is not a number JSON allows")


def read(path: str | Path) -> Bundle:
    """Read and validate a bundle file."""
    path = Path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise BundleError(f"{path} is not a bundle (not a regular file)")
        if info.st_size > MAX_BYTES:
            raise BundleError(f"{path} is {info.st_size >> 20} MiB, larger than a bundle may be ({MAX_BYTES >> 20} MiB)")
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)  # a file that grows while read is cut, never read forever
        if len(data) > MAX_BYTES:
            raise BundleError(f"{path} is larger than a bundle may be ({MAX_BYTES >> 20} MiB)")
        text = data.decode("utf-8")
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
