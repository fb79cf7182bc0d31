"""Phases and steps inside the job: a per-process stack that sends events.

Standard library only. Used by the automatic TensorFlow/Keras patches and by
the public API (``tensorgauge.phase``, ``tensorgauge.step``). Everything here
is cheap (a step costs one ``time.monotonic()`` and an append) and never
raises into the job: a broken channel just makes it silent.
"""

from __future__ import annotations

import os
import threading
import time

from tensorgauge.hook.channel import channel
from tensorgauge.hook.protocol import Kind

STEP_FLUSH_SECONDS = 0.5
STEP_FLUSH_COUNT = 512


class _Open:
    """A phase that has begun and not ended."""

    __slots__ = ("id", "kind", "auto", "pending_step", "last_mark", "durations", "ends", "last_flush")

    def __init__(self, phase_id: int, kind: str, auto: bool, now: float):
        self.id, self.kind, self.auto = phase_id, kind, auto
        self.pending_step: float | None = None  # begin time of a step not yet closed
        self.last_mark = now  # for end-marked steps (tensorgauge.step)
        self.durations: list[float] = []
        self.ends: list[float] = []
        self.last_flush = now


class Agent:
    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.RLock()
        self._stack: list[_Open] = []
        self._next_id = 1

    def reset_after_fork(self) -> None:
        self._lock = threading.RLock()
        self._stack = []

    # -- phases ------------------------------------------------------------------

    def current(self) -> _Open | None:
        return self._stack[-1] if self._stack else None

    def inside(self, kind: str) -> bool:
        return any(p.kind == kind for p in self._stack)

    def begin(self, name: str, kind: str = "custom", auto: bool = False) -> int | None:
        """Open a phase; returns its id. An automatic phase inside one of its own
        kind (Model.save calling save_model) is not opened again: returns None."""
        with self._lock:
            top = self.current()
            if auto and top is not None and top.auto and top.kind == kind:
                return None
            now = self._clock()
            if top is not None:
                self._close_step(top, now)  # a child phase ends the parent's running step
            phase = _Open(self._next_id, kind, auto, now)
            self._next_id += 1
            self._stack.append(phase)
            channel().emit(Kind.PHASE_BEGIN, id=phase.id, name=name, phase_kind=kind,
                           parent=top.id if top else None)
            return phase.id

    def end(self, phase_id: int | None, error: BaseException | None = None) -> None:
        """Close the phase (and any left open inside it)."""
        if phase_id is None:
            return
        with self._lock:
            ids = [p.id for p in self._stack]
            if phase_id not in ids:
                return
            now = self._clock()
            while self._stack:
                phase = self._stack.pop()
                self._close_step(phase, now)
                self._flush_steps(phase, now)
                data: dict[str, object] = {"id": phase.id}
                if error is not None:
                    data["error"] = type(error).__name__
                channel().emit(Kind.PHASE_END, **data)
                if phase.id == phase_id:
                    break

    # -- phases kept off the stack (recognised after they began: a custom training loop) ------

    def open_detached(self, name: str, kind: str, parent: int | None, at: float, cpu: float | None) -> _Open:
        """A phase that began at ``at`` (when the process's CPU was ``cpu`` seconds), kept off the
        stack: phases the job opens meanwhile are not its children here (the analysis nests those
        inside its span), and it ends only by :meth:`close_detached`."""
        with self._lock:
            phase = _Open(self._next_id, kind, True, at)
            self._next_id += 1
            channel().emit(Kind.PHASE_BEGIN, id=phase.id, name=name, phase_kind=kind, parent=parent, t=at, cpu=cpu)
            return phase

    def record_step(self, phase: _Open, seconds: float, end: float) -> None:
        with self._lock:
            self._record_step(phase, seconds, end)

    def close_detached(self, phase: _Open, at: float, cpu: float | None) -> None:
        with self._lock:
            self._flush_steps(phase, at)
            channel().emit(Kind.PHASE_END, id=phase.id, t=at, cpu=cpu)

    # -- steps -------------------------------------------------------------------

    def step_begin(self) -> None:
        """A step starts (Keras batch begin): closes the previous one."""
        phase = self.current()
        if phase is None:
            return
        now = self._clock()
        self._close_step(phase, now)
        phase.pending_step = now

    def step_end(self) -> None:
        """A step just ended (``tensorgauge.step()``): it began at the previous mark."""
        phase = self.current()
        if phase is None:
            return
        now = self._clock()
        if phase.pending_step is not None:
            self._close_step(phase, now)
        else:
            self._record_step(phase, now - phase.last_mark, now)
        phase.last_mark = now

    def _close_step(self, phase: _Open, now: float) -> None:
        if phase.pending_step is not None:
            self._record_step(phase, now - phase.pending_step, now)
            phase.pending_step = None
            phase.last_mark = now

    def _record_step(self, phase: _Open, seconds: float, now: float) -> None:
        phase.durations.append(seconds)
        phase.ends.append(now)
        if len(phase.durations) >= STEP_FLUSH_COUNT or now - phase.last_flush >= STEP_FLUSH_SECONDS:
            self._flush_steps(phase, now)

    def _flush_steps(self, phase: _Open, now: float) -> None:
        if phase.durations:
            channel().emit(Kind.STEPS, phase=phase.id, seconds=[round(d, 7) for d in phase.durations],
                           ends=phase.ends)
            phase.durations, phase.ends = [], []
        phase.last_flush = now


_agent = Agent()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_agent.reset_after_fork)


def agent() -> Agent:
    return _agent
