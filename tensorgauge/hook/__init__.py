"""The hook: code that runs inside the user's job (standard library only).

``tensorgauge run`` puts ``_site`` on the job's PYTHONPATH; its
``sitecustomize`` calls :func:`install`, which watches for the first import of
TensorFlow/Keras and sends events over :mod:`.channel`. It never imports
TensorFlow itself, never changes what the job computes, and keeps quiet when
no monitor listens.
"""

from __future__ import annotations

_installed = False


def keras_callback_class(base: type) -> type:
    """The callback the hook adds to every fit, as a subclass of ``base`` (Keras 3's or tf_keras'
    ``Callback``): for jobs that add it themselves (``tensorgauge.keras.Callback``)."""
    from tensorgauge.hook.patches import make_callback_class

    return make_callback_class(base)


def install() -> None:
    """Start watching imports (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    import atexit
    import sys

    from tensorgauge.hook import source_overrides
    from tensorgauge.hook.exit import at_exit
    from tensorgauge.hook.imports import WATCHED, ImportWatcher
    from tensorgauge.hook.patches import on_imported

    source_overrides.install()

    loaded = [name for name in WATCHED if name in sys.modules]
    for name in loaded:  # imported before us (tensorgauge.monitor() in a notebook)
        on_imported(name, sys.modules[name])
    # Registered first, so it runs after the job's own atexit handlers: what the
    # kernel counts after this event is interpreter and TensorFlow shutdown.
    atexit.register(at_exit)
    watcher = ImportWatcher(on_imported, [n for n in WATCHED if n not in loaded])
    if watcher.watched:
        watcher.install()
