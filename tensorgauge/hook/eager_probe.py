"""What ``tf.function`` would gain an eager custom training loop, measured on the job's own model.

The loop's step function cannot be compiled from outside (it may be the body of
a ``for`` at module level), but its parts can: the model's forward pass under a
``GradientTape``, its gradients and the optimizer's update. Once, after
:data:`PROBE_AT` eager steps, this probe takes the model and the batch of the
loop's last taped call and the optimizer of its last update, and times that
step (with a stand-in loss: the sum of the outputs) eagerly and in a
``tf.function``, :data:`STEPS` of each (after :data:`WARMUP`). Every variable it touches (the model's,
batch-norm statistics and seed states included, and the optimizer's) is
restored after. The eager loop's step would lose about the difference.

Costly (a trace): with ``--diagnose`` it runs at :data:`PROBE_AT` steps; by
default only once the loop has run :data:`AUTO_AFTER_SECONDS` (1% of that covers
a typical probe), else the ``eager_probe`` event says it was skipped and why.
"""

from __future__ import annotations

import os
import time

from tensorgauge.hook.channel import channel
from tensorgauge.hook.protocol import DIAGNOSE_ENV, Kind, error_text
from tensorgauge.hook.timing import time_calls

PROBE_AT, STEPS, WARMUP = 20, 8, 2
AUTO_AFTER_SECONDS = 200.0


def due(steps: int, loop_seconds: float, mode: str) -> bool:
    """Whether to probe now, at an eager loop's ``steps``-th step after ``loop_seconds``."""
    if mode == "always":
        return steps >= PROBE_AT
    return mode == "auto" and steps >= PROBE_AT and loop_seconds >= AUTO_AFTER_SECONDS


def skip_reason(mode: str) -> str:
    if not mode:  # tensorgauge run sets the setting, "off" included; without it the monitor is in-process
        return ("diagnosis is off (--no-diagnose)" if os.environ.get(DIAGNOSE_ENV) else
                "tensorgauge.monitor() and %%tensorgauge do not run the diagnosis in the job's own process "
                "(tensorgauge run -- python train.py does)")
    return (f"the loop ran under {AUTO_AFTER_SECONDS:.0f} s, too short to pay for a trace of its model within the "
            "diagnosis' 1% bound; tensorgauge run --diagnose measures it")


def probe(model, optimizer, args: tuple, kwargs: dict, steps: int = STEPS) -> float:
    """Time a step of ``model(*args, **kwargs)``, its gradients and ``optimizer``'s update (None: no
    update) eagerly and compiled; emit ``eager_probe``. Returns the seconds it took."""
    began = time.monotonic()
    try:
        import tensorflow as tf

        variables = [*model.variables, *(getattr(optimizer, "variables", None) or [])]
        saved = [(v, v.numpy()) for v in {id(v): v for v in variables}.values()]
        kwargs = {**kwargs, "training": True}

        def tensorgauge_eager_probe(*a, **k):
            with tf.GradientTape() as tape:
                outputs = model(*a, **k)
                loss = tf.add_n([tf.reduce_sum(tf.cast(t, tf.float32)) for t in tf.nest.flatten(outputs)])
            weights = model.trainable_variables
            gradients = tape.gradient(loss, weights)
            if optimizer is not None:
                optimizer.apply_gradients(zip(gradients, weights))
            return loss

        try:
            eager = time_calls(lambda: tensorgauge_eager_probe(*args, **kwargs), steps + WARMUP)[WARMUP:]
            compiled = tf.function(tensorgauge_eager_probe)
            first = time_calls(lambda: compiled(*args, **kwargs), 1)[0]  # its trace
            graph = time_calls(lambda: compiled(*args, **kwargs), steps + WARMUP)[WARMUP:]
        finally:
            for variable, value in saved:
                variable.assign(value)
        channel().emit(Kind.EAGER_PROBE, eager_step_seconds=eager, graph_step_seconds=graph, trace_seconds=first,
                       total_seconds=time.monotonic() - began)
    except Exception as exc:
        channel().emit(Kind.EAGER_PROBE, error=error_text(exc))
    return time.monotonic() - began
