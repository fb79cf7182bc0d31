"""``tensorgauge rm RUN...``: delete runs (all of them resolve before any is deleted)."""

from __future__ import annotations

from tensorgauge.commands._shared import open_store


def rm(store: str | None, refs: list[str]) -> int:
    with open_store(store, create=False) as opened:
        run_ids = list(dict.fromkeys(opened.run_id_of(ref) for ref in refs))  # a damaged record can go too
        for run_id in run_ids:
            opened.delete_run(run_id)
            print(f"removed {run_id}")
    return 0
