"""What a run is doing right now, folded from its samples and events as they arrive:
the open phases, steps so far, step rate and time, epoch. Shared by the live
terminal view, the TensorBoard writer and the Prometheus exporter (pure)."""

from __future__ import annotations

from collections import deque

from tensorgauge.hook.protocol import Kind, PhaseBegin, PhaseEnd, Steps
from tensorgauge.model import Event, Sample

RATE_WINDOW_SECONDS = 5.0


class LiveState:
    def __init__(self):
        self.sample: Sample | None = None
        self.open: dict[tuple[int, object], tuple[str, str]] = {}  # (pid, id) -> (name, kind), in begin order
        self.steps_total = 0
        self.last_step_seconds: float | None = None
        self.epochs_done = 0
        self.epoch_ends: list[tuple[int, float]] = []  # (epoch index, run time), new since last drained
        self._recent: deque[float] = deque()  # step end times within the rate window

    def update(self, sample: Sample | None, events: list[Event]) -> None:
        if sample is not None and sample.processes > 0:  # after the job ends, the tree is empty
            self.sample = sample
        for e in events:
            if e.kind == Kind.PHASE_BEGIN:
                begin = e.read(PhaseBegin)
                self.open[(e.pid, begin.get("id"))] = (str(begin.get("name")), str(begin.get("phase_kind")))
            elif e.kind == Kind.PHASE_END:
                name_kind = self.open.pop((e.pid, e.read(PhaseEnd).get("id")), None)
                if name_kind and name_kind[1] == "epoch":
                    self.epoch_ends.append((self.epochs_done, e.t))
                    self.epochs_done += 1
            elif e.kind == Kind.STEPS:
                steps = e.read(Steps)
                seconds, ends = steps.get("seconds") or [], steps.get("ends") or []
                self.steps_total += len(seconds)
                if seconds:
                    self.last_step_seconds = float(seconds[-1])
                self._recent.extend(float(t) for t in ends)
        now = self.now
        while self._recent and self._recent[0] < now - RATE_WINDOW_SECONDS:
            self._recent.popleft()

    @property
    def now(self) -> float:
        return self.sample.t if self.sample is not None else 0.0

    @property
    def phase(self) -> str | None:
        """The innermost open phase's name."""
        return next(reversed(self.open.values()))[0] if self.open else None

    @property
    def phase_path(self) -> str:
        return " > ".join(name for name, _ in self.open.values())

    @property
    def step_rate(self) -> float:
        """Steps per second over the last RATE_WINDOW_SECONDS (steps arrive in batches: at least 0.5 s)."""
        if not self._recent:
            return 0.0
        span = max(self.now - self._recent[0], 0.5)
        return len(self._recent) / span
