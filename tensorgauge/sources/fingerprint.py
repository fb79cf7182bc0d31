"""The machine's fingerprint: CPU, cores allowed, flags, memory, OS, Python.

The job's own Python facts (TensorFlow build, oneDNN, devices, BLAS) are sent by
the hook from inside the job, see :mod:`tensorgauge.hook.tfinfo`.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping

import psutil

from tensorgauge.own_process import users_environ
from tensorgauge.sources import cgroup

# CPU flags that change which kernels TensorFlow and oneDNN pick.
TF_RELEVANT_FLAGS = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni")
TF_RELEVANT_PREFIXES = ("avx512", "amx")

# Environment variables that change TensorFlow's threads, kernels or devices.
TF_RELEVANT_ENV = (
    "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS", "TF_ENABLE_ONEDNN_OPTS", "TF_XLA_FLAGS", "CUDA_VISIBLE_DEVICES",
    "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR", "TF_USE_LEGACY_KERAS", "KERAS_BACKEND",
    "TF_CPP_MIN_LOG_LEVEL",
)


def _cpuinfo(path: str = "/proc/cpuinfo") -> tuple[str | None, list[str]]:
    model = None
    flags: list[str] = []
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = value.split()
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or None, flags


def tf_relevant_flags(flags: list[str]) -> list[str]:
    return sorted(f for f in flags if f in TF_RELEVANT_FLAGS or f.startswith(TF_RELEVANT_PREFIXES))


def host_fingerprint(environ: Mapping[str, str] | None = None) -> dict:
    """Facts about this machine that explain how a TensorFlow job behaves on it."""
    env: Mapping[str, str] = users_environ() if environ is None else environ  # not the tool's own settings
    model, flags = _cpuinfo()
    paths = cgroup.cgroup_paths()
    try:
        ram = psutil.virtual_memory().total
    except Exception:
        ram = None
    return {
        "hostname": platform.node(),
        "cpu_model": model,
        "cpu_flags": tf_relevant_flags(flags),
        "cores_logical": psutil.cpu_count(logical=True),
        "cores_physical": psutil.cpu_count(logical=False),
        "cpus_allowed": cgroup.allowed_cpus(),
        "cgroup_cpu_quota_cores": cgroup.cpu_quota_cores(paths),
        "cores_allowed": cgroup.cores_allowed(paths),
        "ram_bytes": ram,
        "cgroup_memory_limit_bytes": cgroup.memory_limit_bytes(paths),
        "os": platform.system(),
        "os_release": _os_release(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "nvidia_driver": nvidia_driver_version(),
        "monitor_python": sys.version.split()[0],
        "env_vars": {k: env[k] for k in TF_RELEVANT_ENV if k in env},
    }


def nvidia_driver_version(path: str = "/proc/driver/nvidia/version") -> str | None:
    """The loaded NVIDIA kernel driver's version (no NVML needed); None without one."""
    try:
        with open(path) as f:
            first = f.readline()
    except OSError:
        return None
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..."
    for word in first.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word
    return None


def _os_release() -> str | None:
    try:
        return platform.freedesktop_os_release().get("PRETTY_NAME")
    except (OSError, AttributeError):
        return None


def driver_gpus() -> dict:
    """What the NVIDIA driver shows, TensorFlow or not: {"gpus": NVML's names, "nvidia_driver": version}."""
    from tensorgauge.sources.nvml import open_gpus

    gpus = open_gpus()
    names = gpus.names
    gpus.close()
    return {"gpus": names, "nvidia_driver": nvidia_driver_version()}
