"""Portable bundles: one run in a versioned JSON file (a ``bench`` run carries its
results as ``bench_result`` events).

A bundle is data only: it is parsed with :func:`json.loads` (no NaN or
Infinity) and checked field by field against the record declarations
(:mod:`tensorgauge.model`) and the hook protocol's payloads
(:mod:`tensorgauge.hook.protocol`). Nothing in it is ever executed.

    {"schema": "tensorgauge.bundle/2", "tensorgauge_version": str, "created_at": str,
     "run": {RunRecord fields}, "sample_chunks": [base64 of a chunk, see .chunks],
     "events": [{"t", "pid", "kind", "data"}]}

Samples travel as the store keeps them, compressed a minute a chunk (a day's
run is ~25 MB, not ~620 MB); step times as digests. A ``tensorgauge.bundle/1``
file (samples as objects, every step's time in ``steps`` events) still reads:
its steps are digested on the way in.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
import stat
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tensorgauge._version import __version__
from tensorgauge.checks import (
    ValidationError,
    check_event_data,
    check_event_times,
    check_object,
    check_record,
    check_sample,
)
from tensorgauge.errors import TensorgaugeError
from tensorgauge.model import BUDGET_FIELDS, ENV_PARTS, GPU_LIMIT_FIELDS, Event, RunRecord, Sample
from tensorgauge.series import REQUIRED, SampleSeries
from tensorgauge.steps import digest_steps
from tensorgauge.store import chunks
from tensorgauge.store.private import write_own_file
from tensorgauge.units import format_bytes

SCHEMA = "tensorgauge.bundle/2"
SCHEMAS = ("tensorgauge.bundle/1", SCHEMA)  # what this version reads
MAX_BYTES = 2 << 30  # a day's run in the old form (every sample an object) is ~620 MB
# What a bundle's samples may decode to: a week at 10 Hz on 2 CPUs is 0.87 GB, a day on 128 CPUs 1.0 GB.
MAX_DECODED_BYTES = 1 << 30
_JOINED_CHUNKS = 60  # chunks joined into one block as they are decoded (an hour of a minute each)
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class BundleError(TensorgaugeError):
    """A bundle that cannot be read: truncated, not a bundle, another schema, damaged."""


@dataclass
class Bundle:
    record: RunRecord
    series: SampleSeries
    events: list[Event]
    blobs: list[bytes] | None = None  # the samples as compressed chunks, when read that way from a store
    chunk_rows: list[tuple] | None = None  # (first t, last t, count, RSS peak, blob) of a bundle/2's chunks

    @property
    def samples(self) -> list[Sample]:
        return self.series.to_samples()

    def to_dict(self) -> dict:
        blobs = self.blobs if self.blobs is not None else [row[-1] for row in chunks.split(self.series)]
        return {"schema": SCHEMA, "tensorgauge_version": __version__,
                "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "run": self.record.to_dict(), "sample_chunks": [base64.b64encode(b).decode() for b in blobs],
                "events": [e.to_dict() for e in self.events]}

    def write(self, path: str | Path) -> None:
        """To ``path``, or to stdout for ``-``."""
        text = json.dumps(self.to_dict()) + "\n"
        if str(path) == "-":
            sys.stdout.write(text)
            return
        try:
            write_own_file(Path(path).expanduser(), text.encode("utf-8"))
        except OSError as exc:
            raise TensorgaugeError(f"cannot write {path}: {exc.strerror}") from None


def _check_run(run: Any) -> dict:
    check_record(RunRecord, run, "run")
    if not RUN_ID.fullmatch(run["run_id"]):
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
    if schema not in SCHEMAS:
        if isinstance(schema, str) and schema.startswith("tensorgauge.bundle/"):
            raise BundleError(f"bundle schema {schema!r} is not supported by tensorgauge {__version__} "
                              f"(it reads {', '.join(SCHEMAS)}); upgrade tensorgauge")
        raise BundleError(f"not a tensorgauge bundle (schema {str(schema)[:60]!r})")
    try:
        run = _check_run(doc.get("run"))
        samples_key = "sample_chunks" if schema == SCHEMA else "samples"
        for name in (samples_key, "events"):
            if not isinstance(doc.get(name), list):
                raise BundleError(f"'{name}' is not a list")
        rows: list[tuple] | None = [] if schema == SCHEMA else None
        series = _chunks(doc[samples_key], rows) if rows is not None else _samples(doc[samples_key])
        # The run's length: its record's, or its last sample's (the events' times must lie inside it).
        run_seconds = max(0.0, float(run.get("wall_seconds") or 0.0), float(series.t[-1]) if len(series) else 0.0)
        events = []
        for i, e in enumerate(doc["events"]):
            check_record(Event, e, f"events[{i}]")
            check_event_data(e["kind"], e.get("data", {}), f"events[{i}].data")
            check_event_times(e["kind"], e["t"], e.get("data", {}), run_seconds, f"events[{i}]")
            events.append(Event.from_dict(e))
    except ValidationError as exc:
        raise BundleError(str(exc)) from None
    return Bundle(RunRecord.from_dict(run), series, digest_steps(events), chunk_rows=rows)


def _samples(docs: list) -> SampleSeries:
    """bundle/1's sample objects, checked, as columns (a few thousand objects at a time)."""
    parts = []
    for first in range(0, len(docs), 6000):
        parts.append(SampleSeries.from_samples([Sample.from_dict(check_sample(s, f"samples[{first + i}]"))
                                                for i, s in enumerate(docs[first:first + 6000])]))
    return SampleSeries.concat(parts)


def _chunks(texts: list, rows: list[tuple]) -> SampleSeries:
    """bundle/2's compressed chunks, decoded and checked (every required field present, times in
    order); each chunk, checked, is added to ``rows`` as the store keeps it (it is stored as it came).
    Every chunk's header is read first: samples that would decode to more than
    :data:`MAX_DECODED_BYTES` are refused before any is decoded."""
    size = chunks.DecodedSize()
    for i, text in enumerate(texts):
        size.add(_header(text, f"sample_chunks[{i}]"))
    if size.bytes > MAX_DECODED_BYTES:
        raise ValidationError(f"its samples decode to {format_bytes(size.bytes)} ({size}), more than a bundle's "
                              f"may ({format_bytes(MAX_DECODED_BYTES)})")
    release_freed_memory()
    parts: list[SampleSeries] = []
    blocks: list[SampleSeries] = []  # parts joined an hour at a time: a day is never held twice in small arrays
    for i, text in enumerate(texts):
        where = f"sample_chunks[{i}]"
        texts[i] = None  # its text is not kept beside its samples
        blob = _blob(text, where)
        try:
            part = chunks.decode(blob)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise ValidationError(f"{where} is not a sample chunk ({str(exc)[:80]})") from None
        except Exception as exc:  # zstd's own error for a damaged frame
            raise ValidationError(f"{where} is damaged ({type(exc).__name__})") from None
        for name in REQUIRED:
            if np.any(np.isnan(part[name])):
                raise ValidationError(f"{where} has samples without {name}")
        if len(part):
            rss = part["rss_bytes"]
            rows.append((float(part.t[0]), float(part.t[-1]), len(part), int(np.nanmax(rss)), blob))
            parts.append(part)
        if len(parts) == _JOINED_CHUNKS:
            blocks.append(SampleSeries.concat(parts))
            parts = []
            release_freed_memory()
    series = SampleSeries.concat(blocks + parts, consume=True)
    del blocks, parts
    release_freed_memory()
    if len(series) > 1 and np.any(np.diff(series.t) < 0):
        raise ValidationError("sample_chunks are not in time order")
    return series


def _blob(text: Any, where: str) -> bytes:
    if not isinstance(text, str):
        raise ValidationError(f"{where} is not text")
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise ValidationError(f"{where} is not a sample chunk ({str(exc)[:80]})") from None


def _header(text: Any, where: str) -> dict:
    """The header of the chunk ``text`` holds (its bounds checked), the payload left compressed."""
    try:
        return chunks.header(_blob(text, where))
    except (ValueError, KeyError, TypeError, OverflowError, struct.error) as exc:
        raise ValidationError(f"{where} is not a sample chunk ({str(exc)[:80]})") from None


def release_freed_memory() -> None:
    """Give the C heap's freed memory back to the system, and from then on keep arrays of 128 KiB
    and more out of the heap (glibc's ``malloc_trim`` and ``mallopt(M_MMAP_THRESHOLD)``, as dask's
    workers do). Decoding a day of one-minute chunks frees many arrays that glibc otherwise keeps:
    120 MB of a 24 h bundle's import. Elsewhere than glibc, nothing."""
    global _libc
    if _libc is None:
        try:
            import ctypes

            _libc = ctypes.CDLL("libc.so.6")
            _libc.mallopt(_M_MMAP_THRESHOLD, 128 << 10)  # fixed: glibc would raise it as arrays are freed
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.malloc_trim(0)


_libc: Any = None  # the C library once looked up; False where there is none
_M_MMAP_THRESHOLD = -3


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
        data.decode("utf-8")  # checked here; json reads the bytes
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise BundleError(f"{path} is not a bundle (not UTF-8 text)") from None
    doc = _parse(data, str(path))
    del data  # a day's bundle: its text is not kept beside its samples
    return _checked(doc, str(path))


def loads(text: str | bytes, where: str = "bundle") -> Bundle:
    return _checked(_parse(text, where), where)


def _parse(text: str | bytes, where: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{where} is not a bundle, or it is truncated ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise BundleError(f"{where} is nested too deeply to be a bundle") from None
    except ValueError:  # Python's own bound on an integer's digits (sys.get_int_max_str_digits)
        raise BundleError(f"{where} holds an integer too long to be a figure of a run "
                          f"(more than {getattr(sys, 'get_int_max_str_digits', lambda: 4300)()} digits)") from None


def _checked(doc: Any, where: str) -> Bundle:
    try:
        return from_dict(doc)
    except BundleError as exc:
        raise BundleError(f"{where}: {exc}") from None


def export_run(store, ref: str) -> Bundle:
    """The run as a bundle: its chunks as stored, each checked to decode (a damaged one would make a
    bundle no import takes), its events as they are."""
    record = store.run(ref)
    blobs = store.sample_blobs(record.run_id)
    for i, blob in enumerate(blobs):
        try:
            chunks.decode(blob)
        except Exception as exc:  # zstd's own error for a damaged frame too
            raise BundleError(f"run {record.run_id} has a damaged sample chunk ({i + 1} of {len(blobs)}: "
                              f"{type(exc).__name__}); it cannot be exported whole") from None
    return Bundle(record, SampleSeries.empty(), store.events(record.run_id), blobs=blobs)


def import_bundle(store, bundle: Bundle, analysis: tuple[str, dict] | None = None) -> str:
    """Store the bundle's run (all or nothing), with its ``analysis`` (key, document) when given:
    its first ``show`` then reads it, as for a recorded run; returns its run id."""
    store.import_run(bundle.record, bundle.series, bundle.events, analysis=analysis, chunk_rows=bundle.chunk_rows)
    return bundle.record.run_id
