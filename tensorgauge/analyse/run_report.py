"""A recorded run, analysed: the ``tensorgauge.run/1`` document.

Runs every analysis on one run's record, samples and events. Renderers take
a :class:`RunReport`; ``to_dict`` is the JSON contract. A finished run is
analysed once: the analysis (summary, phases, findings, timeline) is kept in
the store, keyed by what it was computed from, so reading a day's run costs
what reading an hour's does.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tensorgauge._version import __version__
from tensorgauge.analyse.analysis_version import analysis_version
from tensorgauge.errors import StoreError
from tensorgauge.model import RUN_SCHEMA, Event, Finding, Phase, RunRecord, Sample, Summary

if TYPE_CHECKING:  # numpy and the analysis load only when a run is analysed, not when its analysis is read
    from tensorgauge.series import SampleSeries



class RunSource(Protocol):
    """What :meth:`RunReport.load` reads from (a :class:`tensorgauge.store.Store`)."""

    def run(self, ref: str) -> RunRecord: ...

    def series(self, run_id: str, start: float | None = None, end: float | None = None) -> SampleSeries: ...

    def events(self, run_id: str, step_digests: bool = True) -> list[Event]: ...

    def analysis(self, run_id: str) -> tuple[str, dict] | None: ...

    def save_analysis(self, run_id: str, key: str, doc: dict) -> None: ...

    def session(self) -> AbstractContextManager: ...


NOT_ANALYSED = ("exports",)  # record fields written after the analysis, from it: they leave it as it is


def analysis_key(record: RunRecord) -> str:
    """What a stored analysis was computed from: this version's analysis of this record."""
    read = {k: v for k, v in record.to_dict().items() if k not in NOT_ANALYSED}
    text = json.dumps([analysis_version(), __version__, read], sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()


@dataclass
class RunReport:
    record: RunRecord
    events: list[Event]  # without the step digests when the analysis was read from the store
    summary: Summary
    phases: list[Phase] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    timeline: dict[str, Any] = field(default_factory=dict)  # see tensorgauge.analyse.timeline.build
    input_split: dict[str, Any] | None = None  # see tensorgauge.analyse.input_split
    memory: dict[str, Any] = field(default_factory=dict)  # end_cause, memory_breakdown, post_mortem, batch_size_search

    @classmethod
    def build(cls, record: RunRecord, samples: SampleSeries | list[Sample], events: list[Event]) -> RunReport:
        from tensorgauge.analyse import timeline
        from tensorgauge.analyse.ending import cut_short
        from tensorgauge.analyse.findings import find
        from tensorgauge.analyse.input_split import input_split
        from tensorgauge.analyse.memory_breakdown import (
            batch_size_search,
            end_cause,
            phase_breakdowns,
            post_mortem,
            run_breakdown,
        )
        from tensorgauge.analyse.phases import as_series, build_phases, step_digests
        from tensorgauge.analyse.summary import summarise
        from tensorgauge.steps import StepDigest

        series = as_series(samples)
        digests = step_digests(events)
        phases = build_phases(events, series, end=record.wall_seconds, digests=digests)
        phase_breakdowns(phases, events)
        summary = summarise(record, series)
        findings = find(record, series, events, phases, summary, digests=list(digests.values()))
        wall = record.wall_seconds if record.wall_seconds is not None else (float(series.t[-1]) if len(series)
                                                                            else 0.0)
        steps = StepDigest()
        for digest in digests.values():
            steps.merge(digest)
        return cls(record=record, events=events, summary=summary, phases=phases, findings=findings,
                   timeline=timeline.build(series, steps, wall),
                   input_split=input_split(events, phases, record.diagnosis, list(digests.values()),
                                           cut_short(record, phases)),
                   memory={"end_cause": end_cause(record, events),
                           "memory_breakdown": run_breakdown(series, events, phases),
                           "post_mortem": post_mortem(record, series, events, phases),
                           "batch_size_search": batch_size_search(events)})

    @classmethod
    def load(cls, store: RunSource, ref: str) -> RunReport:
        """The run ``ref`` read from ``store``: its stored analysis, or analysed now (and stored, once
        the run has finished)."""
        with store.session():  # the reads on one connection, let go before the analysis' own work
            record = store.run(ref)
            key = analysis_key(record)
            stored = store.analysis(record.run_id)
            if stored is not None and stored[0] == key:
                try:
                    return cls.from_analysis(record, store.events(record.run_id, step_digests=False), stored[1])
                except (KeyError, TypeError, ValueError):
                    pass  # damaged: analysed again below
            series, events = store.series(record.run_id), store.events(record.run_id)
        report = cls.build(record, series, events)
        if record.complete:
            try:
                store.save_analysis(record.run_id, key, report.analysis())
            except StoreError:
                pass  # read-only, or locked: analysed again next time
        return report

    def analysis(self) -> dict[str, Any]:
        """What the store keeps of this report besides the record and events."""
        return {"summary": self.summary.to_dict(), "phases": [p.to_dict() for p in self.phases],
                "findings": [f.to_dict() for f in self.findings], "timeline": self.timeline,
                "input_split": self.input_split, "memory": self.memory}

    @classmethod
    def from_analysis(cls, record: RunRecord, events: list[Event], doc: dict[str, Any]) -> RunReport:
        return cls(record=record, events=events, summary=Summary(**doc["summary"]),
                   phases=[Phase.from_dict(p) for p in doc["phases"]],
                   findings=[Finding(**f) for f in doc["findings"]], timeline=doc["timeline"],
                   input_split=doc.get("input_split"), memory=doc.get("memory") or {})

    def to_dict(self) -> dict:
        r = self.record
        return {
            "schema": RUN_SCHEMA,
            "run_id": r.run_id,
            "name": r.name,
            "command": r.command,
            "cwd": r.cwd,
            "exit_code": r.exit_code,
            "signal": r.signal,
            "oom_killed": r.oom_killed,
            "end_cause": self.memory.get("end_cause"),
            "started_at": r.started_at,
            "wall_seconds": round(r.wall_seconds if r.wall_seconds is not None
                                  else self.timeline.get("wall_seconds") or 0.0, 4),
            "complete": r.complete,
            "interval_seconds": r.interval_seconds,
            "env": r.env,
            "summary": self.summary.to_dict(),
            "phases": [p.to_dict() for p in self.phases],
            "findings": [f.to_dict() for f in self.findings],
            "input_split": self.input_split,
            "memory_breakdown": self.memory.get("memory_breakdown"),
            "post_mortem": self.memory.get("post_mortem"),
            "batch_size_search": self.memory.get("batch_size_search"),
            "budget": r.budget,
            "exports": r.exports,
        }
