"""``tensorgauge.keras.Callback``: phases, epochs and steps of fit/evaluate/predict.

Under ``tensorgauge run`` or ``tensorgauge.monitor()`` Keras is patched and the
callback is added for you; pass it yourself only when you want to be explicit.
Built on first use for Keras 3 (``keras``), or for ``tf_keras`` when
``TF_USE_LEGACY_KERAS=1``.
"""

from __future__ import annotations

import importlib
import os

_classes: dict[str, type] = {}


def _keras_package() -> str:
    return "tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True") else "keras"


def __getattr__(name):
    if name != "Callback":
        raise AttributeError(f"module 'tensorgauge.keras' has no attribute {name!r}")
    package = _keras_package()
    if package not in _classes:
        from tensorgauge.hook import keras_callback_class

        base = importlib.import_module(f"{package}.callbacks").Callback
        _classes[package] = keras_callback_class(base)
    return _classes[package]
