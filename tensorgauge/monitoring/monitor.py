"""The monitoring loop shared by ``tensorgauge run`` and ``tensorgauge.monitor()``.

:class:`Sources` says where readings come from (the real OS, NVML and clock by
default; :class:`tensorgauge.testing.FakeSources` in tests, the way httpx ships
``MockTransport``). :class:`Monitor` owns one run's loop: every tick it takes a
sample, lets the budget watch act on it, hands samples and the hook's events to
the recorder, and shows them to the live observers. A failing observer is
reported once and dropped; a failing tick stops recording (the job runs on) and
is reported: neither is swallowed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tensorgauge.model import Event, RunRecord, Sample
from tensorgauge.monitoring.budget import BudgetWatch
from tensorgauge.monitoring.recorder import Recorder
from tensorgauge.monitoring.sampler import Sampler
from tensorgauge.sources import Clock, Gpus, ProcessTree, System
from tensorgauge.sources.cgroup import JobCgroup


class Observer(Protocol):
    """Sees the run live: each new sample (None on the last, forced tick) and the events that came with it."""

    def observe(self, sample: Sample | None, events: list[Event]) -> None: ...


class Exporter(Observer, Protocol):
    """An output of the live run (Prometheus, TensorBoard, OpenTelemetry, the live view, whatever comes
    next; declared in :mod:`tensorgauge.live.exporters`): started with the run's record, shown each
    sample, closed however the run ends, within ``timeout`` seconds (None: its own bound). What it shows
    of a sample comes from :func:`tensorgauge.model.shown_metrics`, so a new sampled metric needs no
    change in it.

    Optional: ``conclude(report)``, given the analysed run (the ``tensorgauge.run/1`` document) before
    it is closed, and ``dropped``, how many of its exports were lost (said at the run's end)."""

    def start(self, record: RunRecord) -> None: ...

    def close(self, timeout: float | None = None) -> None: ...


class EventSource(Protocol):
    """The job's events (:class:`~tensorgauge.hook.channel.EventReader`). Optional: ``at_end`` and
    ``skip_rest()`` (the last tick's bound), ``tampered`` (why the job's channel is no longer read)."""

    def read_new(self, everything: bool = False) -> list[dict]: ...


EXPORTER_CLOSE_SECONDS = 5.0  # what closing one exporter may take at the run's end (a Collector gone: no hang)
FINAL_READS = 128  # the last tick reads at most this many more chunks of events (8 MiB of 64 KiB)


def _real_cgroup(run_id: str, allowed: bool) -> JobCgroup | None:
    from tensorgauge.sources import cgroup

    return cgroup.JobCgroup.create(f"tensorgauge-{run_id}") if allowed else None


def _real_tree(pid: int, run_id: str, group: JobCgroup | None) -> tuple[ProcessTree, JobCgroup | None]:
    """The job's tree: its cgroup's members (or its /proc tree once it leaves it), else its /proc tree;
    with the orphans of the job this process adopted as a subreaper (see the runner)."""
    from tensorgauge.hook.protocol import RUN_ID_ENV
    from tensorgauge.sources.process_tree import CgroupProcessTree, ProcfsProcessTree, read_stat
    from tensorgauge.sources.reaper import Adopted, own_children

    adopted = Adopted(pid, f"{RUN_ID_ENV}={run_id}".encode(), own_children() - {pid})
    if group is not None:
        if group.holds(pid):  # placed before its first instruction (see the runner)
            return CgroupProcessTree(group, root_pid=pid, adopted=adopted), group
        before = read_stat(pid)  # the few ms the job ran before joining
        if group.add(pid):
            return CgroupProcessTree(group, before[0] if before else 0.0, root_pid=pid, adopted=adopted), group
        group.remove()
    return ProcfsProcessTree(pid, adopted=adopted), None


def _real_gpus() -> Gpus:
    from tensorgauge.sources.nvml import open_gpus

    return open_gpus()


def _real_host() -> dict:
    from tensorgauge.sources.fingerprint import host_fingerprint

    return host_fingerprint()


def _real_system() -> System:
    from tensorgauge.sources.system import PsutilSystem

    return PsutilSystem()


def _real_clock() -> Clock:
    from tensorgauge.sources.clock import MonotonicClock

    return MonotonicClock()


@dataclass
class Sources:
    """Where a run's readings come from; every field has the real source as its default."""

    clock: Clock = field(default_factory=_real_clock)
    system: System = field(default_factory=_real_system)
    open_gpus: Callable[[], Gpus] = _real_gpus
    # (run id, whether a cgroup may be made) -> the job's own cgroup, made before the job starts
    make_cgroup: Callable[[str, bool], JobCgroup | None] = _real_cgroup
    # (pid, run id, the cgroup made for it or None) -> the tree and its cgroup, if it is in one
    watch_tree: Callable[[int, str, JobCgroup | None], tuple[ProcessTree, JobCgroup | None]] = _real_tree
    host: Callable[[], dict] = _real_host


class Monitor:
    """One run's loop: sample, watch the budget, record, show."""

    def __init__(self, sampler: Sampler, recorder: Recorder, events: EventSource, *,
                 interval_seconds: float, watch: BudgetWatch | None = None,
                 kill: Callable[[], None] | None = None, observers: Sequence[Observer] = (),
                 report: Callable[[str], None] | None = None):
        self.sampler, self.recorder, self.events = sampler, recorder, events
        self.clock = sampler.clock
        self.interval_seconds = interval_seconds
        self.watch, self.kill = watch, kill
        self.observers = list(observers)
        self.report = report or (lambda line: None)
        self.samples_taken = 0
        self.rss_peak_bytes = 0
        self.warning: str | None = None  # set when recording stopped early
        self.ended_at: float | None = None  # when the job was seen to end (the clock's time)
        self._store_failure_told = False
        self._tamper_told = False

    def tick(self, force: bool = False) -> None:
        """One round; ``force``: the last one, after the job ended (commits, takes no sample). The sample
        and the budget watch never depend on recording: a recording that failed leaves them running."""
        sample = None if force else self._sample_and_watch()
        if self.warning is None:
            self._record(sample, force)

    def _sample_and_watch(self) -> Sample | None:
        sample = self.sampler.sample()
        if sample is not None:
            self.rss_peak_bytes = max(self.rss_peak_bytes, sample.rss_bytes)
            if self.watch is not None and self.kill is not None:
                self.watch.check(sample, self.kill, self._charged_bytes())
        return sample

    def _charged_bytes(self) -> int | None:
        """The tree's memory as the budget counts it (what the kernel charges), read now; None: a tree
        that cannot say (the sample's RSS is used)."""
        charged = getattr(self.sampler.tree, "charged_bytes", None)
        return charged(self.watch.line_bytes()) if charged is not None and self.watch is not None else None

    def _record(self, sample: Sample | None, force: bool) -> None:
        if sample is not None:
            self.samples_taken += 1
        if force:
            events = self._drain()
        else:  # a chunk a tick: a burst of events is read over several ticks, the samples keep their time
            events = self.recorder.add([sample] if sample else [], self.events.read_new())
        state = getattr(self.recorder.store, "state", None)  # a StoreWriter's: what the store lost
        if state is not None and state.error and not self._store_failure_told:
            self._store_failure_told = True
            self.report(f"the store failed, samples are being lost: {state.error}")
        tampered = getattr(self.events, "tampered", None)
        if tampered and not self._tamper_told:
            self._tamper_told = True
            self.report(tampered)
        for observer in list(self.observers):
            try:
                observer.observe(sample, events)
            except Exception as exc:  # a display or exporter must not stop the recording
                self.observers.remove(observer)
                self.report(f"{type(observer).__name__} stopped: {type(exc).__name__}: {exc}")

    def _drain(self) -> list[Event]:
        """The last tick: the rest of the job's events a chunk at a time (memory stays bounded), up to
        :data:`FINAL_READS` chunks; lines past that are counted as dropped, not read (a job that wrote
        a million lines must not hold its run's end for minutes). Then everything is committed."""
        events: list[Event] = []
        for _ in range(FINAL_READS):
            events += self.recorder.add([], self.events.read_new())
            if getattr(self.events, "at_end", True):
                break
        else:
            skip_rest = getattr(self.events, "skip_rest", None)
            if skip_rest is not None:
                self.recorder.lost_unread(skip_rest())
        return events + self.recorder.add([], [], force=True)

    def _tick_safely(self, force: bool = False) -> None:
        try:
            self.tick(force)
        except Exception as exc:  # a full disk, a bug: stop recording, never the job nor its budget
            if self.warning is None:  # once: a sampling failure after it is not said again
                when = self.clock.now() - self.sampler.t0
                self.warning = f"recording stopped at {when:.1f} s ({type(exc).__name__}: {exc}); the job ran on"
                self.report(self.warning + (" under its budget" if self.watch is not None else ""))

    def run(self, wait_for_end: Callable[[float], bool]) -> None:
        """Tick every ``interval_seconds`` until ``wait_for_end(timeout)`` (which waits at most
        ``timeout`` seconds) says the job has ended (``ended_at``); then the last, forced tick."""
        deadline = self.clock.now()
        while True:
            if wait_for_end(0.0):  # ended since the last wait: no sample of a process being reaped
                break
            self._tick_safely()
            deadline += self.interval_seconds
            now = self.clock.now()
            if deadline < now:  # we fell behind (a stopped machine): do not burst
                deadline = now + self.interval_seconds
            if self._wait(wait_for_end, max(0.0, deadline - self.clock.now())):
                break
        self.ended_at = self.clock.now()
        self._tick_safely(force=True)

    def _wait(self, wait_for_end: Callable[[float], bool], seconds: float) -> bool:
        """``wait_for_end(seconds)``; near the memory budget, in slices with the tree's memory read
        between them, so a job that allocates fast is caught between samples."""
        watch, rss_now = self.watch, getattr(self.sampler.tree, "rss_now", None)
        every = watch.close_check_seconds() if watch is not None else None
        if watch is None or every is None or self.kill is None or rss_now is None:
            return wait_for_end(seconds)
        end = self.clock.now() + seconds
        while True:
            left = end - self.clock.now()
            every = watch.close_check_seconds() or every
            if wait_for_end(max(0.0, min(left, every))):
                return True
            if left <= every:
                return False
            memory = self._charged_bytes()
            if memory is None:
                memory = rss_now()
            if memory is not None:
                watch.check_memory(memory, self.clock.now() - self.sampler.t0, self.kill)

