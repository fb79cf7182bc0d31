"""Formatting of bytes, seconds and shares for people (and reading a time offset back)."""

from __future__ import annotations

import re

_OFFSET = re.compile(r"(?:(\d+(?:\.\d*)?)h)?(?:(\d+(?:\.\d*)?)m)?(?:(\d+(?:\.\d*)?)s?)?")


def parse_offset_seconds(text: str) -> float:
    """A time from the run's start: ``3h10m``, ``190m``, ``90s``, ``11400``, ``1h2m3.5s``; ValueError otherwise."""
    match = _OFFSET.fullmatch(text.strip().lower())
    if not text.strip() or match is None or not any(match.groups()):
        raise ValueError(f"'{text}' is not a time from the run's start (e.g. 3h10m, 90s, 11400)")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def format_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 0.001:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1000:.1f} ms"
    if s < 120:
        return f"{s:.2f} s"
    minutes, seconds = divmod(s, 60)
    if minutes < 60:
        return f"{int(minutes)}m{seconds:02.0f}s"
    hours, minutes = divmod(minutes, 60)
    return f"{int(hours)}h{int(minutes):02d}m"


def format_result(value: float, unit: str) -> str:
    """A benchmark's result: a time as µs, ms or s (45 ms, never '0.0 s'), else one decimal and its unit."""
    return format_seconds(value) if unit == "s" else f"{value:,.1f} {unit}"


def format_share(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.0f}%" if whole > 0 else "-"


def format_quantity(value: float | None, unit: str | None) -> str:
    """A sampled figure in its unit: bytes as KiB/MiB/GiB, cores with two decimals, counts whole."""
    if value is None:
        return "-"
    if unit == "bytes":
        return format_bytes(value)
    if unit == "cores":
        return f"{value:.2f}"
    return f"{value:.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.1f}"


def format_offset(seconds: float) -> str:
    """A time from the run's start as ``--from``/``--to`` take it (:func:`parse_offset_seconds` reads it
    back): ``1h34m``, ``2m15s``, ``8s``, ``0.4s``; whole minutes from an hour on, whole seconds from ten."""
    if seconds >= 3600:
        hours, minutes = divmod(int(seconds // 60), 60)
        return f"{hours}h{minutes:02d}m"
    if seconds >= 60:
        minutes, rest = divmod(int(seconds), 60)
        return f"{minutes}m{rest:02d}s"
    return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s".replace(".0s", "s")


_NAMED_UNIT = re.compile(r"_(bytes|seconds)(?:_(?:p\d+|mean|median|peak|max|min|low|high))?$")


def format_named(key: str, value: object) -> str:
    """A value named by its key's unit (``*_bytes``, ``*_seconds``, also ``step_seconds_p50``), as people
    read it; lists and dicts item by item; other floats to four significant digits."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, float)):
        unit = _NAMED_UNIT.search(key)
        if unit:
            return format_bytes(value) if unit.group(1) == "bytes" else format_seconds(value)
        return f"{value:.4g}" if isinstance(value, float) else str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_named(str(k), v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_named(key, v) for v in value) + "]"
    return str(value)
