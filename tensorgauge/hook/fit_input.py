"""How long a fit on Keras' JAX or PyTorch backend waits for its batches.

On those backends Keras' own data iterator (``EpochIterator._get_iterator``)
hands each training step its batch: it slices NumPy arrays (or reads a
``tf.data.Dataset`` or a ``DataLoader``) and converts the batch into the
backend's tensors. The time of each ``next()`` on that iterator is the step's
input wait, measured on every step at a cost of two clock reads a batch.
TensorFlow's iterator runs inside the compiled step, where only its profiler
sees it (:mod:`.input_window`).

One ``fit_input`` event when the fit ends: the batches, the seconds all of them
took, the first one's (it includes the iterator's start), each epoch's first, and
the waits by round within epochs (for the share's spread).
"""

from __future__ import annotations

import functools
import time

from tensorgauge.hook.channel import channel
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit
from tensorgauge.hook.protocol import ROUND_BATCHES, ROUND_SECONDS, Kind
from tensorgauge.hook.wrapping import wrap_once

TIMED_BACKENDS = ("jax", "torch")
MAX_ROUNDS = 256  # past this, neighbouring rounds are merged (a day-long fit keeps a bounded event)


def keep_round(rounds: list[list[float]], wait: float, span: float, batches: int) -> list[list[float]]:
    """``rounds`` with ``[wait, span, batches]`` added; past :data:`MAX_ROUNDS`, neighbours merged."""
    rounds.append([round(wait, 6), round(span, 6), int(batches)])
    if len(rounds) > MAX_ROUNDS:
        rounds = [[a[0] + b[0], a[1] + b[1], a[2] + b[2]] for a, b in zip(rounds[::2], rounds[1::2])]
    return rounds


class InputClock:
    """The batches one fit's data iterator produced and the seconds they took: in all, at each epoch's
    start (its first ``next()`` starts the iterator), and by round (``[wait, span, batches]``: the
    seconds in ``next()`` against the seconds from a round's first ``next()`` to the one after its last,
    so that the rounds give the share's spread)."""

    def __init__(self) -> None:
        self.batches = 0
        self.seconds = 0.0
        self.first_seconds: float | None = None
        self.epoch_start_seconds = 0.0
        self.rounds: list[list[float]] = []
        self._epoch_begun = True
        self._round: list[float] | None = None  # [start, wait, batches] of the round being counted

    def new_epoch(self) -> None:
        """An epoch's iterator: its first batch is the epoch's start, and no round spans epochs."""
        self._epoch_begun, self._round = True, None

    def add(self, seconds: float, start: float | None = None) -> None:
        self.batches += 1
        self.seconds += seconds
        if self.first_seconds is None:
            self.first_seconds = seconds
        if self._epoch_begun:
            self._epoch_begun = False
            self.epoch_start_seconds += seconds
            return
        if start is None:
            return
        current = self._round
        if current is not None and current[2] >= ROUND_BATCHES and start - current[0] >= ROUND_SECONDS:
            self.rounds = keep_round(self.rounds, current[1], start - current[0], int(current[2]))
            current = None
        if current is None:
            current = self._round = [start, 0.0, 0]
        current[1] += seconds
        current[2] += 1


class TimedIterator:
    """Passes ``inner``'s items through, timing each ``next()``."""

    __slots__ = ("_inner", "_clock")

    def __init__(self, inner, clock: InputClock):
        self._inner, self._clock = inner, clock
        clock.new_epoch()

    def __iter__(self):
        return self

    def __next__(self):
        start = time.perf_counter()
        item = next(self._inner)
        self._clock.add(time.perf_counter() - start, start)
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
                           seconds=round(self.clock.seconds, 6), first_seconds=round(self.clock.first_seconds or 0.0, 6),
                           epoch_start_seconds=round(self.clock.epoch_start_seconds, 6), rounds=self.clock.rounds)


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
