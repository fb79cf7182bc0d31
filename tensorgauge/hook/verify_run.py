"""The reruns of ``tensorgauge fix --verify``: every random generator seeded alike (``$TENSORGAUGE_SEED``) so
the program before and after a patch draws the same numbers and their losses can be compared, and, with
``$TENSORGAUGE_STEP_LIMIT``, each fit cut after that many training steps (the rest of the job runs on).
Nothing here acts in a run without those variables."""

from __future__ import annotations

import os

from tensorgauge.hook.listeners import FitCall, FitListener, on_fit, on_keras, on_tensorflow
from tensorgauge.hook.protocol import SEED_ENV, STEP_LIMIT_ENV


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


@on_tensorflow
def _seed_tensorflow(tf) -> None:
    seed = _env_int(SEED_ENV)
    if seed is None:
        return
    import random

    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    tf.random.set_seed(seed)


@on_keras
def _seed_keras(keras) -> None:
    seed = _env_int(SEED_ENV)
    setter = getattr(getattr(keras, "utils", None), "set_random_seed", None)
    if seed is not None and setter is not None:
        setter(seed)


class _StepLimit(FitListener):
    def __init__(self, steps: int):
        self.steps, self.seen = steps, 0

    def on_train_batch_begin(self, model, epoch: int, batch: int) -> None:
        self.seen += 1
        if self.seen >= self.steps:
            model.stop_training = True  # this step is the last: fit returns after it


@on_fit
def _step_limit(call: FitCall) -> FitListener | None:
    steps = _env_int(STEP_LIMIT_ENV)
    return _StepLimit(steps) if steps and steps > 0 and call.fit_input is not None else None
