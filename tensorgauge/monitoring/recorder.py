"""Writes one run into the store as it happens: samples and the hook's events.

Event times arrive on the system-wide monotonic clock and are stored relative
to the run's start ``t0``; environment facts from the job are merged into the
run's fingerprint. Writes are committed at most every ``commit_seconds``
(a commit costs ~0.25 ms, a quarter of the monitor's budget at 10 Hz): the
job's death loses nothing, a SIGKILL of the monitor at most that long.

The hook's ``steps`` events (every step's duration and end) are not stored as
they come: each phase's steps become ``step_digest`` events (see
:mod:`tensorgauge.steps`), one when the phase ends and one every
:data:`DIGEST_SECONDS` of a long phase, so a day of steps costs a few MB.
Observers (the live view) still get every ``steps`` event.
"""

from __future__ import annotations

from typing import Protocol

from tensorgauge.checks import ValidationError, check_event_data, check_event_times, check_object
from tensorgauge.hook.protocol import Env, Kind, PhaseEnd, Steps
from tensorgauge.model import Event, RunRecord, Sample
from tensorgauge.steps import FIRST_STEPS, StepDigest

DIGEST_SECONDS = 60.0  # a phase's steps are stored at least this often
MAX_EVENTS = 50_000  # the job's events a run stores (its steps, digested, and budget events are always kept)


def to_event(raw: dict, t0: float, now: float | None = None) -> Event:
    """The hook's raw event, checked against the protocol, on the run's clock;
    :class:`~tensorgauge.checks.ValidationError` when it does not match, or (with ``now``, the
    monitor's clock) when its times lie outside the run (:func:`~tensorgauge.checks.check_event_times`)."""
    check_object(raw, {"t": "number", "pid": "int?", "kind": "text"}, "event", ("t", "kind"))
    data = check_event_data(raw["kind"], {k: v for k, v in raw.items() if k not in ("t", "pid", "kind", "lost_before")},
                            "event")
    if raw["kind"] == Kind.STEPS and isinstance(data.get("ends"), list):
        data["ends"] = [round(float(x) - t0, 6) for x in data["ends"]]
    t = float(raw["t"]) - t0
    if now is not None:
        check_event_times(raw["kind"], t, data, now - t0, "event")
    return Event(t=t, pid=int(raw.get("pid") or 0), kind=str(raw["kind"]), data=data)


class Sink(Protocol):
    """Where records go: a :class:`~tensorgauge.store.Store`, or a :class:`~.writer.StoreWriter` in front of one."""

    def add(self, run_id: str, samples: list[Sample], events: list[Event]) -> None: ...

    def save_run(self, record: RunRecord) -> object: ...


class Recorder:
    def __init__(self, store: Sink, record: RunRecord, t0: float, clock=None, commit_seconds: float = 0.5):
        from tensorgauge.sources.clock import MonotonicClock

        self.store, self.record, self.t0 = store, record, t0
        self.clock = clock or MonotonicClock()
        self.commit_seconds = commit_seconds
        self._samples: list[Sample] = []
        self._events: list[Event] = []
        self._next_commit = 0.0
        self.events_skipped = 0
        self.events_dropped = 0  # valid, but past MAX_EVENTS (or left unread at the end: see the monitor)
        self._events_kept = 0
        self.phases_begun = 0
        self.seen: list[Event] = []  # events the monitor acts on (budget stops), kept in memory
        self._steps: dict[tuple[int, int | None], _OpenSteps] = {}  # (pid, phase id) -> steps not yet stored

    def add(self, samples: list[Sample], raw_events: list[dict], force: bool = False) -> list[Event]:
        """Queue samples and the hook's raw events; commit when due (or ``force``).
        Returns the events, converted (for live observers)."""
        added: list[Event] = []
        now = self.clock.now()
        for raw in raw_events:
            lost = raw.get("lost_before") if isinstance(raw, dict) else None
            if isinstance(lost, int) and not isinstance(lost, bool) and 0 < lost < 1 << 40:
                self.events_dropped += lost  # the job could not write them (its events' disk was full)
            try:
                event = to_event(raw, self.t0, now)
            except (TypeError, ValueError, ArithmeticError, ValidationError):
                self.events_skipped += 1  # not ours, or damaged: skip rather than stop recording
                continue
            if event.kind != Kind.STEPS and not event.kind.startswith("budget"):
                if self._events_kept >= MAX_EVENTS:
                    self.events_dropped += 1  # a job writing events in a loop: the run stays readable
                    continue
                self._events_kept += 1
            facts = event.read(Env).get("facts") if event.kind == Kind.ENV else None
            if isinstance(facts, dict):
                self.record.env.setdefault("job", {}).update(facts)
                self.store.save_run(self.record)
            added.append(event)
            if event.kind == Kind.STEPS:
                self._add_steps(event)
                continue
            if event.kind == Kind.PHASE_END:
                self._store_steps(event.pid, event.read(PhaseEnd).get("id"), event.t, ended=True)
            self._events.append(event)
            if event.kind == Kind.PHASE_BEGIN:
                self.phases_begun += 1
            if event.kind.startswith("budget"):
                self.seen.append(event)
        self._samples.extend(samples)
        if force or now >= self._next_commit:
            run_now = now - self.t0
            for (pid, phase), open_steps in list(self._steps.items()):
                if force or run_now - open_steps.since >= DIGEST_SECONDS:
                    self._store_steps(pid, phase, run_now)
            self._next_commit = now + self.commit_seconds
            self.store.add(self.record.run_id, self._samples, self._events)
            self._samples, self._events = [], []
        return added

    def _add_steps(self, event: Event) -> None:
        steps = event.read(Steps)
        key = (event.pid, steps.get("phase"))
        open_steps = self._steps.get(key)
        if open_steps is None:
            open_steps = self._steps[key] = _OpenSteps(event.t, StepDigest(key[1]))
        seconds = [x for x in steps.get("seconds") or () if isinstance(x, (int, float))]
        ends = steps.get("ends")
        open_steps.digest.add(seconds, ends if isinstance(ends, list) else None,
                              first_room=FIRST_STEPS - open_steps.first_kept)
        open_steps.first_kept = min(FIRST_STEPS, open_steps.first_kept + len(seconds))

    def _store_steps(self, pid: int, phase: int | None, t: float, ended: bool = False) -> None:
        """The phase's steps since the last digest, as a ``step_digest`` event (``ended``: the phase's last)."""
        open_steps = self._steps.pop((pid, phase), None) if ended else self._steps.get((pid, phase))
        if open_steps is None or not open_steps.digest.count:
            return
        self._events.append(Event(t=t, pid=pid, kind=Kind.STEP_DIGEST, data=open_steps.digest.to_payload()))
        open_steps.digest, open_steps.since = StepDigest(phase), t


class _OpenSteps:
    __slots__ = ("since", "digest", "first_kept")

    def __init__(self, since: float, digest: StepDigest):
        self.since, self.digest, self.first_kept = since, digest, 0
