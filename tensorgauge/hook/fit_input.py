"""How long a fit on Keras' JAX or PyTorch backend waits for its batches.

On those backends Keras' own data iterator (``EpochIterator._get_iterator``)
hands each training step its batch: it slices NumPy arrays (or reads a
``tf.data.Dataset`` or a ``DataLoader``) and converts the batch into the
backend's tensors. The time of each ``next()`` on that iterator is the step's
input wait, measured on every step at a cost of two clock reads a batch.
TensorFlow's iterator runs inside the compiled step, where only its profiler
sees it (:mod:`.input_window`).

One ``fit_input`` event when the fit ends: the batches, the seconds all of them
took and the first one's (it includes the iterator's start).
"""

from __future__ import annotations

import functools
import time

from tensorgauge.hook.channel import channel
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit
from tensorgauge.hook.protocol import Kind
from tensorgauge.hook.wrapping import wrap_once

TIMED_BACKENDS = ("jax", "torch")


class InputClock:
    """The batches one fit's data iterator produced and the seconds they took."""

    def __init__(self) -> None:
        self.batches = 0
        self.seconds = 0.0
        self.first_seconds: float | None = None

    def add(self, seconds: float) -> None:
        self.batches += 1
        self.seconds += seconds
        if self.first_seconds is None:
            self.first_seconds = seconds


class TimedIterator:
    """Passes ``inner``'s items through, timing each ``next()``."""

    __slots__ = ("_inner", "_clock")

    def __init__(self, inner, clock: InputClock):
        self._inner, self._clock = inner, clock

    def __iter__(self):
        return self

    def __next__(self):
        start = time.perf_counter()
        item = next(self._inner)
        self._clock.add(time.perf_counter() - start)
        return item


_pending: InputClock | None = None  # the clock of the fit that has begun and not yet built its iterator


def _timed(original):
    @functools.wraps(original)
    def _get_iterator(self):
        global _pending
        iterable = original(self)
        clock = getattr(self, "_tensorgauge_clock", None)
        if clock is None and _pending is not None:
            # The first epoch iterator built after a fit began is the fit's own (validation's comes later).
            clock, _pending = _pending, None
            self._tensorgauge_clock = clock
        return TimedIterator(iter(iterable), clock) if clock is not None else iterable

    return _get_iterator


def _subclasses(cls) -> list:
    out = [cls]
    for sub in cls.__subclasses__():
        out += _subclasses(sub)
    return out


def patch_epoch_iterators() -> None:
    """Wrap ``_get_iterator`` of Keras' epoch iterators, TensorFlow's excepted (its iterator is
    consumed inside a tf.function, where a Python wrapper cannot go)."""
    from keras.src.trainers.epoch_iterator import EpochIterator

    for cls in _subclasses(EpochIterator):
        if "tensorflow" not in cls.__module__:
            wrap_once(cls, "_get_iterator", _timed, by="fit_input")


class _InputTimer(FitListener):
    def __init__(self, backend: str, clock: InputClock):
        self.backend, self.clock = backend, clock

    def on_train_end(self, model) -> None:
        global _pending
        if _pending is self.clock:
            _pending = None
        if self.clock.batches:
            channel().emit(Kind.FIT_INPUT, backend=self.backend, batches=self.clock.batches,
                           seconds=round(self.clock.seconds, 6), first_seconds=round(self.clock.first_seconds or 0.0, 6))


@on_fit
def _fit_input_listener(call: FitCall) -> FitListener | None:
    global _pending
    from tensorgauge.hook.diagnose import keras_backend

    backend = keras_backend(call.model)
    if call.fit_input is None or backend not in TIMED_BACKENDS:
        return None
    patch_epoch_iterators()
    _pending = InputClock()
    return _InputTimer(backend, _pending)
