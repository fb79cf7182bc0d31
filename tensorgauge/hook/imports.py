"""Watch the job's first import of TensorFlow / Keras / PyTorch, without importing them.

A meta-path finder that, for a watched top-level name, asks the other finders
for the real spec and wraps that loader's ``exec_module`` (on the instance, so
``module.__loader__`` stays the real loader). The wrapper records an ``import``
phase around the outermost watched import and calls the ``on_imported``
callback when a package has finished loading. A ``find_spec`` probe without an
import (TensorFlow probes for keras) changes nothing: the finder stays installed
until the package really executes.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from tensorgauge.hook.agent import agent

WATCHED = ("tensorflow", "keras", "tf_keras", "torch")


class ImportWatcher:
    def __init__(self, on_imported: Callable[[str, object], None], watched=WATCHED):
        self.on_imported = on_imported
        self.watched = set(watched)
        self._local = threading.local()
        self._import_phase: int | None = None

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.watched or getattr(self._local, "busy", False):
            return None
        self._local.busy = True
        try:
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        except Exception:
            return None
        finally:
            self._local.busy = False
        loader = spec.loader
        if loader is not None and hasattr(loader, "exec_module"):
            try:
                setattr(loader, "exec_module", self._wrap(fullname, loader, loader.exec_module))  # noqa: B010
            except (AttributeError, TypeError):  # a loader with __slots__: leave it be
                pass
        return spec

    def _wrap(self, fullname: str, loader, exec_module):
        watcher = self

        def exec_module_watched(module):
            # Restore the loader's own method: this runs once per import.
            try:
                del loader.exec_module
            except AttributeError:
                pass
            outer = watcher._import_phase is None
            if outer:
                watcher._import_phase = agent().begin(f"import {fullname}", "import")
            failed = None
            try:
                exec_module(module)
            except BaseException as exc:
                failed = exc
                raise
            finally:
                # The patches run inside the import's phase: the job's import returns only after them.
                if failed is None:
                    watcher.watched.discard(fullname)
                    try:
                        watcher.on_imported(fullname, module)
                    except Exception:
                        pass  # a patch that fails must never break the job's import
                if outer:
                    phase_id, watcher._import_phase = watcher._import_phase, None
                    agent().end(phase_id, failed)
                if not watcher.watched:
                    watcher.uninstall()

        return exec_module_watched
