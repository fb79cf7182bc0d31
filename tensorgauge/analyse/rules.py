"""The findings registry: each finding is one function, registered with :func:`rule`.

A rule takes the :class:`RunFacts` of a recorded run and returns a
:class:`~tensorgauge.model.Finding`, several, or None. A rule that reads other
rules' findings (``facts.found``) declares them: ``@rule(..., after=(ids))``, and
sees only those; :func:`ordered` runs every rule after those it reads, otherwise
in the order they were registered, and refuses an id no rule returns or a cycle;
:mod:`.findings` runs them all and sorts the result by :data:`SEVERITY_ORDER`.
Adding a finding: a function decorated with ``@rule("its_id", CATEGORY)`` in the
module of its category, and a test.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, get_args

from tensorgauge.analyse.phases import main_fit
from tensorgauge.hook.protocol import TRAIN_LOOP, FitConfig, Kind, P, kind_of
from tensorgauge.model import Event, Finding, Phase, RunRecord, Severity, Summary
from tensorgauge.series import SampleSeries
from tensorgauge.steps import StepDigest

SEVERITY_ORDER: tuple[Severity, ...] = get_args(Severity)
CATEGORIES = ("performance", "memory", "placement")


@dataclass
class RunFacts:
    """What every rule may read: the recorded run, analysed into phases and a summary."""

    record: RunRecord
    samples: SampleSeries
    events: list[Event]
    phases: list[Phase]
    summary: Summary
    found: list[Finding] = field(default_factory=list)  # what the rules this one runs after (its ``after``) found

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

    @functools.cached_property
    def fit_config(self) -> FitConfig | None:
        """The config of the run's main training: a fit's, or the custom loop's (sent at its first step)."""
        configs = [(e.t, e.read(FitConfig)) for e in self.of_kind(Kind.FIT_CONFIG)]
        if self.fit is not None and self.fit.name == TRAIN_LOOP:
            return next((config for _, config in configs if config.get("loop")), None)
        found = [config for t, config in configs
                 if not config.get("loop") and (self.fit is None or t <= self.fit.start + 1e-6)]
        return found[-1] if found else None

    @functools.cached_property
    def input_split(self) -> dict | None:
        """How much of the training's step input costs (:mod:`.input_split`)."""
        from tensorgauge.analyse.ending import cut_short
        from tensorgauge.analyse.input_split import input_split

        return input_split(self.events, self.phases, self.record.diagnosis, self.step_digests,
                           cut_short(self.record, self.phases))

    def of_kind(self, kind: str) -> list[Event]:
        return self.by_kind.get(kind, [])

    def payloads(self, payload: type[P]) -> list[P]:
        """The data of every event whose kind declares ``payload`` (a TypedDict of :mod:`~tensorgauge.hook.protocol`),
        typed as it."""
        return [e.read(payload) for e in self.of_kind(kind_of(payload))]

    def last(self, payload: type[P], before: float | None = None) -> P | None:
        """The data of the last event whose kind declares ``payload`` (at or before ``before``)."""
        found = [e for e in self.of_kind(kind_of(payload)) if before is None or e.t <= before + 1e-6]
        return found[-1].read(payload) if found else None

    def first_ok(self, payload: type[P]) -> P | None:
        """The data of the first event whose kind declares ``payload`` that reports a measurement (no error,
        not skipped)."""
        read = (e.read(payload) for e in self.of_kind(kind_of(payload)))
        return next((data for data in read if not data.get("error") and not data.get("skipped")), None)


Rule = Callable[[RunFacts], "Finding | Iterable[Finding] | None"]


@dataclass(frozen=True)
class Entry:
    ids: tuple[str, ...]  # the finding ids the rule can return
    category: str
    function: Rule
    after: tuple[str, ...] = ()  # finding ids it reads in ``facts.found``: their rules run first
    version: int = 1  # raised when what the rule finds changes: stored analyses are then made again
    explains_idle: bool = False  # its finding explains idle cores (cores_idle is the fallback when none fired)
    after_idle_explainers: bool = False  # it also reads every finding that explains idle cores

    def reads(self) -> tuple[str, ...]:
        """The finding ids it reads: its ``after``, and the idle-core explainers where it asks for them."""
        return self.after + (idle_explainers() if self.after_idle_explainers else ())

    def declaration(self) -> list:
        """What the analysis version is made of (:mod:`.analysis_version`)."""
        return [list(self.ids), list(self.after), self.version, self.explains_idle, self.after_idle_explainers]


REGISTRY: list[Entry] = []


def rule(*ids: str, category: str, after: tuple[str, ...] = (), version: int = 1, explains_idle: bool = False,
         after_idle_explainers: bool = False) -> Callable[[Rule], Rule]:
    """Register a rule that returns findings with these ``ids`` (reading those ``after`` in ``facts.found``,
    and with ``after_idle_explainers`` those of every rule declared ``explains_idle``). ``version``: raised
    when what it finds changes. Keep the arguments literals: the analysis version is read from them."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}")

    def register(function: Rule) -> Rule:
        taken = {i for entry in REGISTRY for i in entry.ids}
        if taken & set(ids):
            raise ValueError(f"finding ids registered twice: {sorted(taken & set(ids))}")
        if set(after) & set(ids):
            raise ValueError(f"a rule cannot run after itself: {sorted(set(after) & set(ids))}")
        REGISTRY.append(Entry(tuple(ids), category, function, tuple(after), version, explains_idle,
                              after_idle_explainers))
        return function

    return register


def idle_explainers() -> tuple[str, ...]:
    """The ids of the findings that explain idle cores (declared ``explains_idle``), as registered."""
    return tuple(i for entry in REGISTRY if entry.explains_idle for i in entry.ids)


def ordered(entries: list[Entry] | None = None) -> list[Entry]:
    """The rules in the order they run: each after the rules whose findings it reads, else as registered."""
    entries = list(REGISTRY if entries is None else entries)
    owner = {i: entry for entry in entries for i in entry.ids}
    for entry in entries:
        unknown = [i for i in entry.reads() if i not in owner]
        if unknown:
            raise ValueError(f"rule {entry.function.__name__} runs after {unknown}, which no rule returns")
    out: list[Entry] = []
    placing: set[int] = set()

    def place(entry: Entry) -> None:
        if any(e is entry for e in out):
            return
        if id(entry) in placing:
            raise ValueError(f"rules read each other's findings in a cycle: {entry.function.__name__}")
        placing.add(id(entry))
        for i in entry.reads():
            if owner[i] is not entry:
                place(owner[i])
        placing.discard(id(entry))
        out.append(entry)

    for entry in entries:
        place(entry)
    return out


def ids_of(category: str) -> tuple[str, ...]:
    return tuple(i for entry in REGISTRY if entry.category == category for i in entry.ids)
