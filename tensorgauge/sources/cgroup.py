"""Limits the kernel puts on a process: affinity, cgroup CPU quota and memory.

Reads cgroup v2 (``cpu.max``, ``memory.max``, ``memory.events``, ``memory.current``) and v1
(``cpu.cfs_quota_us``, ``memory.limit_in_bytes``, ``memory.oom_control``, ``memory.usage_in_bytes``).
A hybrid host (v1 controllers, cgroup2 at ``/sys/fs/cgroup/unified`` holding none) is read as v1.
``root`` lets tests point at a fake tree of files.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

_UNLIMITED = 1 << 60  # v1 reports "no limit" as a huge number
_FAST_READ_BYTES = 1 << 16


@dataclass
class CgroupPaths:
    """Where each controller's files are for one process (None: not mounted)."""

    unified: Path | None = None
    cpu: Path | None = None
    cpuacct: Path | None = None
    memory: Path | None = None


def cgroup_paths(pid: int | str = "self", root: str = "/") -> CgroupPaths:
    base = Path(root)
    try:
        lines = (base / f"proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return CgroupPaths()
    paths = CgroupPaths()
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":
            candidate = base / "sys/fs/cgroup" / rel
            if (candidate / "cgroup.controllers").exists():
                paths.unified = candidate
            continue
        for controller in controllers.split(","):
            if controller in ("cpu", "cpuacct", "memory"):
                mount = base / "sys/fs/cgroup" / controller
                if not mount.exists():
                    mount = base / "sys/fs/cgroup" / controllers
                candidate = mount / rel
                # Inside a container the path may be relative to a namespaced root.
                if not candidate.exists():
                    candidate = mount
                setattr(paths, controller, candidate)
    return paths


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_quota_cores(paths: CgroupPaths) -> float | None:
    """The cgroup CPU quota in cores (quota / period), None when unlimited."""
    if paths.unified is not None:
        text = _read(paths.unified / "cpu.max")
        if text:
            quota, _, period = text.partition(" ")
            if quota != "max" and period:
                return int(quota) / int(period)
        return None
    if paths.cpu is not None:
        cfs_quota = _read(paths.cpu / "cpu.cfs_quota_us")
        cfs_period = _read(paths.cpu / "cpu.cfs_period_us")
        if cfs_quota and cfs_period and int(cfs_quota) > 0:
            return int(cfs_quota) / int(cfs_period)
    return None


def memory_limit_bytes(paths: CgroupPaths) -> int | None:
    """The cgroup memory limit, None when unlimited or unknown."""
    if paths.unified is not None:
        text = _read(paths.unified / "memory.max")
        return int(text) if text and text != "max" else None
    if paths.memory is not None:
        text = _read(paths.memory / "memory.limit_in_bytes")
        if text and int(text) < _UNLIMITED:
            return int(text)
    return None


def oom_kill_count(paths: CgroupPaths) -> int | None:
    """How many processes the kernel's OOM killer has killed in this cgroup."""
    if paths.unified is not None:
        text = _read(paths.unified / "memory.events")
    elif paths.memory is not None:
        text = _read(paths.memory / "memory.oom_control")
    else:
        return None
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return None


def _read_fast(path: str) -> bytes | None:
    """A small file read with two system calls (``Path.read_text`` costs ~5x more: read between samples)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, _FAST_READ_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat_value(text: bytes | None, *keys: bytes) -> int | None:
    """The first of ``keys`` found in a ``memory.stat`` text (``name value`` lines)."""
    lines = b"\n" + (text or b"")
    for key in keys:
        at = lines.find(b"\n" + key + b" ")
        if at >= 0:
            try:
                return int(lines[at + len(key) + 2:].split(b"\n", 1)[0])
            except ValueError:
                return None
    return None


def _procs_listed(folder: Path) -> list[int]:
    """The processes in a cgroup folder, in the kernel's order (none where it cannot be read)."""
    return [int(pid) for pid in (_read(folder / "cgroup.procs") or "").split() if pid.isdigit()]


def _procs(folder: Path) -> set[int]:
    return set(_procs_listed(folder))


class MemoryCharge:
    """What the kernel charges a cgroup and would not reclaim before its OOM killer acts: its usage
    (v2 ``memory.current``, v1 ``memory.usage_in_bytes``, page cache included) less its inactive file
    cache (``memory.stat``), as cAdvisor's and the kubelet's "working set". At its limit the kernel
    first drops clean inactive cache, so a job that reads a large file is not near its limit for
    that; its own memory, pages its processes share counted once, is. ~30 us a reading."""

    def __init__(self, memory_dir: Path, unified: bool):
        self._usage = str(memory_dir / ("memory.current" if unified else "memory.usage_in_bytes"))
        self._stat = str(memory_dir / "memory.stat")
        self._inactive = (b"inactive_file",) if unified else (b"total_inactive_file", b"inactive_file")

    def read(self) -> int | None:
        """The charge in bytes; None when unreadable."""
        usage = _read_fast(self._usage)
        try:
            charged = int(usage) if usage else None
        except ValueError:
            return None
        if charged is None:
            return None
        return max(0, charged - (_stat_value(_read_fast(self._stat), *self._inactive) or 0))


def allowed_cpus() -> list[int]:
    """CPUs this process may run on (its affinity mask)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def cores_allowed(paths: CgroupPaths | None = None) -> float:
    """Cores the job may use: the affinity mask, capped by the cgroup quota."""
    cores = float(len(allowed_cpus()))
    quota = cpu_quota_cores(paths if paths is not None else cgroup_paths())
    return min(cores, quota) if quota else cores


# An empty cgroup younger than this may be another monitor's, made a moment ago for a job about to join it
# (two runs starting together: one swept the other's, and the other's job then had no cgroup).
STALE_AFTER_SECONDS = 60.0


def _sweep_empty(paths: CgroupPaths, prefix: str) -> None:
    """Remove empty cgroups left by monitors that were killed (rmdir refuses non-empty ones), once they are
    :data:`STALE_AFTER_SECONDS` old."""
    for parent in (p for p in (paths.unified, paths.cpuacct, paths.cpu, paths.memory) if p is not None):
        try:
            stale = [p for p in parent.iterdir() if p.name.startswith(prefix) and p.is_dir()]
        except OSError:
            continue
        for folder in stale:
            if not _old(folder):
                continue
            if not _read(folder / "cgroup.procs"):
                try:
                    folder.rmdir()
                except OSError:
                    pass


def _old(folder: Path) -> bool:
    """``folder`` was made :data:`STALE_AFTER_SECONDS` ago or more (False where it is already gone)."""
    try:
        return time.time() - folder.stat().st_mtime >= STALE_AFTER_SECONDS
    except OSError:
        return False


class JobCgroup:
    """A cgroup of the job's own, made under the monitor's, where the kernel permits.

    Reading the job's CPU here (``cpuacct.usage`` / ``cpu.stat``: per-CPU sums,
    nanoseconds) costs the job nothing, whereas reading ``/proc/PID/stat`` of a
    multi-threaded process locks the run queue of each of its running threads:
    measured, that slowed a 2-core Keras fit by 1.7% at 10 samples a second.
    Membership (``cgroup.procs``) is the job's whole tree, orphans included; on v1 a member is in each
    of the cgroup's hierarchies (:meth:`members`), since each holds it to a part of its budget.
    """

    def __init__(self, cpu_dir: Path, memory_dir: Path | None, unified: bool, quota_dir: Path | None = None):
        """``cpu_dir`` counts CPU (cpuacct), ``quota_dir`` caps it (the cpu controller)."""
        self.cpu_dir, self.memory_dir, self.unified = cpu_dir, memory_dir, unified
        self.quota_dir = quota_dir if quota_dir is not None else (cpu_dir if unified else None)
        self._charge: MemoryCharge | None = None

    @classmethod
    def create(cls, name: str, paths: CgroupPaths | None = None) -> JobCgroup | None:
        """Make the cgroup; None where cgroups are missing or not writable."""
        paths = paths if paths is not None else cgroup_paths()
        _sweep_empty(paths, name.split("-", 1)[0] + "-")
        made: list[Path] = []
        try:
            if paths.unified is not None:
                folder = paths.unified / name
                folder.mkdir()
                return cls(folder, folder, unified=True)
            if paths.cpuacct is None:
                return None
            cpu_dir = paths.cpuacct / name
            cpu_dir.mkdir()
            made.append(cpu_dir)
            memory_dir = quota_dir = None
            if paths.memory is not None:
                memory_dir = paths.memory / name
                memory_dir.mkdir()
                made.append(memory_dir)
            if paths.cpu is not None:
                quota_dir = paths.cpu / name
                if quota_dir != cpu_dir:  # cpu and cpuacct may be mounted together
                    quota_dir.mkdir()
                    made.append(quota_dir)
            return cls(cpu_dir, memory_dir, unified=False, quota_dir=quota_dir)
        except OSError:
            for folder in made:
                try:
                    folder.rmdir()
                except OSError:
                    pass
            return None

    def dirs(self) -> list[Path]:
        """The cgroup's folders (one, or one per v1 hierarchy)."""
        return [d for d in dict.fromkeys([self.cpu_dir, self.memory_dir, self.quota_dir]) if d is not None]

    def limit_memory(self, limit_bytes: int) -> str | None:
        """The kernel's hard memory limit; returns the file written, None if refused."""
        if self.memory_dir is None:
            return None
        name = "memory.max" if self.unified else "memory.limit_in_bytes"
        try:
            (self.memory_dir / name).write_text(str(limit_bytes))
            swap = self.memory_dir / ("memory.swap.max" if self.unified else "memory.memsw.limit_in_bytes")
            if swap.exists():
                swap.write_text("0" if self.unified else str(limit_bytes))
        except OSError:
            return None
        return name

    def limit_cpus(self, cpus: float, period_us: int = 100_000) -> str | None:
        """A CPU quota of ``cpus`` cores; returns the file written, None if refused."""
        if self.quota_dir is None:
            return None
        quota = max(1000, int(cpus * period_us))
        try:
            if self.unified:
                (self.quota_dir / "cpu.max").write_text(f"{quota} {period_us}")
                return "cpu.max"
            (self.quota_dir / "cpu.cfs_period_us").write_text(str(period_us))
            (self.quota_dir / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError:
            return None
        return "cpu.cfs_quota_us"

    def add(self, pid: int) -> bool:
        """Move a process (and its threads) in; False if the kernel refused."""
        try:
            for folder in self.dirs():
                (folder / "cgroup.procs").write_text(str(pid))
        except OSError:
            return False
        return True

    def hierarchies(self) -> dict[Path, str]:
        """Each of the cgroup's folders and what it holds the job to: "unified" on v2; on v1 "cpuacct"
        (counts its CPU), "memory" and "cpu" (its quota), one folder for those mounted together."""
        if self.unified:
            return {self.cpu_dir: "unified"}
        named: dict[Path, list[str]] = {}
        for folder, what in ((self.cpu_dir, "cpuacct"), (self.memory_dir, "memory"), (self.quota_dir, "cpu")):
            if folder is not None:
                named.setdefault(folder, []).append(what)
        return {folder: ",".join(whats) for folder, whats in named.items()}

    def outside(self, pid: int) -> list[str]:
        """The hierarchies (see :meth:`hierarchies`) that ``pid`` is not a member of in this cgroup."""
        return [what for folder, what in self.hierarchies().items() if pid not in _procs(folder)]

    def holds(self, pid: int) -> bool:
        """``pid`` is a member in every one of the cgroup's folders."""
        return not self.outside(pid)

    def cpu_seconds(self) -> float | None:
        """User+system CPU of everything that ran in the cgroup."""
        if self.unified:
            for line in (_read(self.cpu_dir / "cpu.stat") or "").splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
            return None
        text = _read(self.cpu_dir / "cpuacct.usage")
        return int(text) / 1e9 if text else None

    def pids(self) -> list[int]:
        """Every process in any of the cgroup's folders: what stopping the job signals."""
        return list(dict.fromkeys(pid for folder in self.dirs() for pid in _procs_listed(folder)))

    def members(self) -> list[int]:
        """The processes in every one of the cgroup's folders: those its budget holds. On v1 a process
        that left one hierarchy (its memory, say) is not one, though it is still in the others."""
        listed = [_procs_listed(folder) for folder in self.dirs()]
        others = [set(pids) for pids in listed[1:]]
        return [pid for pid in listed[0] if all(pid in inside for inside in others)] if listed else []

    def memory_members(self) -> set[int] | None:
        """The processes charged to the cgroup's memory, read fast (between samples); None without a
        memory controller."""
        if self.memory_dir is None:
            return None
        text = _read_fast(str(self.memory_dir / "cgroup.procs")) or b""
        if len(text) >= _FAST_READ_BYTES:  # more than one read holds: read it whole
            return _procs(self.memory_dir)
        return {int(pid) for pid in text.split() if pid.isdigit()}

    def threads(self) -> int | None:
        text = _read(self.cpu_dir / ("cgroup.threads" if self.unified else "tasks"))
        return len(text.split()) if text is not None else None

    def memory_charged_bytes(self) -> int | None:
        """The job's memory as its cgroup is charged (see :class:`MemoryCharge`); None without a memory
        controller."""
        if self.memory_dir is None:
            return None
        if self._charge is None:
            self._charge = MemoryCharge(self.memory_dir, self.unified)
        return self._charge.read()

    def oom_kills(self) -> int | None:
        if self.memory_dir is None:
            return None
        return oom_kill_count(CgroupPaths(unified=self.memory_dir) if self.unified
                              else CgroupPaths(memory=self.memory_dir))

    def remove(self) -> bool:
        """Remove the cgroup. Processes the job left running move to the parent
        cgroup first (they live on, unwatched). False if the kernel refused."""
        ok = True
        for folder in self.dirs():
            for pid in (_read(folder / "cgroup.procs") or "").split():
                try:
                    (folder.parent / "cgroup.procs").write_text(pid)
                except OSError:
                    pass  # it ended meanwhile
            try:
                folder.rmdir()
            except OSError:
                ok = False
        return ok
