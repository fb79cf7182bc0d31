"""``tensorgauge import FILE``: add a bundle's run to the store (checked in full first)."""

from __future__ import annotations

from tensorgauge.commands._shared import load_side, open_store


def import_bundle(store: str | None, path: str) -> int:
    from tensorgauge.store.bundle import import_bundle as store_bundle
    from tensorgauge.store.bundle import read

    bundle = read(path)  # every field checked before the store is touched
    load_side(store, path)  # ... and the run analysed once: a bundle that imports is one that shows
    run_id = store_bundle(open_store(store), bundle)
    print(f"imported {run_id}")
    return 0
