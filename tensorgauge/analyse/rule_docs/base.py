"""The form of a finding's page (see :mod:`tensorgauge.analyse.rule_docs`)."""

from __future__ import annotations

from dataclasses import dataclass

from tensorgauge.model import Finding


def pct(share: float) -> str:
    """0.05 -> '5%' (a threshold as a page prints it)."""
    return f"{share * 100:g}%"


def mib(size_bytes: int) -> str:
    """A threshold in bytes as a page prints it: '32 MiB', '1 GiB'."""
    from tensorgauge.units import format_bytes

    return format_bytes(size_bytes).replace(".0 ", " ")


@dataclass(frozen=True)
class RuleDoc:
    id: str
    category: str  # as the rule registers it: performance, memory, placement
    summary: str  # one line: what the finding says
    meaning: str  # what it means for the job
    measured: str  # how tensorgauge measures it
    thresholds: tuple[str, ...]  # when it fires and how severe, written from the rule's constants
    fix: str
    check: str  # how to check that the fix worked
    example: Finding  # a finding as `show` prints it
