"""``tensorgauge run``: start the job as a child, sample it, record it.

The monitor is this process, never a thread in the job. The job runs in a process
group of its own (which gets the terminal, as under a shell); the monitor waits
between ticks in ``sigtimedwait`` so that the job's end (SIGCHLD) and signals wake
it at once, and passes every signal it gets on to the job's whole group. A
guardian process stops the job's tree if the monitor is killed
(:mod:`.guard`). The loop itself (sample, budget, record, observers) is
:class:`~.monitor.Monitor`; the store is written by :class:`~.writer.StoreWriter`.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorgauge.errors import TensorgaugeError
from tensorgauge.hook.protocol import DIAGNOSE_ENV, EVENTS_ENV, NO_CGROUP_ENV, NO_HOOK_ENV, RUN_ID_ENV, Kind
from tensorgauge.model import RunRecord
from tensorgauge.monitoring.budget import BudgetWatch, kill_tree
from tensorgauge.monitoring.guard import Guard
from tensorgauge.monitoring.job_output import JobOutput
from tensorgauge.monitoring.limits import Budget, check_interval
from tensorgauge.monitoring.monitor import Observer, Sources
from tensorgauge.monitoring.recording import (
    STORE_WAIT_SECONDS,
    Recording,
    new_record,
    new_run_id,
    now_iso,
    working_folder,
)
from tensorgauge.monitoring.run_files import RunFiles, SpaceWatch
from tensorgauge.monitoring.sampler import Sampler
from tensorgauge.own_process import without_own
from tensorgauge.sources import cgroup
from tensorgauge.sources.cluster import worker_identity
from tensorgauge.sources.process_tree import tree_pids
from tensorgauge.sources.reaper import Adopted, process_group, set_subreaper, subreaper
from tensorgauge.store import Store

HOOK_SITE_DIR = Path(__file__).parent.parent / "hook" / "_site"

_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_WAKE_SIGNALS = (signal.SIGCHLD, *_FORWARDED_SIGNALS)
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # passed on, then followed by SIGKILL once the grace period is over
STOP_GRACE_SECONDS = 10.0  # after a SIGTERM or SIGINT passed on, the job's tree is killed if it still runs (docker's)
_OWN_PROCESS_GROUP: dict = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}


@dataclass
class RunResult:
    record: RunRecord
    exit_code: int  # what ``tensorgauge run`` exits with
    warning: str | None = None  # recording stopped early (a full disk, a bug): the job ran on
    rss_peak_bytes: int = 0  # of the samples taken (the end-of-run line needs no reading back)
    phases: int = 0  # phases begun


def resolve_command(command: list[str]) -> list[str]:
    """Check the program exists before anything is recorded."""
    if not command:
        raise TensorgaugeError("nothing to run: give a command after '--', e.g. tensorgauge run -- python train.py")
    program = command[0]
    if os.sep in program:
        if not os.path.isfile(program):
            raise TensorgaugeError(f"command not found: {program}")
        if not os.access(program, os.X_OK):
            raise TensorgaugeError(f"command is not executable: {program}")
        return command
    if shutil.which(program) is None:
        raise TensorgaugeError(f"command not found: {program}")
    return command


def _placed(command: list[str], procs_files: list[str]) -> list[str]:
    """``command``, run by a shell that first writes its own pid into each of the job's cgroup
    folders' ``cgroup.procs`` and then becomes the command (``exec``: the same pid). A write the
    kernel refuses is left to the monitor, which checks and moves the job itself."""
    if not procs_files:
        return command
    place = "".join(f"{{ echo $$ > {shlex.quote(path)}; }} 2>/dev/null; " for path in procs_files)
    return ["/bin/sh", "-c", place + 'exec "$@"', command[0], *command]


def job_environment(events_path: str | None, run_id: str, hook: bool, base: dict | None = None) -> dict:
    """The job's environment: the caller's, plus the channel and the hook on PYTHONPATH."""
    env = without_own(dict(os.environ if base is None else base))
    env[RUN_ID_ENV] = run_id
    if events_path:
        env[EVENTS_ENV] = events_path
    if hook:
        env.pop(NO_HOOK_ENV, None)
        parts = [str(HOOK_SITE_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def run(command: list[str], store: Store, *, interval_seconds: float = 0.1, name: str | None = None,
        hook: bool = True, on_start: Callable[[RunRecord], None] | None = None,
        budget: Budget | None = None, checkpoint_dir: str | None = None, diagnose: str | bool = "auto",
        extra_env: dict[str, str] | None = None, observers: Sequence[Observer] = (),
        job: str | None = None, sources: Sources | None = None,
        report: Callable[[str], None] | None = None, keep_job_on_failure: bool = False,
        store_wait_seconds: float = STORE_WAIT_SECONDS, stop_grace_seconds: float = STOP_GRACE_SECONDS,
        parent_run_id: str | None = None, output: JobOutput | None = None) -> RunResult:
    """Run ``command`` to its end under the monitor and record it in ``store``.

    With a ``budget``, the job is kept inside it (see :mod:`tensorgauge.monitoring.budget`);
    ``checkpoint_dir`` is where a graceful stop leaves a resumable checkpoint; ``diagnose``: the
    input split measured within its cost bound ("auto"), unbounded ("always" or True), or not at
    all ("" or False; see :mod:`tensorgauge.hook.input_window`); ``observers``
    see every sample and event as it is recorded (live view, TensorBoard, Prometheus);
    ``job`` groups the workers of one distributed job (else taken from ``TF_CONFIG``);
    ``sources``: where readings come from (the real ones by default); ``report``: where
    a problem of the monitor's own (an observer failing, a store that fails) is told; ``parent_run_id``:
    the run this one is a trial of (``runs`` lists it under that one).

    The job runs in a process group of its own; signals sent to the monitor go to the
    whole group and every process of its cgroup (a ``setsid`` child left the group), each followed
    by SIGCONT (a stopped job takes it); a SIGTERM or SIGINT not obeyed within ``stop_grace_seconds``
    is followed by SIGKILL of the whole tree, and a SIGINT after either ends the tree at once (Ctrl-C
    twice). If the monitor fails after the job started, or is killed, the job's tree is stopped
    (SIGTERM, then SIGKILL), unless ``keep_job_on_failure``. The store is written on a thread of its
    own: a locked or slow store never holds the loop up; ``store_wait_seconds`` is how long the end of
    the run waits for it. With ``output``, the job writes to its pseudo-terminal instead of the monitor's
    terminal (``run --live``: :mod:`.job_output`), read until the job's end."""
    command = resolve_command(command)
    interval_seconds = check_interval(interval_seconds, "interval_seconds")
    sources = sources or Sources()
    clock = sources.clock
    run_id = new_run_id()
    files = RunFiles(run_id)
    env = job_environment(files.events_path, run_id, hook)
    mode = ("always" if diagnose else "") if isinstance(diagnose, bool) else diagnose
    if mode not in ("auto", "always", ""):
        raise ValueError(f"diagnose must be 'auto', 'always' or '', not {diagnose!r}")
    env[DIAGNOSE_ENV] = mode or "off"  # set either way: a job without it was not started by run (see eager_probe)
    env.update(extra_env or {})
    watch = None
    if budget is not None and not budget.empty:
        watch = BudgetWatch(budget, files.stop_path, checkpoint_dir)
        env.update(watch.environment())
    cwd = working_folder()

    # The job's cgroup (with its caps) and its guardian exist before the job does; the job places itself
    # in the cgroup before its first instruction (see _placed): nothing it forks can start outside.
    group = sources.make_cgroup(run_id, not os.environ.get(NO_CGROUP_ENV))
    if watch:
        watch.limit_cgroup(group)
    was_subreaper = subreaper()
    set_subreaper(True)  # the job's orphans (a daemon's double fork) stay ours to watch, stop and reap
    try:
        job_process = JobProcess.start(command, env, group, files.directory, clock, stop_grace_seconds,
                                       guarded=not keep_job_on_failure, report=report,
                                       inherited=watch.inherited() if watch else contextlib.nullcontext(),
                                       output=output)
    except OSError as exc:
        if output is not None:
            output.close()
        files.remove()
        if group is not None:
            group.remove()
        if was_subreaper is False:
            set_subreaper(False)
        raise TensorgaugeError(f"cannot start {command[0]}: {exc.strerror}") from None
    child, ended, t0, started_at = job_process.child, job_process.ended, job_process.t0, job_process.started_at
    gpus = None
    adopted: Adopted | None = None
    try:
        tree, group = sources.watch_tree(child.pid, run_id, group)
        adopted = getattr(tree, "adopted", None)
        ended.group, ended.adopted = group, adopted
        if watch:
            watch.apply_started(child.pid)
        paths = cgroup.cgroup_paths(child.pid)  # read now: /proc/PID goes with the job
        oom_before = group.oom_kills() if group else cgroup.oom_kill_count(paths)
        gpus = sources.open_gpus()
        job_id, worker = worker_identity(env, job)
        # "gpus": what the driver shows, whatever TensorFlow sees.
        record = new_record(run_id, command, t0, started_at=started_at, cwd=cwd, name=name,
                            interval_seconds=interval_seconds, tree_source="cgroup" if group else "procfs",
                            job_id=job_id, diagnosis=mode or "off", parent_run_id=parent_run_id,
                            env={"host": {**sources.host(), "gpus": gpus.names},
                                                **({"worker": worker} if worker else {})})
        recording = Recording(store, record, clock)
        if on_start:
            on_start(record)
        space = [SpaceWatch(files.directory, report)] if report else []
        monitor = recording.monitor(Sampler(tree, sources.system, gpus, clock, t0), files.events,
                                    interval_seconds, report=report, watch=watch,
                                    kill=lambda: _kill_tree(child.pid, group, adopted),
                                    observers=[*observers, *space])
        monitor.run(ended.wait)
        end = monitor.ended_at or clock.now()  # the job's end, not the last events' reading after it
    except BaseException:
        # Our failure after the job started (a bug, a closed terminal, Ctrl-C twice): never an orphan.
        if not keep_job_on_failure and ended.status is None:
            _stop_tree(ended)
        raise
    finally:
        if gpus is not None:
            gpus.close()
        job_process.release(keep=keep_job_on_failure)
        if output is not None:  # all the job wrote, printed before anything of the monitor's own
            output.close()
        if adopted is not None:  # under a budget, what the job left running is stopped: nothing would watch it
            _end_orphans(adopted, stop=watch is not None and watch.budget.max_memory_bytes is not None)
        if was_subreaper is False:
            set_subreaper(False)
        files.remove()
    oom_after = group.oom_kills() if group else cgroup.oom_kill_count(paths)
    # The cgroup also counts children the job left running (rusage only has waited-for ones).
    group_cpu = (group.cpu_seconds() or 0.0) + getattr(tree, "cpu_before_seconds", 0.0) if group else 0.0
    if group:
        group.remove()  # fails, harmlessly, while a daemon the job left behind lives on

    status, rusage = ended.status, ended.rusage
    assert status is not None  # reaped above
    stored_all = recording.settle(store_wait_seconds)
    record.wall_seconds = end - t0
    record.cpu_seconds_total = max(rusage.ru_utime + rusage.ru_stime, group_cpu)
    record.rss_max_bytes = rusage.ru_maxrss * 1024  # Linux reports KiB
    record.complete = True
    # The kernel's OOM killer, not the watchdog: a kill the budget watch made is its own (said in the budget).
    oom_kills = (oom_before is not None and oom_after is not None and oom_after > oom_before
                 and (watch is None or watch.killed_at is None))
    if os.WIFSIGNALED(status):
        record.signal = os.WTERMSIG(status)
        exit_code = 128 + record.signal
        record.oom_killed = record.signal == signal.SIGKILL and oom_kills
    else:
        record.exit_code = os.WEXITSTATUS(status)
        exit_code = record.exit_code
        # In the job's own cgroup, a kill counted is one of its processes (a wrapper's child) even when
        # the wrapper itself went on to exit normally.
        record.oom_killed = bool(group) and oom_kills
    if watch:
        seen = recording.recorder.seen
        stops = [e for e in seen if e.kind == Kind.BUDGET_STOP]
        failed = [e for e in seen if e.kind == Kind.BUDGET_CHECKPOINT_FAILED]
        gpu = [e.data for e in seen if e.kind == Kind.BUDGET_GPU_MEMORY]
        left = getattr(tree, "left_cgroup", None)
        record.budget = watch.result(record.signal, record.exit_code, record.oom_killed,
                                     stops[-1].data.get("checkpoint") if stops and not failed else None,
                                     {"gpus": gpu[-1].get("gpus"), "error": gpu[-1].get("error")} if gpu else None,
                                     hook_stopped=bool(stops), processes=getattr(tree, "processes", list)(),
                                     memory_counted=getattr(tree, "memory_counted", None),
                                     left_cgroup={"pid": left["pid"], "name": left["name"],
                                                  "t": round(left["at"] - t0, 3)} if left else None)
        resumed = [e.data for e in seen if e.kind == Kind.BUDGET_RESUME]
        if resumed:  # where this run took up a budget stop's training again
            record.budget["resumed"] = {key: resumed[0].get(key) for key in ("checkpoint", "epoch", "step", "steps",
                                                                             "text")}
        if record.wall_seconds:  # what the job really used, to hold against a CPU budget
            record.budget["cores_busy_mean"] = round(record.cpu_seconds_total / record.wall_seconds, 3)
    writer = recording.writer
    stored_all = recording.finish(store_wait_seconds) and stored_all and not writer.state.samples_lost
    warning = monitor.warning
    if writer.removed:
        warning = "the run was removed (tensorgauge rm) while it was recorded: nothing more was stored"
        try:  # what was written between the removal and the writer seeing it
            store.delete_run(run_id)
        except TensorgaugeError:
            pass
        if report:
            report(warning)
    elif not stored_all and warning is None:
        warning = (f"the store did not take everything ({writer.state.error}); "
                   f"{writer.state.samples_lost} of {monitor.samples_taken} samples were lost")
        if report:
            report(warning)
    return RunResult(record=record, exit_code=exit_code, warning=warning, rss_peak_bytes=monitor.rss_peak_bytes,
                     phases=recording.recorder.phases_begun)


def _kill_tree(pid: int, group, adopted: Adopted | None = None) -> None:
    """SIGKILL the job's whole tree: its process group, its cgroup's members, its descendants (one may
    have left the cgroup) and the orphans adopted from it."""
    kill_tree(list(dict.fromkeys([*(group.pids() if group else []), *tree_pids(pid, adopted)])))
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


ORPHAN_GRACE_SECONDS = 0.5


def _end_orphans(adopted: Adopted, stop: bool) -> None:
    """Reap the job's adopted orphans that ended; with ``stop``, SIGTERM those still running (with
    their descendants), SIGKILL what is left after :data:`ORPHAN_GRACE_SECONDS`, and reap them."""
    if stop:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [p for orphan in adopted.pids() for p in tree_pids(orphan)]
            deadline = time.monotonic() + (ORPHAN_GRACE_SECONDS if sig == signal.SIGTERM else 1.0)
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
                    os.kill(pid, signal.SIGCONT)
            while pids and adopted.pids() and time.monotonic() < deadline:
                time.sleep(0.02)
    adopted.reap()


def _stop_tree(ended: _ChildEnd, grace_seconds: float = 3.0) -> None:
    """SIGTERM the job's tree, then SIGKILL what is left after ``grace_seconds``; reaps the job."""
    ended.send(signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        if ended._reap():
            break
        time.sleep(0.02)
    _kill_tree(ended.pid, ended.group, ended.adopted)
    ended.wait(None)


class JobProcess:
    """The job's process while the monitor runs it: started in a process group of its own and placed in
    its cgroup before its first instruction (:func:`_placed`), guarded (the guardian kills it if the
    monitor dies, unless not ``guarded``), given the terminal, and sent every signal the monitor gets
    (:class:`_ChildEnd`); :meth:`release` reaps it and puts the monitor's signals and terminal back."""

    def __init__(self, child: subprocess.Popen, ended: _ChildEnd, guard: Guard | None, terminal: _Terminal,
                 old_mask: set, old_handlers: dict, t0: float, started_at: str):
        self.child, self.ended, self.guard, self.terminal = child, ended, guard, terminal
        self.old_mask, self.old_handlers = old_mask, old_handlers
        self.t0, self.started_at = t0, started_at  # the job's start on the monitor's clock, and in local time

    @classmethod
    def start(cls, command: list[str], env: dict[str, str], group, run_dir: str, clock, stop_grace_seconds: float,
              guarded: bool = True, inherited: Any = None, report: Callable[[str], None] | None = None,
              output: JobOutput | None = None) -> JobProcess:
        """The job started (``inherited``: a context the fork happens in); OSError if it cannot be.
        ``report`` is told when the job's tree is killed for not obeying a stop signal; ``output``: the
        pseudo-terminal its stdout and stderr go to instead of the monitor's."""
        procs = [str(d / "cgroup.procs") for d in group.dirs()] if group else []
        guard = Guard.start(procs, run_dir) if guarded else None
        t0, started_at = clock.now(), now_iso()
        try:
            with inherited if inherited is not None else contextlib.nullcontext():
                streams = output.popen_args() if output is not None else {}  # None: the monitor's own
                child = subprocess.Popen(_placed(command, procs), env=env, stdout=streams.get("stdout"),
                                         stderr=streams.get("stderr"), **_OWN_PROCESS_GROUP)
        except OSError:
            if guard is not None:
                guard.release()
            raise
        if guard is not None:
            guard.watch(child.pid)
        # After the fork: a blocked mask is inherited, and the job must get its signals. Threads
        # started from here on (the store writer) inherit it, so only sigtimedwait takes them.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAKE_SIGNALS)
        if output is not None:
            output.start()
        # Threads started before (numpy's BLAS pool, on import) do not block them: a signal the kernel
        # hands to one of those comes to this handler, in the main thread, instead of killing the monitor.
        ended = _ChildEnd(child.pid, group, stop_grace_seconds, report)
        old_handlers = {sig: signal.signal(sig, ended.on_signal) for sig in _FORWARDED_SIGNALS}
        return cls(child, ended, guard, _Terminal.hand_to(child.pid), old_mask, old_handlers, t0, started_at)

    def release(self, keep: bool = False) -> None:
        """The job reaped (or, with ``keep``, left running if it still is), then the terminal, the signal
        mask (a signal still pending is forwarded now) and handlers put back, and the guardian let go."""
        if self.ended.status is None and not keep:
            self.ended.wait(None)
        self.terminal.take_back()
        signal.pthread_sigmask(signal.SIG_SETMASK, self.old_mask)
        for sig, handler in self.old_handlers.items():
            signal.signal(sig, handler)
        if self.guard is not None:
            self.guard.release()


class _Terminal:
    """Like a shell: a job started from a terminal's foreground gets the terminal, so Ctrl-C and
    Ctrl-\\ reach its whole process group, and it may read the terminal; the monitor takes it back
    at the end. Elsewhere (no terminal, or in the background) nothing changes."""

    def __init__(self, fd: int | None, pgid: int | None):
        self.fd, self.pgid = fd, pgid

    @classmethod
    def hand_to(cls, job_pgid: int) -> _Terminal:
        for fd in (0, 1, 2):
            try:
                if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                    _set_foreground(fd, job_pgid)
                    return cls(fd, os.getpgrp())
            except OSError:
                continue
        return cls(None, None)

    def take_back(self) -> None:
        if self.fd is not None and self.pgid is not None:
            _set_foreground(self.fd, self.pgid)
            self.fd = None


def _set_foreground(fd: int, pgid: int) -> None:
    """``tcsetpgrp`` from a process that may be in the background (SIGTTOU ignored meanwhile)."""
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, pgid)
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, old)


class _ChildEnd:
    """Waits for the child's end while passing the signals sent to the monitor on to the job's tree."""

    def __init__(self, pid: int, group=None, grace_seconds: float = STOP_GRACE_SECONDS,
                 report: Callable[[str], None] | None = None):
        self.pid, self.group, self.grace_seconds, self.report = pid, group, grace_seconds, report
        self.adopted: Adopted | None = None  # the job's orphans this monitor adopted
        self.status: int | None = None
        self.rusage: Any = None  # resource.struct_rusage once reaped
        self.terminate_at: float | None = None  # when the first stop signal (SIGTERM or SIGINT) was passed on
        self.stop_signal: int | None = None  # which one
        self.escalated = False

    def send(self, signum: int) -> None:
        """``signum`` passed on (:meth:`_pass_on`); a stop signal (SIGTERM, SIGINT) starts the grace period,
        and a SIGINT after one (Ctrl-C twice) ends the job's tree at once: SIGTERM, then SIGKILL."""
        if signum == signal.SIGINT and self.terminate_at is not None:
            self._escalate("a second SIGINT" if self.stop_signal == signal.SIGINT else "SIGINT after SIGTERM")
            return
        self._pass_on(signum)
        if signum in _STOP_SIGNALS and self.terminate_at is None:
            self.terminate_at, self.stop_signal = time.monotonic(), signum

    def _pass_on(self, signum: int) -> None:
        """``signum`` to the job's process group and to every member of its cgroup and each of its
        descendants and adopted orphans (a ``setsid`` child has a group of its own), then SIGCONT: a stopped process takes a signal only once it runs."""
        tree = dict.fromkeys([*(self.group.pids() if self.group is not None else []),
                              *tree_pids(self.pid, self.adopted)])  # one may have left the cgroup
        members = [p for p in tree if process_group(p) not in (self.pid, None)]  # the group's own get it once, by killpg
        for sig in (signum, signal.SIGCONT):
            try:
                os.killpg(self.pid, sig)
            except OSError:
                pass
            for member in members:
                try:
                    os.kill(member, sig)
                except OSError:
                    pass

    def on_signal(self, signum: int, frame: Any = None) -> None:
        """A signal handler: one the kernel handed to a thread that does not block it comes here."""
        self.send(signum)

    def _escalate_if_due(self) -> None:
        """A SIGTERM or SIGINT not obeyed within the grace period: SIGKILL the whole tree (once)."""
        if self.terminate_at is not None and not self.escalated and \
                time.monotonic() >= self.terminate_at + self.grace_seconds:
            name = signal.Signals(self.stop_signal or signal.SIGTERM).name
            self._escalate(f"{name} not obeyed within {self.grace_seconds:g} s (--stop-grace)")

    def _escalate(self, why: str) -> None:
        """The job's whole tree ended now (once): SIGTERM, then SIGKILL; ``why`` told through ``report``."""
        if self.escalated:
            return
        self.escalated = True
        if self.report is not None and self.status is None:
            self.report(f"{why}: killing the job's process tree")
        self._pass_on(signal.SIGTERM)
        _kill_tree(self.pid, self.group, self.adopted)

    def _reap(self) -> bool:
        if self.status is not None:
            return True
        waited_pid, status, rusage = os.wait4(self.pid, os.WNOHANG)
        if waited_pid == self.pid:
            self.status, self.rusage = status, rusage
            return True
        return False

    def wait(self, timeout: float | None) -> bool:
        """True once the child has ended; waits at most ``timeout`` seconds (None: until it ends)."""
        if self._reap():
            return True
        if timeout is None:
            _, self.status, self.rusage = os.wait4(self.pid, 0)
            return True
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self._escalate_if_due()
            if self.terminate_at is not None and not self.escalated:
                left = max(0.0, min(left, self.terminate_at + self.grace_seconds - time.monotonic()))
            info = signal.sigtimedwait(_WAKE_SIGNALS, left)
            if info is None:
                continue
            if info.si_signo == signal.SIGCHLD:
                if self._reap():
                    return True
            else:
                # Sent to the monitor (kill, a scheduler, or the terminal while the job does not own it).
                self.send(info.si_signo)
        self._escalate_if_due()
        return self._reap()
