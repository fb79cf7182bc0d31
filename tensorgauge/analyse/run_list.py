"""Which runs ``tensorgauge runs`` lists, in what order: newest first, filtered by name or job, a limit,
and the runs a run made of its own (its trials: --try-fixes' fixes, pytest --tensorgauge's tests) under it
(pure)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from tensorgauge.model import RunRecord


@dataclass
class Listing:
    """The rows of ``runs``: (record, depth: 0 for a run, 1 for a trial under it), the trials not listed per
    parent run, and how many runs the limit left out."""

    rows: list[tuple[RunRecord, int]] = field(default_factory=list)
    folded: dict[str, int] = field(default_factory=dict)
    more: int = 0


def _named(record: RunRecord, pattern: str) -> bool:
    name = record.name or ""
    return fnmatch.fnmatchcase(name, pattern) if any(c in pattern for c in "*?[") else pattern in name


def select(records: list[RunRecord], limit: int = 0, name: str | None = None, job: str | None = None,
           expand: bool = False) -> Listing:
    """``records`` (oldest first, as the store gives them) filtered, newest first, each run's trials under it
    (oldest first, in the order they ran), ``limit`` runs (0: all) not counting trials."""
    chosen = [r for r in records if (name is None or _named(r, name)) and (job is None or r.job_id == job)]
    ids = {r.run_id for r in chosen}
    trials: dict[str, list[RunRecord]] = {}
    for r in chosen:
        if r.parent_run_id in ids and r.parent_run_id != r.run_id:
            trials.setdefault(str(r.parent_run_id), []).append(r)
    tops = [r for r in reversed(chosen) if r.parent_run_id not in ids or r.parent_run_id == r.run_id]
    shown = tops[:limit] if limit else tops
    listing = Listing(more=len(tops) - len(shown))
    for r in shown:
        listing.rows.append((r, 0))
        under = trials.get(r.run_id, [])
        if expand:
            listing.rows += [(t, 1) for t in under]
        elif under:
            listing.folded[r.run_id] = len(under)
    return listing
