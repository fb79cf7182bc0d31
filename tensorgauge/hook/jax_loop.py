"""Custom training loops on JAX: each call of the job's ``jax.jit`` train step is a step.

Keras' JAX guide trains with a ``@jax.jit`` function that calls
``optimizer.stateless_apply`` (and ``model.stateless_call``) while it is traced,
and then runs compiled: the optimizer is never called again. So ``jax.jit`` is
wrapped, for functions of the job's own code only, once Keras is imported:
while a wrapped function is called, it is on :data:`.train_loop.jit_calls`, and
an optimizer update or a model call made then (its trace) marks it a train or
an evaluation function (:mod:`.train_loop`). Every call of it after that is a
step of the ``train loop`` phase, timed end to end like a tf.function's: JAX
dispatches asynchronously, so a step's time shows when the loop next waits for
a result, and the steps' sum is the loop's time. Traces are calls like any other,
never counted apart. The wrapper hands every attribute on to the jitted function
(``lower``, ``trace``, ...).
"""

from __future__ import annotations

import functools
import sys
import time

from tensorgauge.hook import train_loop
from tensorgauge.hook.channel import channel
from tensorgauge.hook.diagnose import function_origin
from tensorgauge.hook.listeners import on_keras
from tensorgauge.hook.protocol import Kind
from tensorgauge.hook.wrapping import wrap_once

FEATURE = "jax_loop"  # the mark on its wrapper of jax.jit


class JittedStep:
    """A ``jax.jit`` function of the job's, seen calling by calling."""

    def __init__(self, jitted, function):
        self._jitted = jitted
        self._traces = 0
        self._where = function_origin(function)[1]
        functools.update_wrapper(self, function)

    def __call__(self, *args, **kwargs):
        if train_loop._nested("call") or train_loop._in_keras_phase():
            return self._jitted(*args, **kwargs)
        began = time.monotonic()
        train_loop.jit_calls.append(self)
        try:
            with train_loop._marked("call"):
                result = self._jitted(*args, **kwargs)
        finally:
            train_loop.jit_calls.pop()
        stepped = False
        try:
            self._count_traces(time.monotonic() - began)
            if self in train_loop._train_functions:
                train_loop._loop.train_step(began, eager=False)
                stepped = True
            elif self in train_loop._model_functions and train_loop._loop.phase is not None:
                train_loop._loop.eval_step(began)
        except Exception:
            pass
        if stepped:
            train_loop._loop.after_step()
        return result

    def _count_traces(self, seconds: float) -> None:
        """A call that grew the jitted function's cache traced and compiled it: a ``trace`` event, as
        for a tf.function (its seconds: the whole call, compiling included)."""
        size = getattr(self._jitted, "_cache_size", None)
        traces = size() if callable(size) else 0
        if traces > self._traces:
            self._traces = traces
            channel().emit(Kind.TRACE, function=getattr(self, "__name__", "?"), origin="user", where=self._where,
                           instance_trace=traces, seconds=round(seconds, 6), rss_delta_bytes=None, framework="jax")

    def __get__(self, instance, owner=None):
        """A jitted method: bound like the function it wraps."""
        return self if instance is None else functools.partial(self.__call__, instance)

    def __getattr__(self, name):
        return getattr(self._jitted, name)

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other) -> bool:
        return self is other


def _wrap_jit(jit):
    @functools.wraps(jit)
    def jit_(function=None, *args, **kwargs):
        if function is None:  # @jax.jit(static_argnums=...) used as a decorator factory
            return lambda f: jit_(f, *args, **kwargs)
        jitted = jit(function, *args, **kwargs)
        try:
            if function_origin(function)[0] != "user":
                return jitted  # Keras' own and other libraries' jitted functions: not a loop's
            return JittedStep(jitted, function)
        except Exception:
            return jitted

    return jit_


@on_keras
def _patch_jax(keras) -> None:
    jax = sys.modules.get("jax")
    if jax is not None:
        wrap_once(jax, "jit", _wrap_jit, by=FEATURE)
