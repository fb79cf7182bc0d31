"""``tensorgauge export RUN -o FILE``: write a run to a portable bundle."""

from __future__ import annotations

from tensorgauge.commands._shared import check_output, open_store
from tensorgauge.render.text import plain


def export(store: str | None, ref: str, output: str) -> int:
    from tensorgauge.store.bundle import export_run

    check_output(output, store)
    with open_store(store, create=False) as opened:
        bundle = export_run(opened, ref)
    bundle.write(output)
    if output != "-":  # stdout holds the bundle
        print(f"exported {bundle.record.run_id} to {plain(output)}")
    return 0
