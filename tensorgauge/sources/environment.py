"""``tensorgauge env``: the fingerprint every run carries, taken for this machine and
this Python: the host's (CPU, cores allowed, memory, GPUs) and the job side's
(Python, numpy's BLAS, TensorFlow's build, oneDNN, devices, thread pools)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from tensorgauge.hook import facts
from tensorgauge.own_process import give_back
from tensorgauge.sources.fingerprint import driver_gpus, host_fingerprint


def environment(progress: Callable[[str], None] | None = None) -> dict:
    """Numpy's BLAS is read as a job would have it: the tool's own settings are undone before numpy
    loads (where it is loaded already, under them, its pools are left out)."""
    as_a_job = give_back()
    host = {**host_fingerprint(), "gpus": driver_gpus()["gpus"]}
    if importlib.util.find_spec("numpy") is not None:
        import numpy  # noqa: F401  (loaded, so its BLAS is listed)
    job = facts.python_facts()
    if not as_a_job:
        job.pop("blas", None)
    if importlib.util.find_spec("tensorflow") is not None:
        if progress:
            progress("importing TensorFlow to read its build")
        job.update(facts.tensorflow_facts())
    return {"host": host, "job": job}
