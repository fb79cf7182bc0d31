"""Limits the kernel puts on a process: affinity, cgroup CPU quota and memory.

Reads cgroup v2 (``cpu.max``, ``memory.max``, ``memory.events``) and v1
(``cpu.cfs_quota_us``, ``memory.limit_in_bytes``, ``memory.oom_control``).
``root`` lets tests point at a fake tree of files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_UNLIMITED = 1 << 60  # v1 reports "no limit" as a huge number


@dataclass
class CgroupPaths:
    """Where each controller's files are for one process (None: not mounted)."""

    unified: Path | None = None
    cpu: Path | None = None
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
            if controller in ("cpu", "memory"):
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
        quota = _read(paths.cpu / "cpu.cfs_quota_us")
        period = _read(paths.cpu / "cpu.cfs_period_us")
        if quota and period and int(quota) > 0:
            return int(quota) / int(period)
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
