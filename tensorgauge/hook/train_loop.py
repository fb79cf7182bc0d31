"""Custom training loops, seen without code changes: a ``train loop`` phase with its steps.

A training step is an optimizer update made outside Keras' ``fit``:

- eagerly: ``optimizer.apply`` / ``apply_gradients`` returning (Keras 3, tf_keras);
- in a ``tf.function``: a function of the job's own code whose trace applied
  gradients; each call of it is a step.

Steps are timed end to end (from the previous step's end, so the time spent
in ``next()`` and Python between steps counts, as in the loop's own timing).
``next()`` on a ``tf.data`` iterator is timed too: the time a step waited for
its batch. When the steps start reading a new iterator, an epoch begins. A
model called without gradients between training steps (eagerly, or by a
function of the job's that calls a model and applies nothing) makes an
``evaluation`` pass. The phase begins where its first step began and ends at
its last step (the analysis nests what the job did meanwhile inside it); a
``loop_input`` event sums the steps and their waits at each epoch's end and at
exit, when the stages of the ``tf.data`` dataset the steps read are timed too
(:mod:`.stage_costs`), or the dataset and collate of the PyTorch ``DataLoader`` they read
(:mod:`.loader_stages`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import statistics
import sys
import threading
import time
import weakref

from tensorgauge.hook import eager_probe, fixes, loader_stages
from tensorgauge.hook.agent import Agent, _Open, agent
from tensorgauge.hook.call_sites import send_pipeline
from tensorgauge.hook.channel import channel, process_cpu_seconds
from tensorgauge.hook.diagnose import mode, send_loop_config, tracing_now
from tensorgauge.hook.fit_input import keep_round
from tensorgauge.hook.input_window import allowance
from tensorgauge.hook.listeners import on_keras, on_tensorflow
from tensorgauge.hook.protocol import ROUND_BATCHES, ROUND_SECONDS, TRAIN_LOOP, Kind
from tensorgauge.hook.stage_costs import measure_loop_stages
from tensorgauge.hook.wrapping import wrap_once

FEATURE = "train_loop"  # the mark on its wrappers
KEPT = 4096  # per-step figures kept for the medians (the latest)
PAIR_EVERY, PAIRS_KEPT = 4, 64  # next() on the loop's iterator paired with next() on a cached batch
_KERAS_PHASES = ("fit", "evaluate", "predict")


class TrainLoop:
    """The process's custom training loop, as its steps arrive (one per process; thread-safe)."""

    def __init__(self, clock=time.monotonic, cpu=process_cpu_seconds, phases: Agent | None = None,
                 thread_cpu=time.thread_time):
        self.clock, self.cpu, self.thread_cpu = clock, cpu, thread_cpu
        self.agent = phases or agent()
        self.lock = threading.Lock()
        self.phase: _Open | None = None
        self.epoch: _Open | None = None
        self.evaluation: _Open | None = None
        self.epochs = 0
        self.mark: float | None = None  # the last step's end (training or evaluation)
        self.mark_cpu: float | None = None
        self.first_next: float | None = None  # the first next() since the mark began at
        self.batch_size: int | None = None  # the loop's batch, where its reader says (a DataLoader)
        self.waited = 0.0  # seconds in next() since the mark
        self.iterators = 0  # iterators seen, each numbered
        self.last_iterator: int | None = None  # the iterator next() was last called on
        self.train_iterator: int | None = None  # the iterator the training steps read
        self.eager = False
        self.steps = self.eval_steps = 0
        self.step_seconds: list[float] = []
        self.next_seconds: list[float] = []
        self.totals = [0.0, 0.0]  # step seconds, next() seconds (the first step left out)
        self.began: float | None = None  # the loop's first step's start
        self.taped: tuple | None = None  # (weakref to the model, args, kwargs) of the last call under a tape
        self.optimizer: weakref.ref | None = None  # of the last eager update
        self.dataset: weakref.ref | None = None  # the dataset of the iterator next() was last called on
        self.loader: str | None = None  # the iterator's kind where it is not tf.data's ("DataLoader")
        self.train_dataset: weakref.ref | None = None  # ... of the iterator the training steps read
        self.last_step: tuple[float, float] | None = None  # the last training step's (seconds, wait in next())
        self.probed = False  # the eager probe ran (or was skipped for good)
        self.nexts = 0  # next() calls since the loop began
        self.cached = None  # an iterator on the loop's first batch, cached (see before_next)
        self.floor: tuple[float, float] | None = None  # next() on it (wall, its thread's CPU seconds), timed
        # before the real one (or after: floor_after)
        self.floor_after = False
        self.tried = False  # the cached iterator was built (or failed to be): once per loop
        # [a real next(), next() on the cached batch, 0 before / 1 after, its thread's CPU seconds in that next()]
        self.pairs: list[list[float]] = []
        self.rounds: list[list[float]] = []  # [seconds in next(), step seconds, steps] of consecutive steps
        self._round: list = [0.0, 0.0, 0]
        self.own = 0.0  # seconds of the tool's own work since the mark (left out of the step)
        self.own_total = 0.0

    # -- what the patches report ----------------------------------------------------

    def on_next(self, iterator: object, began: float, seconds: float, loader: str | None = None) -> None:
        serial = getattr(iterator, "_tensorgauge_serial", None)
        if serial is None:  # not id(): a new iterator often takes the address of the last one
            serial = self.iterators = self.iterators + 1
            try:
                iterator._tensorgauge_serial = serial  # type: ignore[attr-defined]
            except AttributeError:
                serial = id(iterator)
        self.last_iterator = serial
        self.dataset = getattr(iterator, "_tensorgauge_dataset", None)
        self.loader = loader
        if self.first_next is None:
            self.first_next = began
        self.waited += seconds

    def before_next(self, next_) -> None:
        """Every :data:`PAIR_EVERY` steps of a running loop, time ``next_`` (the unwrapped ``__next__``) on
        its first batch cached (:func:`_cached_iterator`): what ``next()`` costs with no input work.
        Timed in turn just before the real ``next()`` and just after it: the first call after a step
        pays for coming after it (0.2-0.3 ms measured), so each order alone is off by that much, and the
        two together cancel it (``loop_verdict`` in the analysis reads both)."""
        self.floor, self.floor_after = None, False
        if self.cached is None or self.phase is None or len(self.pairs) >= PAIRS_KEPT:
            return
        self.nexts += 1
        if self.nexts % PAIR_EVERY:
            return
        if len(self.pairs) % 2:
            self.floor_after = True
            return
        self.floor = self._time_floor(next_)

    def after_next(self, batch, seconds: float, next_) -> None:
        """After a real ``next()`` of ``seconds``: pair it with the cached one timed before it (or time
        that now); the first time in a running loop, build the cached iterator from the loop's dataset
        (or this batch)."""
        if self.floor_after:
            self.floor = self._time_floor(next_)
        if self.floor is not None:
            self.pairs.append([seconds, self.floor[0], 1 if self.floor_after else 0, self.floor[1]])
            self.floor, self.floor_after = None, False
            if len(self.pairs) >= PAIRS_KEPT:
                self.cached = None  # paired enough: its pipeline need not outlive this
        elif self.cached is None and self.phase is not None and self.steps >= 2 and not self.tried:
            self.tried = True
            began = self.clock()
            try:
                self.cached = _cached_iterator(self.dataset() if self.dataset else None, batch)
                next_(self.cached)  # its first element starts the iterator
            except Exception:
                self.cached = None
            self._spent(began)

    def _time_floor(self, next_) -> tuple[float, float] | None:
        """``next()`` on the cached batch: its wall seconds and this thread's CPU seconds in it. Where the
        pipeline runs Python (a ``py_function`` map, a generator), the wall time includes waits for the GIL
        its threads hold: input's cost, not the call's (cached calls read 5-44 ms wall, 0.3 ms CPU)."""
        began, began_cpu = self.clock(), self.thread_cpu()
        try:
            next_(self.cached)
            return self.clock() - began, self.thread_cpu() - began_cpu
        except Exception:
            self.cached = None  # never again
            return None
        finally:
            self._spent(began)

    def _spent(self, began: float) -> None:
        spent = self.clock() - began
        self.own += spent
        self.own_total += spent

    def train_step(self, began: float | None, eager: bool) -> None:
        """An optimizer update ended now (``began``: when the call that made it began, if known)."""
        with self.lock:
            now, cpu = self.clock(), self.cpu()
            new_epoch = self.epoch is None or (self.last_iterator is not None and self.train_iterator is not None
                                               and self.last_iterator != self.train_iterator)
            start = self._start(began, fresh=new_epoch or self.evaluation is not None, now=now)
            if self.phase is None:
                self.eager = eager
                top = self.agent.current()  # a phase of the job's own (tensorgauge.phase) holds the loop
                self.phase = self.agent.open_detached(TRAIN_LOOP, "fit", top.id if top and not top.auto else None,
                                                      start, self.mark_cpu)
                self.began = start
                send_loop_config(self.dataset() if self.dataset else None, eager, self.batch_size)
                if self.dataset and self.dataset() is not None:
                    send_pipeline(self.dataset(), "loop")
            if self.evaluation is not None:
                self._close(self.evaluation, self.mark)
                self.evaluation = None
            if new_epoch:
                if self.epoch is not None:
                    self._close(self.epoch, self.mark)  # its evaluation pass included, as in fit
                    self._send()
                self.epochs += 1
                self.epoch = self.agent.open_detached(f"epoch {self.epochs}", "epoch", self.phase.id, start,
                                                      self.mark_cpu)
            if self.last_iterator is not None:
                self.train_iterator, self.train_dataset = self.last_iterator, self.dataset
            seconds = max(0.0, now - start - self.own)
            assert self.epoch is not None
            self.agent.record_step(self.epoch, seconds, now)
            self.last_step = (seconds, min(self.waited, seconds))
            if self.steps:
                self._keep(seconds, min(self.waited, seconds))
            self.steps += 1
            self._advance(now, cpu)

    def eval_step(self, began: float | None) -> None:
        """The model was called without gradients (or a function of the job's that only calls it)."""
        with self.lock:
            if self.phase is None:
                return  # no training loop (yet): predictions, not an evaluation pass
            now, cpu = self.clock(), self.cpu()
            start = self._start(began, fresh=self.evaluation is None, now=now)
            if self.evaluation is None:
                self.evaluation = self.agent.open_detached("evaluation", "evaluate", self.epoch.id if self.epoch
                                                        else self.phase.id, start, self.mark_cpu)
            self.agent.record_step(self.evaluation, now - start, now)
            self.eval_steps += 1
            self._advance(now, cpu)

    def after_step(self) -> None:
        """Outside the lock, after a training step: the --try-fixes window (which may end the job)."""
        timed = fixes.window()
        if timed is not None and self.last_step is not None:
            timed.on_loop_step(*self.last_step)

    def after_eager_step(self) -> None:
        """Time what tf.function would gain the loop (:mod:`.eager_probe`) once it is due; the next
        step starts after the probe, so no step carries its cost."""
        if self.probed or self.taped is None or self.mark is None or self.began is None:
            return
        if not eager_probe.due(self.steps, self.mark - self.began, mode()):
            return
        self.probed = True
        model = self.taped[0]()
        if model is None:
            return
        try:
            with _marked("model", "update"):  # its own model calls and updates are not the loop's
                eager_probe.probe(model, self.optimizer() if self.optimizer else None, self.taped[1], self.taped[2])
        finally:
            with self.lock:
                self._advance(self.clock(), self.cpu())

    def close(self) -> None:
        """At exit: the loop ends at its last step."""
        with self.lock:
            if self.phase is None:
                return
            if self.eager and not self.probed and self.steps >= eager_probe.PROBE_AT:
                self.probed = True
                channel().emit(Kind.EAGER_PROBE, skipped=eager_probe.skip_reason(mode()))
            for phase in (self.evaluation, self.epoch, self.phase):
                if phase is not None:
                    self._close(phase, self.mark)
            self._send()
            self.phase = self.epoch = self.evaluation = None
            loop_seconds = (self.mark or 0.0) - (self.began or 0.0)
        self._stages(loop_seconds)
        with _marked("next", "model", "update"):  # the loader's dataset and collate (a DataLoader's), timed again
            loader_stages._loader.loop_ended(self.totals[1] / self.totals[0] if self.totals[0] else None,
                                             allowance(loop_seconds))

    def _stages(self, loop_seconds: float) -> None:
        """The stages of the tf.data dataset the training steps read, timed as the loop ends
        (:func:`.stage_costs.measure_loop_stages`); nothing for a loop over anything else."""
        tf = sys.modules.get("tensorflow")
        if not mode() or self.train_dataset is None or tf is None:
            return
        dataset = self.train_dataset()
        if dataset is not None and not isinstance(dataset, tf.data.Dataset):
            return
        try:
            with _marked("next"):  # its pulls are not the loop's
                measure_loop_stages(dataset, self.pairs, statistics.median(self.step_seconds)
                                    if self.step_seconds else None, allowance(loop_seconds))
        except Exception:
            pass

    # -- inside ---------------------------------------------------------------------

    def _start(self, began: float | None, fresh: bool, now: float) -> float:
        """Where a step that ends now began: at the previous step's end; for the first step of a
        loop, an epoch or an evaluation pass, at its first next() or its call (what the loop did
        between is not the step's), whichever came first."""
        first = min((t for t in (self.first_next, began) if t is not None), default=None)
        if self.mark is None:
            return first if first is not None else now
        return max(self.mark, first) if fresh and first is not None else self.mark

    def _advance(self, now: float, cpu: float) -> None:
        self.mark, self.mark_cpu = now, cpu
        self.first_next, self.waited, self.own = None, 0.0, 0.0

    def _keep(self, seconds: float, waited: float) -> None:
        self.totals[0] += seconds
        self.totals[1] += waited
        current = self._round
        current[0] += waited
        current[1] += seconds
        current[2] += 1
        if current[2] >= ROUND_BATCHES and current[1] >= ROUND_SECONDS:  # a round for the verdict's interval
            self.rounds = keep_round(self.rounds, *current)
            self._round = [0.0, 0.0, 0]
        for kept, value in ((self.step_seconds, seconds), (self.next_seconds, waited)):
            kept.append(value)
            if len(kept) > KEPT:
                del kept[: len(kept) - KEPT]

    def _close(self, phase, at: float | None) -> None:
        self.agent.close_detached(phase, at if at is not None else self.clock(), self.mark_cpu)

    def _send(self) -> None:
        channel().emit(Kind.LOOP_INPUT, steps=self.steps, epochs=self.epochs, eager=self.eager,
                       eval_steps=self.eval_steps,
                       step_seconds_p50=statistics.median(self.step_seconds) if self.step_seconds else None,
                       next_seconds_p50=statistics.median(self.next_seconds) if self.next_seconds else None,
                       step_seconds_total=round(self.totals[0], 6), next_seconds_total=round(self.totals[1], 6),
                       next_pairs=[[round(real, 7), round(wall, 7), order, round(cpu, 7)]
                                   for real, wall, order, cpu in self.pairs],
                       next_rounds=self.rounds, loader=self.loader,
                       pairs_cost_seconds=round(self.own_total, 6))


def _cached_iterator(dataset, batch):
    """The loop's own pipeline cut to its first batch, cached and repeated (the A/B an engineer runs:
    ``ds.take(1).cache().repeat()``), where that is cheap to build; else ``batch`` repeated."""
    import tensorflow as tf

    from tensorgauge.hook.probes import _peekable

    if dataset is not None and _peekable(dataset):
        return iter(dataset.take(1).cache().repeat())
    return iter(tf.data.Dataset.from_tensors(batch).repeat())


_loop = TrainLoop()
atexit.register(_loop.close)  # registered after the hook's own exit handler: runs before it

# tf.functions of the job's whose traces applied gradients (train) or called a model without (eval).
_train_functions: weakref.WeakSet = weakref.WeakSet()
_model_functions: weakref.WeakSet = weakref.WeakSet()
_busy = threading.local()  # inside an update, a model call or a timed function call: nested ones are part of it
# The job's jax.jit functions being called now, innermost last (see .jax_loop): one being traced applies
# gradients (a train step) or calls a model (an evaluation step).
jit_calls: list[object] = []


def _nested(what: str) -> bool:
    return getattr(_busy, what, False)


@contextlib.contextmanager
def _marked(*what: str):
    """Inside, calls of these kinds ("update", "model", "call") are part of this one, not the loop's."""
    for name in what:
        setattr(_busy, name, True)
    try:
        yield
    finally:
        for name in what:
            setattr(_busy, name, False)


def _in_keras_phase() -> bool:
    return any(agent().inside(kind) for kind in _KERAS_PHASES)


def _user_functions_tracing() -> list[object]:
    """The job's functions being traced now: tf.functions, and the innermost jax.jit function called."""
    return [key for key, origin in tracing_now() if origin == "user" and key is not None] + jit_calls[-1:]


def _wrap_update(original, executing_eagerly):
    """``optimizer.apply``/``apply_gradients``: a step when eager; marks the job's functions being traced."""
    @functools.wraps(original)
    def update(self, *args, **kwargs):
        if _nested("update") or _in_keras_phase():
            return original(self, *args, **kwargs)
        with _marked("update"):
            result = original(self, *args, **kwargs)
        stepped = False
        try:
            if executing_eagerly() and not jit_calls:
                _loop.optimizer = weakref.ref(self)
                _loop.train_step(None, eager=True)
                _loop.after_eager_step()
                stepped = True
            else:
                for key in _user_functions_tracing():
                    _train_functions.add(key)
        except Exception:
            pass
        if stepped:
            _loop.after_step()  # may end the job (a --try-fixes window): outside the guard
        return result

    return update


def _wrap_model_call(original, executing_eagerly, recording, inference_wins: bool = False):
    """``Model.__call__`` outside Keras' own loops: an evaluation step when eager and no tape (or
    autograd) records; with ``inference_wins`` (PyTorch, whose autograd records every call unless the
    loop says ``torch.no_grad()``: Keras' guide validates with ``training=False`` only), also when
    called with ``training=False``. Not on TensorFlow: a frozen base called with ``training=False``
    inside a ``GradientTape`` is part of the training step."""
    @functools.wraps(original)
    def call(self, *args, **kwargs):
        if _nested("model") or _in_keras_phase():
            return original(self, *args, **kwargs)
        began = time.monotonic()
        with _marked("model"):
            result = original(self, *args, **kwargs)
        try:
            if executing_eagerly() and not jit_calls:
                if (not inference_wins or kwargs.get("training") is not False) and recording():
                    _loop.taped = (weakref.ref(self), args, kwargs)
                elif _loop.phase is not None and kwargs.get("training") is not True:
                    _loop.eval_step(began)
            else:
                for key in _user_functions_tracing():
                    _model_functions.add(key)
        except Exception:
            pass
        return result

    return call


def _wrap_function_call(original):
    """``tf.function`` calls: those of the job's training (or evaluation) functions are steps."""
    @functools.wraps(original)
    def call(self, *args, **kwargs):
        if _nested("call"):
            return original(self, *args, **kwargs)
        began = time.monotonic()
        with _marked("call"):
            result = original(self, *args, **kwargs)
        stepped = False
        try:
            key = getattr(self, "_function_captures", None)
            if key is not None and not _in_keras_phase():
                if key in _train_functions:
                    _loop.train_step(began, eager=False)
                    stepped = True
                elif key in _model_functions and _loop.phase is not None:
                    _loop.eval_step(began)
        except Exception:
            pass
        if stepped:
            _loop.after_step()  # may end the job (a --try-fixes window): outside the guard
        return result

    return call


def _wrap_next(original):
    @functools.wraps(original)
    def next_(self):
        if _nested("next"):
            return original(self)
        outside = not _in_keras_phase()
        if outside:
            with _marked("next"):
                _loop.before_next(original)
        began = time.monotonic()
        batch = original(self)  # StopIteration ends an epoch: nothing to time
        seconds = time.monotonic() - began
        if outside:
            try:
                _loop.on_next(self, began, seconds)
                with _marked("next"):
                    _loop.after_next(batch, seconds, original)
            except Exception:
                pass
        return batch

    return next_


def _wrap_iter(original):
    """``iter(dataset)`` outside Keras: the iterator remembers its dataset (for the loop's config);
    under ``--try-fixes`` with ``prefetch``, the loop reads the dataset prefetched."""
    @functools.wraps(original)
    def iter_(self):
        if _in_keras_phase() or _nested("next"):
            return original(self)
        iterator = original(fixes.loop_dataset(self))
        try:
            iterator._tensorgauge_dataset = weakref.ref(self)
        except (AttributeError, TypeError):
            pass
        return iterator

    return iter_


def _patch_defining(klass, name: str, wrap) -> None:
    """Wrap ``name`` on the class of ``klass``'s MRO that defines it."""
    owner = next((o for o in klass.__mro__ if name in o.__dict__), None)
    if owner is not None:
        wrap_once(owner, name, wrap, by=FEATURE)


@on_tensorflow
def _patch_tensorflow(tf) -> None:
    iterators = sys.modules.get("tensorflow.python.data.ops.iterator_ops")
    functions = sys.modules.get("tensorflow.python.eager.polymorphic_function.polymorphic_function")
    if iterators is not None:
        _patch_defining(iterators.OwnedIterator, "__next__", _wrap_next)
    _patch_defining(tf.data.Dataset, "__iter__", _wrap_iter)
    if functions is not None:
        _patch_defining(functions.Function, "__call__", _wrap_function_call)


def _always() -> bool:
    return True


def _never() -> bool:
    return False


@on_keras
def _patch_keras(keras) -> None:
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        from tensorflow.python.eager import record

        eager, recording = tf.executing_eagerly, record.could_possibly_record
    else:  # Keras on JAX or PyTorch without TensorFlow: no tf.function, no tape
        eager, recording = _always, _never
    torch = sys.modules.get("torch")
    on_torch = False
    if torch is not None and str(keras.backend.backend()) == "torch":  # a training call records for autograd
        on_torch, eager, recording = True, _always, torch.is_grad_enabled
    optimizers = getattr(keras, "optimizers", None)
    base = getattr(optimizers, "Optimizer", None)
    if base is not None:
        for name in ("apply", "apply_gradients"):
            _patch_defining(base, name, lambda fn: _wrap_update(fn, eager))
    legacy = getattr(getattr(optimizers, "legacy", None), "Optimizer", None)
    if legacy is not None:
        _patch_defining(legacy, "apply_gradients", lambda fn: _wrap_update(fn, eager))
    model = getattr(keras, "Model", None)
    if model is not None:  # set on Model itself: Layer.__call__ runs for every layer
        wrap_once(model, "__call__", lambda fn: _wrap_model_call(fn, eager, recording, inference_wins=on_torch),
                  by=FEATURE, inherited=True)
        if "stateless_call" in dir(model):  # JAX's functional style: the model called inside a jitted step
            wrap_once(model, "stateless_call", lambda fn: _wrap_model_call(fn, _never, _never), by=FEATURE,
                      inherited=True)
