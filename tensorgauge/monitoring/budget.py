"""Applying a budget to the job and watching it from the monitor.

Memory: the kernel's cgroup limit where the job has a cgroup (a hard cap), and
in any case the sampler's watch: at the soft line (90%) the job is asked to
stop gracefully (see :mod:`tensorgauge.hook.budget`); past the budget the tree
is killed. CPUs: TensorFlow's and BLAS's thread pools sized before TF starts,
an affinity mask, and a cgroup CPU quota where permitted.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import signal
from dataclasses import dataclass, field

from tensorgauge.hook import protocol
from tensorgauge.model import Sample
from tensorgauge.monitoring.limits import Budget, thread_pools
from tensorgauge.monitoring.run_files import create_private
from tensorgauge.sources.cgroup import JobCgroup, allowed_cpus


def data_backstop_bytes(budget_bytes: int) -> int:
    """RLIMIT_DATA for a job without a cgroup: well above the budget, since it counts private writable
    address space, not RSS (a TensorFlow fit on 2 cores: 369 MiB of it beside 526 MiB RSS; 8 MiB of
    thread stack each on a many-core machine). It stops a runaway that the watchdog missed."""
    return max(2 * budget_bytes, budget_bytes + (1 << 30))


# From these shares of the memory budget the tree's RSS is also read between samples, this often
# (reading /proc/PID/statm: ~10 us a process, 0.2% of a core at 5 ms). From the start: a list of
# 1 MB bytearrays grows ~2 GB/s on 2 cores, from nothing past a 200 MiB budget between two samples.
CLOSE_CHECKS = ((0.6, 0.002), (0.0, 0.005))


@dataclass
class BudgetWatch:
    budget: Budget
    stop_file: str
    checkpoint_dir: str | None
    stop_requested_at: float | None = None
    killed_at: float | None = None
    peak_bytes: int = 0
    peak_t: float | None = None
    gpu_peak_bytes: int | None = None  # the job's own GPU memory (NVML per process), all GPUs together
    reason: str | None = None
    kernel_killed_at: float | None = None  # when a kill by the kernel at the cgroup's limit was seen
    _kernel_caps_memory: bool = False
    _capped: JobCgroup | None = None  # the cgroup whose memory limit the kernel holds
    _oom_kills_before: int = 0
    _held: dict[str, str] = field(default_factory=dict)  # what the kernel took, by kind

    def environment(self) -> dict[str, str]:
        """What the job's environment needs before it starts."""
        env = {protocol.STOP_FILE_ENV: self.stop_file}
        if self.checkpoint_dir:
            env[protocol.CHECKPOINT_ENV] = self.checkpoint_dir
        if self.budget.max_cpus is not None:
            env.update(thread_pools(self.budget.max_cpus))
        if self.budget.max_gpu_memory_bytes is not None:
            env[protocol.GPU_MEMORY_ENV] = str(self.budget.max_gpu_memory_bytes)
        return env

    def limit_cgroup(self, group: JobCgroup | None) -> None:
        """The kernel's caps on the job's cgroup, set before the job is placed in it."""
        b = self.budget
        if group is None:
            return
        if b.max_cpus is not None and group.limit_cpus(b.max_cpus):
            self._held["quota"] = f"cgroup CPU quota {b.max_cpus:g}"
        if b.max_memory_bytes is not None and group.limit_memory(b.max_memory_bytes):
            self._kernel_caps_memory, self._capped = True, group
            self._oom_kills_before = group.oom_kills() or 0
            self._held["cgroup memory"] = "cgroup memory limit"

    @contextlib.contextmanager
    def inherited(self):
        """While the job is started: the monitor's own thread carries the affinity mask and, without a
        kernel memory cap, the RLIMIT_DATA backstop, so the job has both from its first instruction
        (and whatever it forks at once with it); the monitor's own are put back after. Then
        :meth:`apply_started`."""
        own_cpus = own_data = None
        try:
            cpus = self._cpus()
            if cpus is not None:
                with contextlib.suppress(AttributeError, OSError):
                    own_cpus = os.sched_getaffinity(0)
                    os.sched_setaffinity(0, cpus)
            backstop = self._backstop()
            if backstop is not None:
                with contextlib.suppress(AttributeError, OSError, ValueError):
                    # The soft limit only: a lowered hard limit could not be raised back (apply_started sets it).
                    own_data = resource.getrlimit(resource.RLIMIT_DATA)
                    resource.setrlimit(resource.RLIMIT_DATA, (backstop, own_data[1]))
            yield
        finally:
            with contextlib.suppress(AttributeError, OSError, ValueError):
                if own_cpus is not None:
                    os.sched_setaffinity(0, own_cpus)
                if own_data is not None:
                    resource.setrlimit(resource.RLIMIT_DATA, own_data)

    def apply(self, pid: int, group: JobCgroup | None) -> None:
        """All limits, applied to a job already running (one this monitor did not start itself)."""
        self.limit_cgroup(group)
        cpus = self._cpus()
        if cpus is not None:
            with contextlib.suppress(AttributeError, OSError):
                os.sched_setaffinity(pid, cpus)
        self.apply_started(pid)

    def apply_started(self, pid: int) -> None:
        """Once the job runs: its backstop's hard limit too, and what it holds, read back from it."""
        cpus = self._cpus()
        with contextlib.suppress(AttributeError, OSError):
            if cpus is not None and sorted(os.sched_getaffinity(pid)) == cpus:
                self._held["affinity"] = f"affinity {cpus}"
        backstop = self._backstop()
        if backstop is not None:
            with contextlib.suppress(AttributeError, OSError, ValueError):
                resource.prlimit(pid, resource.RLIMIT_DATA, (backstop, backstop))
                self._held["backstop"] = f"RLIMIT_DATA backstop at {backstop >> 20} MiB"

    def _cpus(self) -> list[int] | None:
        if self.budget.max_cpus is None:
            return None
        return allowed_cpus()[: max(1, math.ceil(self.budget.max_cpus))]

    def _backstop(self) -> int | None:
        """No cgroup: a last line the kernel holds even if the monitor stalls."""
        if self.budget.max_memory_bytes is None or self._kernel_caps_memory:
            return None
        return data_backstop_bytes(self.budget.max_memory_bytes)

    @property
    def enforced_by(self) -> list[str]:
        """What holds the budget, in a fixed order: CPU's means, then memory's."""
        b, held = self.budget, self._held
        out = []
        if b.max_cpus is not None:
            out.append(f"TF/BLAS thread pools = {math.ceil(b.max_cpus)}")
            out += [held[k] for k in ("affinity", "quota") if k in held]
        if b.max_memory_bytes is not None:
            out += [held[k] for k in ("cgroup memory",) if k in held]
            out.append("watchdog (graceful stop at 90%, kill past 100%)")
            out += [held[k] for k in ("backstop",) if k in held]
        return out

    def line_bytes(self) -> int | None:
        """The memory figure the watch acts at next: the soft line, then the budget (None: nothing left)."""
        if self.killed_at is not None:
            return None
        return self.budget.soft_memory_bytes if self.stop_requested_at is None else self.budget.max_memory_bytes

    def check(self, sample: Sample, kill_tree, memory_bytes: int | None = None) -> None:
        """Called with every sample: ask for a stop at the soft line, kill past the budget.
        ``memory_bytes``: the tree's memory as the kernel charges it (the sample's RSS sum if None)."""
        held = [g.job_memory_bytes for g in sample.gpus if g.job_memory_bytes is not None]
        if held and sum(held) > (self.gpu_peak_bytes or 0):
            self.gpu_peak_bytes = sum(held)
        self.check_memory(sample.rss_bytes if memory_bytes is None else memory_bytes, sample.t, kill_tree)
        self.check_kernel_kill(sample.t, kill_tree)

    def check_kernel_kill(self, t: float, kill_tree) -> None:
        """A process of the job that the kernel killed at the cgroup's memory limit stops the whole job: a
        wrapper (``sh -c "python train.py; true"``) would otherwise run on and exit 0."""
        if self._capped is None or self.killed_at is not None or self.kernel_killed_at is not None:
            return
        kills = self._capped.oom_kills()
        if kills is not None and kills > self._oom_kills_before:
            self.kernel_killed_at = t
            kill_tree()

    def check_memory(self, memory_bytes: int, t: float, kill_tree) -> None:
        """The memory part of :meth:`check`, also called between samples while the job is near its budget."""
        if memory_bytes > self.peak_bytes:
            self.peak_bytes, self.peak_t = memory_bytes, t
        limit, soft = self.budget.max_memory_bytes, self.budget.soft_memory_bytes
        if limit is None or soft is None:
            return
        if memory_bytes >= soft and self.stop_requested_at is None:
            self.stop_requested_at = t
            self.reason = (f"memory reached {memory_bytes / limit:.0%} of the budget at {t:.1f} s: "
                           "asked the job to checkpoint and stop")
            create_private(self.stop_file, f"{t}\n")
        if memory_bytes > limit and self.killed_at is None:
            self.killed_at = t
            self.reason = f"memory passed the budget at {t:.1f} s: the job was killed"
            kill_tree()

    def close_check_seconds(self) -> float | None:
        """With a memory budget: how often to check between samples too (more often near it)."""
        limit = self.budget.max_memory_bytes
        if limit is None or self.killed_at is not None:
            return None
        return next((every for share, every in CLOSE_CHECKS if self.peak_bytes >= share * limit), None)

    def result(self, exit_status_signal: int | None, exit_code: int | None, oom_killed: bool,
               checkpoint: str | None, gpu_memory_limit: dict | None = None, hook_stopped: bool = False,
               processes: list[dict] | None = None, memory_counted: str | None = None,
               left_cgroup: dict | None = None) -> dict:
        """The run's ``budget`` record. ``checkpoint``: the one the hook wrote (None if it failed);
        ``gpu_memory_limit``: what the hook reported when it set TensorFlow's GPU memory limit
        ({"gpus", "error"}; None: TensorFlow never started); ``hook_stopped``: the hook stopped
        training because the monitor asked; ``processes``: the job's largest (pid, name, RSS peak);
        ``memory_counted``: what the peak counts; ``left_cgroup``: {"pid", "name", "t", "hierarchies"} of a
        process of the job that left its cgroup (in those hierarchies the kernel no longer holds it; watched as
        a tree). Exit 75 alone is the job's own, not a budget stop; a graceful stop is one still when a
        wrapper of the stopped process exits otherwise."""
        kernel_stop = self._kernel_caps_memory and (oom_killed or self.kernel_killed_at is not None)
        graceful = (hook_stopped and self.stop_requested_at is not None and self.killed_at is None
                    and not kernel_stop and exit_status_signal is None and exit_code is not None)
        stopped = graceful or self.killed_at is not None or kernel_stop
        reason = self.reason
        if kernel_stop and self.killed_at is None:
            largest = (processes or [{}])[0].get("name")
            reason = (f"the kernel killed the job{f' ({largest})' if largest else ''} at the cgroup memory limit "
                      "before it could stop" + ("; the rest of the job was stopped then"
                                                if self.kernel_killed_at is not None else ""))
        enforced_by = self._enforced_by(left_cgroup, gpu_memory_limit)
        return {**self.budget.to_dict(), "soft_memory_bytes": self.budget.soft_memory_bytes,
                "stopped": stopped, "reason": reason if stopped else None,
                "checkpoint": checkpoint if graceful else None,  # resumable only after a graceful stop
                "graceful": graceful, "peak_bytes": self.peak_bytes,
                "peak_t": self.peak_t, "stop_requested_at": self.stop_requested_at, "killed_at": self.killed_at,
                "memory_counted": memory_counted, "left_cgroup": left_cgroup,
                "gpu_memory_peak_bytes": self.gpu_peak_bytes, "gpu_memory_limit": gpu_memory_limit,
                "enforced_by": enforced_by, "processes": processes or []}

    def _enforced_by(self, left_cgroup: dict | None, gpu_memory_limit: dict | None) -> list[str]:
        """:attr:`enforced_by`, a kernel cap a process left said so, and the GPU's means."""
        enforced_by = list(self.enforced_by)
        if left_cgroup is not None:
            left = set(left_cgroup.get("hierarchies") or ["unified", "memory", "cpu"])
            for i, held in enumerate(enforced_by):
                if (held == self._held.get("cgroup memory") and left & {"unified", "memory"}) or \
                        (held == self._held.get("quota") and left & {"unified", "cpu"}):
                    enforced_by[i] = held + _until_left(left_cgroup)
        if self.budget.max_gpu_memory_bytes is not None:
            if gpu_memory_limit and gpu_memory_limit.get("gpus") and not gpu_memory_limit.get("error"):
                enforced_by.append("TF logical GPU memory_limit")
            if self.gpu_peak_bytes is not None:
                enforced_by.append("NVML check of the job's GPU memory")
        return enforced_by


def _until_left(left_cgroup: dict) -> str:
    return (f" (until {left_cgroup.get('name') or 'a process'}, pid {left_cgroup.get('pid')}, left the cgroup"
            f"{' (' + ', '.join(left_cgroup['hierarchies']) + ')' if left_cgroup.get('hierarchies') else ''} "
            f"at {left_cgroup.get('t', 0.0):.1f} s: its process tree watched from then)")


def run_exit_code(budget: dict, job_exit_code: int, signalled: bool) -> int:
    """What ``run`` exits with under a budget: a budget stop is never a success, whatever a wrapper of the
    stopped process (``sh -c "python train.py; true"``) did after it: 75 after a graceful stop, 128+N where
    signal N ended the job, else 128+SIGKILL (a process of the job was killed, its wrapper exited itself)."""
    if not budget.get("stopped"):
        return job_exit_code
    if budget.get("graceful"):
        return protocol.BUDGET_EXIT_CODE
    return job_exit_code if signalled else 128 + signal.SIGKILL


def kill_tree(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
