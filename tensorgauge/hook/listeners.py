"""In-job features register here, instead of being called from the patches one by one.

- :func:`on_fit`: a factory called as each ``fit`` starts, with the :class:`FitCall`
  (it may act before fit runs: add a callback, change the input, send facts) and
  returning a :class:`FitListener` that sees the fit's batches and end, or None.
- :func:`on_tensorflow`: called once TensorFlow has been imported, before the job
  can use it (limits and patches that must come before TensorFlow initialises).
- :func:`on_keras`: called with each Keras package (``keras``, ``tf_keras``) once it has
  been imported and its phases patched.
- :func:`on_torch`: called once PyTorch has been imported (a loop of its own, no Keras).

Standard library only. A listener that raises is dropped, never passed to the job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FitCall:
    """One ``fit`` (or a callback the user added by hand: then ``fit_input`` is None)."""

    model: Any
    keras_callbacks: Any  # the Keras package's callbacks module
    args: list = field(default_factory=list)  # fit's positional arguments after self (may be changed)
    kwargs: dict = field(default_factory=dict)
    callbacks: list | None = None  # fit's callback list, still open to additions
    fit_input: tuple | None = None  # (x, y, batch_size)


class FitListener:
    """Sees one fit; every method is optional."""

    def on_train_begin(self, model: Any, steps_per_epoch: int | None) -> None:
        """``steps_per_epoch``: as Keras knows it (None: unknown, a dataset of unknown size)."""

    def on_train_batch_begin(self, model: Any, epoch: int, batch: int) -> None:
        """``batch``: the step's index in its epoch, as Keras counts it."""

    def on_train_end(self, model: Any) -> None: ...

    def after_fit(self, model: Any) -> None:
        """After fit has returned (may end the job with :func:`tensorgauge.hook.exit.exit_job`)."""


FitFactory = Callable[[FitCall], "FitListener | None"]
_fit_factories: list[FitFactory] = []
_tensorflow_hooks: list[Callable[[Any], None]] = []
_keras_hooks: list[Callable[[Any], None]] = []
_torch_hooks: list[Callable[[Any], None]] = []


def on_fit(factory: FitFactory) -> FitFactory:
    _fit_factories.append(factory)
    return factory


def on_tensorflow(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    _tensorflow_hooks.append(hook)
    return hook


def on_keras(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    _keras_hooks.append(hook)
    return hook


def on_torch(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    _torch_hooks.append(hook)
    return hook


def fit_listeners(call: FitCall) -> list[FitListener]:
    """The listeners of one fit, in the order the features registered."""
    out = []
    for factory in _fit_factories:
        try:
            listener = factory(call)
        except Exception:  # a feature failing must not reach the job
            continue
        if listener is not None:
            out.append(listener)
    return out


def _call_each(hooks: list[Callable[[Any], None]], module: Any) -> None:
    for hook in hooks:
        try:
            hook(module)
        except Exception:  # a feature failing must not reach the job
            pass


def tensorflow_imported(tf: Any) -> None:
    _call_each(_tensorflow_hooks, tf)


def keras_imported(keras: Any) -> None:
    _call_each(_keras_hooks, keras)


def torch_imported(torch: Any) -> None:
    _call_each(_torch_hooks, torch)
