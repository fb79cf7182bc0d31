"""A recorded run, analysed: the ``tensorgauge.run/1`` document.

Runs every analysis on one run's record, samples and events. Renderers take
a :class:`RunReport`; ``to_dict`` is the JSON contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tensorgauge.analyse.findings import find
from tensorgauge.analyse.phases import build_phases
from tensorgauge.analyse.summary import summarise
from tensorgauge.model import RUN_SCHEMA, Event, Finding, Phase, RunRecord, Sample, Summary


class RunSource(Protocol):
    """What :meth:`RunReport.load` reads from (a :class:`tensorgauge.store.Store`)."""

    def run(self, ref: str) -> RunRecord: ...

    def samples(self, run_id: str) -> list[Sample]: ...

    def events(self, run_id: str) -> list[Event]: ...


@dataclass
class RunReport:
    record: RunRecord
    samples: list[Sample]
    events: list[Event]
    summary: Summary
    phases: list[Phase] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @classmethod
    def build(cls, record: RunRecord, samples: list[Sample], events: list[Event]) -> RunReport:
        phases = build_phases(events, samples, end=record.wall_seconds)
        summary = summarise(record, samples)
        findings = find(record, samples, events, phases, summary)
        return cls(record=record, samples=samples, events=events, summary=summary, phases=phases, findings=findings)

    @classmethod
    def load(cls, store: RunSource, ref: str) -> RunReport:
        """The run ``ref`` read from ``store``, analysed."""
        record = store.run(ref)
        return cls.build(record, store.samples(record.run_id), store.events(record.run_id))

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
            "started_at": r.started_at,
            "wall_seconds": round(r.wall_seconds if r.wall_seconds is not None
                                  else (self.samples[-1].t if self.samples else 0.0), 4),
            "complete": r.complete,
            "interval_seconds": r.interval_seconds,
            "env": r.env,
            "summary": self.summary.to_dict(),
            "phases": [p.to_dict() for p in self.phases],
            "findings": [f.to_dict() for f in self.findings],
            "budget": r.budget,
        }
