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

A job that writes events in a loop is held to :data:`MAX_EVENTS`: a phase is kept only with room
for its end, which is then always kept, so a phase never reads as cut for want of room. Steps of a
phase that was not kept count in the innermost kept phase still open in their process. A phase
still open at the run's end while events were lost unread (left unread at the end, or lost on the
job's full filesystem) gets a ``phase_end_unrecorded`` event: its end may have been among them.
"""

from __future__ import annotations

from typing import Protocol

from tensorgauge.checks import ValidationError, check_event_data, check_event_times, check_object
from tensorgauge.hook.protocol import MONITOR_KINDS, Env, Kind, PhaseBegin, PhaseEnd, Steps
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
        self.events_dropped = 0  # valid, but past MAX_EVENTS, or lost unread (see lost_unread)
        self._events_kept = 0
        self._losses = 0  # times events were lost unread: a phase open across one may have lost its end
        # pid -> {phase id: self._losses at its begin}: the kept phases not yet ended, in the order they began
        self._open: dict[int, dict[int | None, int]] = {}
        self.phases_begun = 0
        self.seen: list[Event] = []  # events the monitor acts on (budget stops), kept in memory
        self._steps: dict[tuple[int, int | None], _OpenSteps] = {}  # (pid, phase id) -> steps not yet stored

    def lost_unread(self, count: int) -> None:
        """``count`` of the job's events were lost before they could be read (the job could not write them,
        or they were left unread at the run's end): any phase open now may have lost its end among them."""
        if count > 0:
            self.events_dropped += count
            self._losses += 1

    def add(self, samples: list[Sample], raw_events: list[dict], force: bool = False) -> list[Event]:
        """Queue samples and the hook's raw events; commit when due (or ``force``: the run's end).
        Returns the events, converted (for live observers)."""
        added: list[Event] = []
        now = self.clock.now()
        for raw in raw_events:
            lost = raw.get("lost_before") if isinstance(raw, dict) else None
            if isinstance(lost, int) and not isinstance(lost, bool) and 0 < lost < 1 << 40:
                self.lost_unread(lost)  # the job could not write them (its events' disk was full)
            try:
                event = to_event(raw, self.t0, now)
            except (TypeError, ValueError, ArithmeticError, ValidationError):
                self.events_skipped += 1  # not ours, or damaged: skip rather than stop recording
                continue
            if self._admit(event):
                self._take(event)
                added.append(event)
        self._samples.extend(samples)
        if force or now >= self._next_commit:
            run_now = now - self.t0
            for (pid, phase), open_steps in list(self._steps.items()):
                if force or run_now - open_steps.since >= DIGEST_SECONDS:
                    self._store_steps(pid, phase, run_now)
            if force:
                self._mark_unrecorded_ends(run_now)
            self._next_commit = now + self.commit_seconds
            self.store.add(self.record.run_id, self._samples, self._events)
            self._samples, self._events = [], []
        return added

    def _admit(self, event: Event) -> bool:
        """Whether the run keeps ``event`` (else it is counted as dropped). Steps and budget events are
        always kept; a phase's end once its begin was; a phase's begin only with room for its end too;
        anything else while the run keeps fewer than :data:`MAX_EVENTS` of the job's events. A monitor's
        own kind is not the job's to write: skipped."""
        kind = event.kind
        if kind in MONITOR_KINDS:
            self.events_skipped += 1
            return False
        if kind == Kind.STEPS or kind.startswith("budget"):
            return True
        if kind == Kind.PHASE_END and event.read(PhaseEnd).get("id") in self._open.get(event.pid, {}):
            return True
        room = 2 if kind == Kind.PHASE_BEGIN else 1
        if self._events_kept + room > MAX_EVENTS:
            self.events_dropped += 1  # a job writing events in a loop: the run stays readable
            return False
        self._events_kept += room
        return True

    def _take(self, event: Event) -> None:
        """A kept event queued for the store (a ``steps`` one into its phase's digest)."""
        kind = event.kind
        facts = event.read(Env).get("facts") if kind == Kind.ENV else None
        if isinstance(facts, dict):
            self.record.env.setdefault("job", {}).update(facts)
            self.store.save_run(self.record)
        if kind == Kind.STEPS:
            self._add_steps(event)
            return
        if kind == Kind.PHASE_END:
            phase = event.read(PhaseEnd).get("id")
            self._store_steps(event.pid, phase, event.t, ended=True)
            self._open.get(event.pid, {}).pop(phase, None)
        self._events.append(event)
        if kind == Kind.PHASE_BEGIN:
            self.phases_begun += 1
            self._open.setdefault(event.pid, {})[event.read(PhaseBegin).get("id")] = self._losses
        if kind.startswith("budget"):
            self.seen.append(event)

    def _mark_unrecorded_ends(self, t: float) -> None:
        """At the run's end: each kept phase still open that was open when events were lost unread gets a
        ``phase_end_unrecorded`` event (its end may be among them; the analysis does not say the job
        ended inside it)."""
        for pid, phases in self._open.items():
            for phase, losses_at_begin in list(phases.items()):
                if losses_at_begin < self._losses:
                    self._events.append(Event(t=t, pid=pid, kind=Kind.PHASE_END_UNRECORDED, data={"id": phase}))
                    del phases[phase]

    def _steps_phase(self, pid: int, phase: int | None) -> int | None:
        """The phase a ``steps`` event's steps are counted in: its own when it was kept and is open, else
        the innermost kept phase open in its process (its begin was dropped: the steps still count), else
        None (outside any phase)."""
        open_phases = self._open.get(pid)
        if not open_phases:
            return None
        return phase if phase in open_phases else next(reversed(open_phases))

    def _add_steps(self, event: Event) -> None:
        steps = event.read(Steps)
        key = (event.pid, self._steps_phase(event.pid, steps.get("phase")))
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
        if not ended:
            open_steps.digest, open_steps.since = StepDigest(phase), t


class _OpenSteps:
    __slots__ = ("since", "digest", "first_kept")

    def __init__(self, since: float, digest: StepDigest):
        self.since, self.digest, self.first_kept = since, digest, 0
