"""Phases for Keras 3, tf.keras and tf_keras, and TensorFlow's save/load, by patching.

Applied once a package has finished importing (see :mod:`.imports`). Each patch
wraps the original function, opens a phase around the call and returns exactly
what the original returns; errors propagate unchanged. ``fit``/``evaluate``/
``predict`` also get :class:`TensorgaugeCallback` for epochs and steps (the way
MLflow's autolog hooks in). The callback marks steps at ``*_batch_begin`` only:
overriding ``*_batch_end`` would turn off Keras 3's asynchronous batch-end
dispatch and slow the job.
"""

from __future__ import annotations

import functools
import os
import sys

from tensorgauge.hook import placement
from tensorgauge.hook.agent import agent
from tensorgauge.hook.features import load_features
from tensorgauge.hook.listeners import (
    FitCall,
    FitListener,
    fit_listeners,
    keras_imported,
    tensorflow_imported,
    torch_imported,
)
from tensorgauge.hook.wrapping import mark, original_of, wrap_once, wrapped_by

# Position of ``callbacks`` in positional arguments after ``self``.
_CALLBACKS_POSITION = {"fit": 5, "evaluate": 6, "predict": 4}


def _path_label(args) -> str:
    for arg in args[:2]:
        if isinstance(arg, (str, os.PathLike)):
            return os.path.basename(os.fspath(arg).rstrip("/\\")) or os.fspath(arg)
    return ""


def phase_wrapper(fn, kind: str, label: str | None = None, is_method: bool = False):
    """``fn`` inside an automatic phase of ``kind`` named ``label [path]``."""
    if wrapped_by(fn):
        return fn
    label = label or kind

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        a = agent()
        path = _path_label(args[1:] if is_method else args)
        phase_id = a.begin(f"{label} {path}".strip(), kind, auto=True)
        if phase_id is None:
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            a.end(phase_id, exc)
            raise
        a.end(phase_id)
        if kind == "load":  # load_model returns the model; load_weights fills its own
            placement.send(args[0] if is_method else result, "load")
        return result

    return mark(wrapper, fn)


def make_callback_class(base):
    """A Keras callback (subclass of ``base``) that records epochs and steps, and passes
    the fit's batches and end to the feature listeners (:mod:`.listeners`)."""

    _keras_callbacks = sys.modules.get(base.__module__.split(".")[0] + ".callbacks")

    class TensorgaugeCallback(base):  # type: ignore[valid-type,misc]  # Keras 3's or tf_keras' Callback
        """Records fit/evaluate/predict phases, epochs and every step for tensorgauge."""

        _tensorgauge = True
        # We never read logs: tf_keras need not turn them into numpy each batch.
        _supports_tf_logs = True

        def __init__(self, listeners: list[FitListener] | None = None):
            super().__init__()
            self._phases: dict[str, int | None] = {}
            if listeners is None:  # added by hand (tensorgauge.keras.Callback): no fit call to act on
                load_features()
                listeners = fit_listeners(FitCall(model=None, keras_callbacks=_keras_callbacks))
            self._listeners = listeners
            self._epoch = 0

        def _begin(self, key, name, kind, auto=True):
            self._phases[key] = agent().begin(name, kind, auto=auto)

        def _end(self, key):
            agent().end(self._phases.pop(key, None))

        def _tell(self, method: str, *args) -> None:
            for listener in list(self._listeners):
                try:
                    getattr(listener, method)(self.model, *args)
                except Exception:  # a feature failing must not reach the job
                    self._listeners.remove(listener)

        # Phases, for use without the patches (tensorgauge.keras.Callback).
        def on_train_begin(self, logs=None):
            self._begin("fit", "fit", "fit")
            steps = (self.params or {}).get("steps")
            self._tell("on_train_begin", steps if isinstance(steps, int) and steps > 0 else None)

        def on_train_end(self, logs=None):
            self._tell("on_train_end")
            self._end("fit")

        def on_test_begin(self, logs=None):
            self._begin("evaluate", "validation" if agent().inside("fit") else "evaluate", "evaluate")

        def on_test_end(self, logs=None):
            self._end("evaluate")

        def on_predict_begin(self, logs=None):
            self._begin("predict", "predict", "predict")

        def on_predict_end(self, logs=None):
            self._end("predict")

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = epoch
            self._begin("epoch", f"epoch {epoch + 1}", "epoch", auto=False)

        def on_epoch_end(self, epoch, logs=None):
            self._end("epoch")

        def on_train_batch_begin(self, batch, logs=None):
            agent().step_begin()
            self._tell("on_train_batch_begin", self._epoch, batch)

        def on_test_batch_begin(self, batch, logs=None):
            agent().step_begin()

        def on_predict_batch_begin(self, batch, logs=None):
            agent().step_begin()

    return TensorgaugeCallback


def _with_callback(fn, kind: str, callback_class, keras_callbacks):
    """Wrap Model.fit/evaluate/predict: a phase, plus our callback in ``callbacks``;
    for fit, the feature listeners act before it runs, see its batches, and after it returns."""
    position = _CALLBACKS_POSITION[kind]

    @functools.wraps(fn)
    def wrapper(self, *positional, **kwargs):
        args = list(positional)
        in_args = len(args) > position
        callbacks = args[position] if in_args else kwargs.get("callbacks")
        listeners: list[FitListener] = []
        # Inside fit, Keras passes its CallbackList to evaluate: ours is in it already.
        if callbacks is None or isinstance(callbacks, (list, tuple)):
            callbacks = list(callbacks or [])
            if not any(getattr(cb, "_tensorgauge", False) for cb in callbacks):
                if kind == "fit":
                    fit_input = (args[0] if args else kwargs.get("x"), args[1] if len(args) > 1 else kwargs.get("y"),
                                 args[2] if len(args) > 2 else kwargs.get("batch_size"))
                    listeners = fit_listeners(FitCall(self, keras_callbacks, args, kwargs, callbacks, fit_input))
                callbacks.append(callback_class(listeners))
            if in_args:
                args[position] = callbacks
            else:
                kwargs["callbacks"] = callbacks
        label = "validation" if kind == "evaluate" and agent().inside("fit") else kind
        result = phase_wrapper(fn, kind, label)(self, *args, **kwargs)
        for listener in listeners:
            listener.after_fit(self)
        return result

    return wrapper


def _patch_aliases(prefix: str, replaced: dict[int, object], only: tuple[str, ...]) -> None:
    """Point the public aliases of the originals (``tf.saved_model.save``,
    ``keras.models.load_model``) at their wrappers. Only modules named like
    ``only`` are scanned: looking through all of TensorFlow's ~1600 takes 50+ ms. The modules are a copy
    (``dict.copy`` runs no Python code): another thread's import changed them while a list was built."""
    for mod_name, module in sys.modules.copy().items():
        if module is None or not mod_name.startswith(prefix) or not any(o in mod_name for o in only):
            continue
        namespace = getattr(module, "__dict__", {})
        for attr, value in namespace.copy().items():
            wrapper = replaced.get(id(value))
            if wrapper is not None:
                try:
                    setattr(module, attr, wrapper)
                except (AttributeError, TypeError):
                    pass


def _patch_functions(module, names_kinds, prefix: str, only: tuple[str, ...]) -> None:
    replaced = {}
    for name, kind, label in names_kinds:
        wrapper = wrap_once(module, name, functools.partial(phase_wrapper, kind=kind, label=label))
        if wrapper is not None:
            replaced[id(original_of(wrapper))] = wrapper
    if replaced:
        _patch_aliases(prefix, replaced, only)


def patch_keras(package_name: str) -> None:
    """Keras 3 (``keras``) or legacy Keras 2 (``tf_keras``)."""
    keras = sys.modules.get(package_name)
    model_class = getattr(keras, "Model", None)
    callback_module = getattr(keras, "callbacks", None)
    callback_base = getattr(callback_module, "Callback", None)
    if model_class is None or callback_base is None:
        return
    callback_class = make_callback_class(callback_base)
    for kind in ("fit", "evaluate", "predict"):
        # Patch the class that defines it so every subclass (Sequential, Functional) sees it.
        for klass in model_class.__mro__:
            if kind in klass.__dict__:
                wrap_once(klass, kind, functools.partial(
                    _with_callback, kind=kind, callback_class=callback_class, keras_callbacks=callback_module))
                break
    for name, kind in (("save", "save"), ("save_weights", "save"), ("export", "save"),
                       ("load_weights", "load")):
        for klass in model_class.__mro__:
            if name in klass.__dict__:
                wrap_once(klass, name, functools.partial(phase_wrapper, kind=kind, label=name, is_method=True))
                break
    saving_api = sys.modules.get(f"{package_name}.src.saving.saving_api")
    if saving_api is not None:
        _patch_functions(saving_api, [("save_model", "save", "save_model"),
                                      ("load_model", "load", "load_model")], package_name, ("saving", "models"))


def patch_tensorflow() -> None:
    """tf.saved_model.save/load and tf.train.Checkpoint."""
    save_module = sys.modules.get("tensorflow.python.saved_model.save")
    load_module = sys.modules.get("tensorflow.python.saved_model.load")
    if save_module is not None:
        _patch_functions(save_module, [("save", "save", "saved_model.save")], "tensorflow", ("saved_model",))
    if load_module is not None:
        _patch_functions(load_module, [("load", "load", "saved_model.load")], "tensorflow", ("saved_model",))
    checkpoint_module = sys.modules.get("tensorflow.python.checkpoint.checkpoint")
    checkpoint_class = getattr(checkpoint_module, "Checkpoint", None)
    if checkpoint_class is not None:
        for name, kind in (("save", "save"), ("write", "save"), ("restore", "load"), ("read", "load")):
            wrap_once(checkpoint_class, name,
                        functools.partial(phase_wrapper, kind=kind, label=f"checkpoint.{name}", is_method=True))


def on_imported(name: str, module) -> None:
    """Called by the import watcher when a watched package has loaded."""
    if name == "tensorflow":
        patch_tensorflow()
        load_features()
        tensorflow_imported(module)
    elif name in ("keras", "tf_keras"):
        patch_keras(name)
        load_features()
        keras_imported(module)
    elif name == "torch":
        load_features()
        torch_imported(module)
