"""``tensorgauge runs``: list the recorded runs."""

from __future__ import annotations

from pathlib import Path

from tensorgauge.commands._shared import console, open_store


def runs(store: str | None) -> int:
    from tensorgauge.render.terminal import render_runs
    from tensorgauge.store import default_store_path, is_url

    location = store or str(default_store_path())
    if not is_url(location) and not Path(location).exists():
        render_runs(console(), [], {})
        return 0
    opened = open_store(store, create=False)
    render_runs(console(), opened.runs(), opened.peaks())
    return 0
