"""``tensorgauge show RUN``: one run's summary, phases, account and findings (or its JSON)."""

from __future__ import annotations

from tensorgauge.commands._shared import console, open_store, write_json


def show(store: str | None, ref: str, json_path: str | None = None) -> int:
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.render.terminal import render_run

    report = RunReport.load(open_store(store, create=False), ref)
    if json_path:
        write_json(report.to_dict(), json_path)
        if json_path == "-":
            return 0
    render_run(console(), report)
    return 0
