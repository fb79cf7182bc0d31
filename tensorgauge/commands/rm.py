"""``tensorgauge rm RUN...``: delete runs (all of them resolve before any is deleted)."""

from __future__ import annotations

from tensorgauge.commands._shared import open_store


def rm(store: str | None, refs: list[str]) -> int:
    opened = open_store(store, create=False)
    records = [opened.run(ref) for ref in refs]
    for record in records:
        opened.delete_run(record.run_id)
        print(f"removed {record.run_id}")
    return 0
