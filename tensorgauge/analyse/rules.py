"""The findings registry: each finding is one function, registered with :func:`rule`.

A rule takes the :class:`RunFacts` of a recorded run and returns a
:class:`~tensorgauge.model.Finding`, several, or None. Rules run in the order
they are registered (a rule may read what ran before it in ``facts.found``);
:mod:`.findings` runs them all and sorts the result by :data:`SEVERITY_ORDER`.
Adding a finding: a function decorated with ``@rule("its_id", CATEGORY)`` in the
module of its category, and a test.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tensorgauge.analyse.phases import main_fit
from tensorgauge.model import Event, Finding, Phase, RunRecord, Summary
from tensorgauge.series import SampleSeries
from tensorgauge.steps import StepDigest

SEVERITY_ORDER = ("high", "moderate", "low", "info")
CATEGORIES = ("performance", "memory", "placement")


@dataclass
class RunFacts:
    """What every rule may read: the recorded run, analysed into phases and a summary."""

    record: RunRecord
    samples: SampleSeries
    events: list[Event]
    phases: list[Phase]
    summary: Summary
    found: list[Finding] = field(default_factory=list)  # what the rules before this one found

    def __post_init__(self) -> None:
        self.fit = main_fit(self.phases)
        self.host: dict[str, Any] = self.record.env.get("host") or {}
        self.job: dict[str, Any] = self.record.env.get("job") or {}
        self.cores_allowed = float(self.host.get("cores_allowed") or 1)
        self.by_kind: dict[str, list[Event]] = {}  # one pass over the events for every rule
        for event in self.events:
            self.by_kind.setdefault(event.kind, []).append(event)

    @functools.cached_property
    def step_digests(self) -> list[StepDigest]:
        """Every phase's steps (first, slowest, quantiles), as digests."""
        from tensorgauge.analyse.phases import step_digests

        return list(step_digests(self.events).values())

    def of_kind(self, kind: str) -> list[Event]:
        return self.by_kind.get(kind, [])

    def last(self, kind: str, before: float | None = None) -> dict | None:
        """The payload of the last event of ``kind`` (at or before ``before``)."""
        found = [e for e in self.of_kind(kind) if before is None or e.t <= before + 1e-6]
        return found[-1].data if found else None

    def first_ok(self, kind: str) -> dict | None:
        """The payload of the first event of ``kind`` that reports a measurement (no error, not skipped)."""
        return next((e.data for e in self.of_kind(kind) if not e.data.get("error") and not e.data.get("skipped")),
                    None)


Rule = Callable[[RunFacts], "Finding | Iterable[Finding] | None"]


@dataclass(frozen=True)
class Entry:
    ids: tuple[str, ...]  # the finding ids the rule can return
    category: str
    function: Rule


REGISTRY: list[Entry] = []


def rule(*ids: str, category: str) -> Callable[[Rule], Rule]:
    """Register a rule that returns findings with these ``ids``."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}")

    def register(function: Rule) -> Rule:
        taken = {i for entry in REGISTRY for i in entry.ids}
        if taken & set(ids):
            raise ValueError(f"finding ids registered twice: {sorted(taken & set(ids))}")
        REGISTRY.append(Entry(tuple(ids), category, function))
        return function

    return register


def ids_of(category: str) -> tuple[str, ...]:
    return tuple(i for entry in REGISTRY if entry.category == category for i in entry.ids)
