"""How a run ended, and whether it completed (pure).

A run completed when its monitor saw the job end and the job exited 0. One that did not — killed by a
signal, stopped by its budget or the kernel's OOM killer, exited non-zero, or never seen to end — holds
the figures of only what ran before: ``check`` fails it, ``compare`` says which side was cut and where,
and the input's reason names it.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from tensorgauge.model import Phase, RunRecord


@dataclass(frozen=True)
class Ending:
    """``how``: what the job did, as a verb phrase ('was killed by signal 15 (SIGTERM)'); ``where``: the
    innermost phase still open as it ended (None: none was)."""

    completed: bool
    how: str
    where: str | None = None

    def describe(self) -> str:
        """'was killed by signal 15 (SIGTERM) in 'epoch 2''."""
        return self.how + (f" in '{self.where}'" if self.where else "")

    def to_dict(self) -> dict:
        return {"completed": self.completed, "how": self.how, "where": self.where}


def signal_name(number: int) -> str:
    """'signal 15 (SIGTERM)'; a number Python does not name stays a number."""
    try:
        return f"signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


def _how(record: RunRecord) -> str | None:
    """What ended a run that did not complete; None when it did."""
    if not record.complete:
        return "was not seen to end (its monitor stopped first)"
    if (record.budget or {}).get("stopped"):
        return "was stopped by its budget"
    if record.oom_killed:
        return "was killed by the kernel's OOM killer"
    if record.signal is not None:
        return f"was killed by {signal_name(record.signal)}"
    if record.exit_code not in (0, None):
        return f"exited with code {record.exit_code}"
    return None


def ending(record: RunRecord, phases: list[Phase]) -> Ending:
    """How ``record``'s job ended, and in which of its ``phases``."""
    how = _how(record)
    if how is None:
        return Ending(True, f"exited with code {record.exit_code}" if record.exit_code is not None else "ended")
    open_ = [p for p in phases if not p.complete and not p.end_dropped]  # an end dropped is no end of the job
    where = max(open_, key=lambda p: (p.start, -p.end)).name if open_ else None
    return Ending(False, how, where)


def cut_short(record: RunRecord, phases: list[Phase]) -> str | None:
    """How a run that did not complete ended (:meth:`Ending.describe`); None for one that completed."""
    ended = ending(record, phases)
    return None if ended.completed else ended.describe()
