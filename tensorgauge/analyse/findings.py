"""Every finding about a recorded run: the registered rules (:mod:`.rules`) of each
category run in order, the result sorted by severity."""

from __future__ import annotations

from tensorgauge.analyse import diagnose, input_rules, memory, pauses, placement  # noqa: F401  (their rules register on import)
from tensorgauge.analyse.phases import as_series
from tensorgauge.analyse.rules import SEVERITY_ORDER, RunFacts, ids_of, ordered
from tensorgauge.analyse.summary import summarise
from tensorgauge.model import Event, Finding, Phase, RunRecord, Sample, Summary
from tensorgauge.series import SampleSeries
from tensorgauge.steps import StepDigest

PERFORMANCE_IDS = ids_of("performance")


def find(record: RunRecord, samples: SampleSeries | list[Sample], events: list[Event], phases: list[Phase],
         summary: Summary | None = None, category: str | None = None,
         digests: list[StepDigest] | None = None) -> list[Finding]:
    """The findings of every rule (of ``category``, if given), most severe first (``digests``: the
    run's step digests, when the caller has read them already)."""
    series = as_series(samples)
    facts = RunFacts(record, series, list(events), list(phases), summary or summarise(record, series))
    if digests is not None:
        facts.step_digests = digests
    found: list[Finding] = []
    for entry in ordered():
        if category is not None and entry.category != category:
            continue
        facts.found = [x for x in found if x.id in entry.reads()]  # a rule reads only what it declared
        result = entry.function(facts)
        if result is None:
            continue
        for finding in [result] if isinstance(result, Finding) else list(result):
            if finding.id not in entry.ids:
                raise AssertionError(f"rule {entry.function.__name__} returned unregistered id {finding.id!r}")
            found.append(finding)
    rank = {s: i for i, s in enumerate(SEVERITY_ORDER)}
    return sorted(found, key=lambda f: rank.get(f.severity, len(rank)))
