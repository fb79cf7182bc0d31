"""How the job uses Keras between fits: ``predict`` called in a loop, models built again and
again without ``clear_session()``. Each costs nothing per call but a counter.

- ``predict_probe``, once: at the :data:`PROBE_CALL`-th ``predict`` of the process, if that
  call's input is one in-memory array (or tensor) of at most one batch, the median wall time
  of the last ``predict`` calls and of ``model(x, training=False)`` on the same input
  (:data:`PROBE_REPEATS` calls, outputs turned into numpy as ``predict`` does), so the fix's
  gain is measured on the job's own model.
- ``models_built`` each time the job builds a Keras model (not one a model makes for itself):
  how many so far, how many since the last ``clear_session()``, and how many times it was called.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
import weakref
from collections import deque
from types import FrameType

from tensorgauge.hook.channel import channel
from tensorgauge.hook.listeners import on_keras
from tensorgauge.hook.protocol import Kind
from tensorgauge.hook.wrapping import mark, wrap_once, wrapped_by

PROBE_CALL = 20
PROBE_REPEATS = 5
FEATURE = "usage"  # the mark on its wrappers (predict beside its phase wrapper, __new__, clear_session)


class _State:
    def __init__(self) -> None:
        self.predicts = 0
        self.recent: deque[float] = deque(maxlen=PROBE_CALL)
        self.probed = False
        self.models: weakref.WeakSet = weakref.WeakSet()
        self.built = 0
        self.since_clear = 0
        self.clears = 0


_state = _State()


def _rows(x) -> int | None:
    """Rows of an in-memory array or tensor (None for a dataset, generator, dict or list)."""
    shape = getattr(x, "shape", None)
    if shape is None or not len(shape) or type(x).__module__.startswith(("tensorflow.python.data", "keras.src.trainers")):
        return None
    try:
        return int(shape[0])
    except (TypeError, ValueError):
        return None


def _probe(model, x, batch_size: int) -> None:
    """Time ``model(x, training=False)`` against the recent ``predict`` calls, once."""
    _state.probed = True
    rows = _rows(x)
    if rows is None or rows > batch_size:
        return
    try:
        times = []
        for _ in range(PROBE_REPEATS):
            start = time.perf_counter()
            out = model(x, training=False)
            for value in out if isinstance(out, (list, tuple)) else [out]:
                if hasattr(value, "numpy"):
                    value.numpy()
            times.append(time.perf_counter() - start)
        channel().emit(Kind.PREDICT_PROBE, calls=_state.predicts, rows=rows,
                       predict_seconds=round(statistics.median(_state.recent), 6),
                       direct_seconds=round(statistics.median(times), 6))
    except Exception as exc:  # the model cannot be called that way: no measured gain
        channel().emit(Kind.PREDICT_PROBE, calls=_state.predicts, rows=rows, error=type(exc).__name__)


def _timed_predict(predict):
    @functools.wraps(predict)
    def wrapper(self, *args, **kwargs):
        start = time.perf_counter()
        result = predict(self, *args, **kwargs)
        try:
            _state.predicts += 1
            _state.recent.append(time.perf_counter() - start)
            if _state.predicts == PROBE_CALL and not _state.probed:
                x = args[0] if args else kwargs.get("x")
                batch_size = kwargs.get("batch_size", args[1] if len(args) > 1 else None) or 32
                _probe(self, x, int(batch_size))
        except Exception:
            pass
        return result

    return wrapper


def _model_built(model) -> None:
    try:
        if model in _state.models:
            return
        _state.models.add(model)
    except TypeError:  # not weak-referenceable: count it anyway
        pass
    _state.built += 1
    _state.since_clear += 1
    channel().emit(Kind.MODELS_BUILT, count=_state.built, since_clear=_state.since_clear, clears=_state.clears)


def _counted_new(original_new, model_class):
    @functools.wraps(original_new)
    def new(cls, *args, **kwargs):
        model = original_new(cls, *args, **kwargs)
        try:
            # A model made inside another model's method (Sequential's inner Functional) is part of it.
            caller: FrameType | None = sys._getframe(1)
            while caller is not None and caller.f_code.co_name == "__new__":  # subclasses' own __new__
                caller = caller.f_back
            # tf_keras makes a throwaway instance of a functional subclass while it rewrites the class.
            throwaway = caller is not None and caller.f_code.co_name == "inject_functional_model_class"
            if caller is None or not (throwaway or isinstance(caller.f_locals.get("self"), model_class)):
                _model_built(model)
        except Exception:
            pass
        return model

    return new


def _counted_clear(clear):
    @functools.wraps(clear)
    def wrapper(*args, **kwargs):
        _state.clears += 1
        _state.since_clear = 0
        return clear(*args, **kwargs)

    return mark(wrapper, clear, FEATURE)


def _defining_class(klass: type, name: str) -> type | None:
    return next((k for k in klass.__mro__ if name in k.__dict__), None)


@on_keras
def patch(keras) -> None:
    """Count ``predict`` calls and built models, and ``clear_session()`` calls (every alias)."""
    model_class = keras.Model
    owner = _defining_class(model_class, "predict")
    if owner is not None:
        wrap_once(owner, "predict", _timed_predict, by=FEATURE)
    wrap_once(model_class, "__new__", lambda new: _counted_new(new, model_class), by=FEATURE)
    replaced: dict[int, object] = {}
    for module in (getattr(keras, "backend", None), getattr(keras, "utils", None)):
        clear = getattr(module, "clear_session", None)
        if clear is not None and not wrapped_by(clear, FEATURE):
            replaced[id(clear)] = replaced.get(id(clear)) or _counted_clear(clear)
    prefix = keras.__name__
    for name, module in sys.modules.copy().items():  # every alias of the same function (a copy: see _patch_aliases)
        if module is None or not name.startswith(prefix):
            continue
        clear = getattr(module, "clear_session", None)
        if clear is not None and id(clear) in replaced:
            try:
                module.clear_session = replaced[id(clear)]  # type: ignore[attr-defined]
            except (AttributeError, TypeError):
                pass
