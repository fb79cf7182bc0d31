"""tensorgauge: measure and explain how a TensorFlow/Keras job uses CPU, memory and GPU.

In a job (works with or without ``tensorgauge run``; silent without a monitor)::

    import tensorgauge
    with tensorgauge.phase("augment"):
        ...
    for batch in data:
        train_step(batch)
        tensorgauge.step()

    with tensorgauge.monitor(name="notebook"):   # record in-process, no CLI
        model.fit(...)

In a notebook: ``%load_ext tensorgauge``, then ``%%tensorgauge`` records a cell
(see :mod:`tensorgauge.notebook`).

Importing this package is cheap and imports neither TensorFlow nor psutil.
"""

from __future__ import annotations

from tensorgauge._version import __version__

__all__ = ["phase", "step", "monitor", "keras", "__version__"]


def load_ipython_extension(ipython) -> None:
    """``%load_ext tensorgauge``: the ``%%tensorgauge`` cell magic and ``%tensorgauge show|report``."""
    from tensorgauge.notebook import load_ipython_extension as load

    load(ipython)


def __getattr__(name):
    if name in ("phase", "step"):
        from tensorgauge import api

        return getattr(api, name)
    if name == "monitor":
        from tensorgauge.monitoring.inprocess import monitor

        return monitor
    if name == "keras":
        import importlib

        return importlib.import_module("tensorgauge.keras")
    raise AttributeError(f"module 'tensorgauge' has no attribute {name!r}")
