"""Settings of the tool's own process that the job it runs must not inherit.

Standard library only: set before anything imports numpy.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

# Set here for the tool's own process only: each is taken out of the job's environment.
OWN_SETTINGS: dict[str, str] = {}


def lighten(environ: MutableMapping[str, str] = os.environ, modules: Mapping[str, object] = sys.modules) -> None:
    """One OpenBLAS thread for the monitor's numpy, which never multiplies a matrix: at import, OpenBLAS
    starts a pool of one thread per core that spins (0.07 of the 0.32 CPU-s a run's monitor costs at
    the least, on 2 cores). Only where the user set none and numpy is not loaded yet."""
    if "numpy" in modules or "OPENBLAS_NUM_THREADS" in environ:
        return
    environ["OPENBLAS_NUM_THREADS"] = OWN_SETTINGS["OPENBLAS_NUM_THREADS"] = "1"


def without_own(env: dict[str, str]) -> dict[str, str]:
    """``env`` less the settings :func:`lighten` made for the tool's process (a value changed since is kept)."""
    for name, value in OWN_SETTINGS.items():
        if env.get(name) == value:
            del env[name]
    return env


def users_environ(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment as the user set it: what the tool records of it (the fingerprint), never its own settings."""
    return without_own(dict(environ))


def give_back(environ: MutableMapping[str, str] = os.environ, modules: Mapping[str, object] = sys.modules) -> bool:
    """Undo :func:`lighten` before numpy loads, for a command that reads its BLAS as a job would have it
    (``tensorgauge env``); False when numpy is loaded already (under the tool's settings)."""
    if "numpy" in modules:
        return not OWN_SETTINGS
    for name, value in list(OWN_SETTINGS.items()):
        if environ.get(name) == value:
            del environ[name]
        del OWN_SETTINGS[name]
    return True
