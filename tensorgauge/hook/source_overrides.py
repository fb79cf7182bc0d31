"""``tensorgauge fix --verify`` of a patch to a module the job's script imports: the module is read from the
patched copy named in ``$TENSORGAUGE_SOURCE_OVERRIDES`` (JSON: original path -> copy), compiled under its
own path (its ``__file__``, tracebacks and relative reads unchanged) and never cached as bytecode."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys

from tensorgauge.hook.protocol import SOURCE_OVERRIDES_ENV


class _PatchedLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, fullname: str, path: str, patched: str):
        super().__init__(fullname, path)
        self.patched = patched

    def get_code(self, fullname):
        with open(self.patched, "rb") as f:
            return compile(f.read(), self.path, "exec", dont_inherit=True)


class SourceOverrides:
    """A finder that gives the overridden modules their patched text."""

    def __init__(self, overrides: dict[str, str]):
        self.overrides = {os.path.realpath(k): v for k, v in overrides.items()}

    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = getattr(spec, "origin", None)
        if spec is None or not origin or os.path.realpath(origin) not in self.overrides:
            return None
        loader = _PatchedLoader(name, origin, self.overrides[os.path.realpath(origin)])
        return importlib.util.spec_from_file_location(
            name, origin, loader=loader, submodule_search_locations=spec.submodule_search_locations)

    def invalidate_caches(self) -> None:
        pass


def install() -> None:
    text = os.environ.get(SOURCE_OVERRIDES_ENV)
    if not text:
        return
    try:
        overrides = json.loads(text)
    except ValueError:
        return
    if isinstance(overrides, dict) and overrides:
        sys.meta_path.insert(0, SourceOverrides({str(k): str(v) for k, v in overrides.items()}))
