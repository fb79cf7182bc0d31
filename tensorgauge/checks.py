"""Checking data from outside (a bundle, a stored row, an event from the job)
against the declarations: the stored records' fields (:func:`tensorgauge.model.declared`)
and the hook's payloads (:mod:`tensorgauge.hook.protocol`).

A kind is a word of :data:`KINDS`, with ``?`` when None is allowed. A value of
the wrong kind is a :class:`ValidationError` that names the field, e.g.
``run.job_id is not text``.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import MISSING, fields
from typing import Any, Union

from tensorgauge.errors import TensorgaugeError
from tensorgauge.hook.protocol import PAYLOADS
from tensorgauge.model import GpuReading, Sample

KINDS = {"number": "a number", "int": "an integer", "bool": "true or false", "text": "text",
         "texts": "a list of texts", "numbers": "a list of numbers", "ints": "a list of integers",
         "objects": "a list of objects", "object": "an object", "text_map": "an object of texts",
         "records": "a list of objects", "list": "a list", "any": "anything"}
INT_RANGE = 1 << 63  # what both stores hold in an integer column


class ValidationError(TensorgaugeError):
    """Data that does not match its declaration."""


def is_kind(kind: str, value: Any) -> bool:
    if kind.endswith("?"):
        return value is None or is_kind(kind[:-1], value)
    if kind == "number":  # compared, not math.isfinite: an integer of 400 digits overflows a float
        return isinstance(value, (int, float)) and not isinstance(value, bool) and -1e300 < value < 1e300
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and -INT_RANGE <= value < INT_RANGE
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "text":
        return isinstance(value, str)
    if kind in ("texts", "numbers", "ints", "objects"):
        item = {"texts": "text", "numbers": "number", "ints": "int", "objects": "object"}[kind]
        return isinstance(value, list) and all(is_kind(item, v) for v in value)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "text_map":
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    if kind in ("list", "records"):
        return isinstance(value, list)
    if kind == "any":
        return True
    raise ValueError(f"unknown kind {kind!r}")


def describe(kind: str) -> str:
    return KINDS.get(kind.rstrip("?"), kind)


def check_object(obj: Any, spec: dict[str, str], where: str, required: tuple[str, ...] = ()) -> dict:
    """``obj`` if it is an object whose declared fields have their kinds; keys not declared are kept."""
    if not isinstance(obj, dict):
        raise ValidationError(f"{where} is not an object")
    for name in required:
        if name not in obj:
            raise ValidationError(f"{where} lacks '{name}'")
    for name, kind in spec.items():
        if name in obj and not is_kind(kind, obj[name]):
            raise ValidationError(f"{where}.{name} is not {describe(kind)}")
    return obj


# -- the stored records ------------------------------------------------------------


@functools.cache
def record_spec(cls: type) -> dict[str, str]:
    """{field: kind} of a record declared with :func:`tensorgauge.model.declared`."""
    return {f.name: f.metadata["kind"] for f in fields(cls)}


@functools.cache
def record_required(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)


def check_record(cls: type, obj: Any, where: str) -> dict:
    """``obj`` checked as the dict form of ``cls``, nested records included."""
    check_object(obj, record_spec(cls), where, record_required(cls))
    for f in fields(cls):
        item = f.metadata.get("item")
        if item is not None:
            for i, element in enumerate(obj.get(f.name) or []):
                check_record(item, element, f"{where}.{f.name}[{i}]")
    return obj


SAMPLE_EXACT = 1 << 53  # samples are stored as float64 columns (tensorgauge.series): exact up to here


def check_sample(obj: Any, where: str) -> dict:
    """A sample's dict form: its declared kinds, numbers the store keeps exactly, one reading per GPU."""
    check_record(Sample, obj, where)
    for name, value in [(n, obj.get(n)) for n in record_spec(Sample)] + [
            (f"gpus[{i}].{n}", g.get(n)) for i, g in enumerate(obj.get("gpus") or []) for n in record_spec(GpuReading)]:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= SAMPLE_EXACT:
            raise ValidationError(f"{where}.{name} is too large for a sample (at most 2**53)")
    indexes = [g.get("index") for g in obj.get("gpus") or []]
    if len(set(indexes)) != len(indexes):
        raise ValidationError(f"{where}.gpus has more than one reading of a GPU")
    return obj


# -- the hook's events ---------------------------------------------------------------


def _kind_of(annotation: Any) -> str:
    """The kind of a payload field's type annotation (``list[float] | None`` -> ``numbers?``)."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner = _kind_of(members[0]) if len(members) == 1 else "any"
        return inner if inner == "any" else inner + "?"
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return {float: "numbers", int: "ints", str: "texts", dict: "objects"}.get(item, "list")
    if origin is dict or annotation is dict:
        return "object"
    return {float: "number", int: "int", str: "text", bool: "bool"}.get(annotation, "any")


@functools.cache
def payload_spec(kind: str) -> dict[str, str]:
    """{field: kind} of the payload the protocol declares for an event kind ({} for an unknown kind)."""
    payload = PAYLOADS.get(kind)
    if payload is None:
        return {}
    return {name: _kind_of(hint) for name, hint in typing.get_type_hints(payload).items()}


def check_event_data(kind: str, data: Any, where: str) -> dict:
    """An event's payload checked against its kind's declaration (unknown kinds: only an object)."""
    return check_object(data, payload_spec(kind), where)


CLOCK_SLACK_SECONDS = 60.0  # how far outside a run an event's times may lie (clock reads, a late flush)


def check_event_times(kind: str, t: float, data: dict, run_seconds: float, where: str) -> None:
    """An event's times (on the run's clock) inside the run of ``run_seconds``, give or take
    :data:`CLOCK_SLACK_SECONDS`: its ``t`` and, for steps, every end and duration. A step's end a
    year away would make a digest of a year of seconds (gigabytes)."""
    low, high = -CLOCK_SLACK_SECONDS, run_seconds + CLOCK_SLACK_SECONDS
    if not low <= t <= high:
        raise ValidationError(f"{where}.t is {t:.0f} s from the run's start, outside the run")
    if kind == "steps":
        numbers = [x for x in data.get("ends") or () if isinstance(x, (int, float))]
        if any(not low <= x <= high for x in numbers):
            raise ValidationError(f"{where}.ends lie outside the run")
        if any(isinstance(x, (int, float)) and not 0 <= x <= high for x in data.get("seconds") or ()):
            raise ValidationError(f"{where}.seconds are negative or longer than the run")
