"""The hook points every public alias of a function it wraps at the wrapper, scanning ``sys.modules``: a job's
other thread may import a module meanwhile (a stand-in mapping here does it in the middle of the scan)."""

from __future__ import annotations

import sys
import types

from tensorgauge.hook.patches import _patch_aliases


class _ImportingDuringScan(dict):
    """``sys.modules`` as another thread's import changes it while it is read item by item."""

    def items(self):
        for i, item in enumerate(super().items()):
            if i == 1:
                self["tgtest_imported_meanwhile"] = types.ModuleType("tgtest_imported_meanwhile")
            yield item


def test_aliases_are_repointed_while_another_thread_imports():
    def original():
        return "original"

    def wrapper():
        return "wrapped"

    alias = types.ModuleType("tgtest_api")
    alias.load = original
    modules = _ImportingDuringScan({"tgtest_first": types.ModuleType("tgtest_first"), "tgtest_api": alias})
    real, sys.modules = sys.modules, modules
    try:
        _patch_aliases("tgtest", {id(original): wrapper}, ("api",))
    finally:  # pytest itself reads sys.modules, even to report a failure
        sys.modules = real
    assert alias.load is wrapper
