"""``tensorgauge baseline save NAME RUN | list | rm NAME``: named baselines, kept as bundles in a
``baselines`` folder beside the store (portable: copy one into a repository and check against the file)."""

from __future__ import annotations

import re
from pathlib import Path

from tensorgauge.commands._shared import open_store
from tensorgauge.errors import TensorgaugeError
from tensorgauge.render.text import plain

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def folder(store: str | None) -> Path:
    return open_store(store, create=False).data_dir / "baselines"


def _path(store: str | None, name: str) -> Path:
    if not NAME.fullmatch(name):
        raise TensorgaugeError(f"baseline name {plain(name)!r}: use letters, digits, '.', '_' and '-' "
                               "(at most 100, not starting with a dot)")
    return folder(store) / f"{name}.json"


def resolve(store: str | None, ref: str) -> str:
    """A named baseline's bundle file, else ``ref`` as it is (a bundle file or a run)."""
    if NAME.fullmatch(ref) and not Path(ref).is_file():
        try:
            path = _path(store, ref)
        except TensorgaugeError:
            return ref
        if path.is_file():
            return str(path)
    return ref


def baseline(store: str | None, action: str, name: str | None = None, run: str | None = None) -> int:
    from tensorgauge.store.bundle import export_run

    if action == "list":
        found = sorted(folder(store).glob("*.json")) if folder(store).is_dir() else []
        for path in found:
            print(f"{path.stem}\t{path}")
        if not found:
            print("no baselines: tensorgauge baseline save NAME RUN")
        return 0
    if not name:
        raise TensorgaugeError(f"baseline {action} takes a NAME")
    path = _path(store, name)
    if action == "rm":
        if not path.is_file():
            raise TensorgaugeError(f"no baseline named {plain(name)}")
        path.unlink()
        print(f"removed baseline {plain(name)}")
        return 0
    if not run:
        raise TensorgaugeError("baseline save takes a NAME and a RUN")
    bundle = export_run(open_store(store, create=False), run)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    bundle.write(partial)
    partial.replace(path)  # a reader never sees half a baseline
    print(f"baseline {plain(name)}: run {bundle.record.run_id} ({path})")
    return 0
