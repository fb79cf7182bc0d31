"""Marking phases and steps from the job's own code (custom loops, notebooks)."""

from __future__ import annotations

import contextlib

from tensorgauge.hook.agent import agent


class phase(contextlib.ContextDecorator):
    """``with tensorgauge.phase("name"):`` or ``@tensorgauge.phase("name")``.

    ``kind`` is one of the phase kinds (default ``custom``); phases nest.
    """

    def __init__(self, name: str, kind: str = "custom"):
        self.name, self.kind = str(name), kind
        self._ids: list[int | None] = []

    def __enter__(self):
        self._ids.append(agent().begin(self.name, self.kind))
        return self

    def __exit__(self, exc_type, exc, tb):
        agent().end(self._ids.pop(), exc)
        return False


def step() -> None:
    """Mark the end of one training step in the innermost phase."""
    agent().step_end()
