"""Text from outside (a job, a bundle, the command line) made safe to print: never
terminal control, never rich markup."""

from __future__ import annotations

import re

from tensorgauge.model import shown_metrics
from tensorgauge.units import format_quantity

# C0 controls but tab and newline, DEL, and C1 controls (0x9b is a CSI on some terminals).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Lone surrogates: the bytes of a name or argument that was not UTF-8 (Python's surrogateescape).
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` that any UTF-8 output takes: a byte that was not UTF-8 shown as ``\\xNN``."""
    return _SURROGATE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}" if ord(m.group()) >= 0xDC80
                          else f"\\u{ord(m.group()):04x}", text)


def plain(value: object) -> str:
    """``value`` as text with every control character, and every byte that was not UTF-8, shown as ``\\xNN``."""
    return printable(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value)))


def one_line(value: object) -> str:
    """``value`` as :func:`plain` shows it, with tabs and newlines shown as ``\\xNN`` too: a table's cell."""
    return plain(value).replace("\t", "\\x09").replace("\n", "\\x0a")


def safe(value: object) -> str:
    """``value`` for a rich console: control characters shown, markup escaped."""
    from rich.markup import escape  # rich only where something is printed: a quiet run never loads it

    return escape(plain(value))


def safe_cell(value: object) -> str:
    """``value`` for one cell of a rich table: :func:`safe`, on one line."""
    from rich.markup import escape

    return escape(one_line(value))


def sampled_figures(summary, leave_out: tuple[str, ...] = ()) -> str:
    """The run's mean and peak of every shown sampled metric (see :func:`tensorgauge.model.shown_metrics`)
    that was read, but those in ``leave_out``: 'machine memory used mean 3.1 GiB, peak 3.4 GiB; ...'."""
    parts = []
    for metric in shown_metrics():
        figures = (summary.metrics or {}).get(metric.name) or {}
        if metric.name in leave_out or figures.get("peak") is None:
            continue
        parts.append(f"{metric.label} mean {format_quantity(figures.get('mean'), metric.unit)}, "
                     f"peak {format_quantity(figures['peak'], metric.unit)}")
    return "; ".join(parts)
