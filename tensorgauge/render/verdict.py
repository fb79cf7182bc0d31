"""What a run's report says before its figures, shared by ``show`` and the HTML report: the input
line (how much of each step waited for input) and the plain-words account of where time, CPU and
memory went. Text only; each renderer escapes it its own way."""

from __future__ import annotations

from tensorgauge.analyse.account import account
from tensorgauge.analyse.input_split import describe as describe_split
from tensorgauge.analyse.run_report import RunReport


def wall_seconds(report: RunReport) -> float:
    """The run's wall time, from its timeline while it is still being recorded."""
    wall = report.record.wall_seconds
    return wall if wall is not None else report.timeline.get("wall_seconds") or 0.0


def input_line(report: RunReport) -> str | None:
    """'input costs 38% of each step (...)', or None for a run without training."""
    return describe_split(report.input_split)


def account_lines(report: RunReport) -> list[str]:
    """The plain-words account, most telling sentence first."""
    cores_allowed = (report.record.env.get("host") or {}).get("cores_allowed")
    return account(report.phases, report.summary, wall_seconds(report), cores_allowed, report.events,
                   report.record.events_dropped)
