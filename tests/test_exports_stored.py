"""What the exporters dropped is kept with the run (``RunRecord.exports``): ``show --json`` writes it,
``show`` says it, and writing it after the analysis leaves the stored analysis valid."""

import dataclasses

from rich.console import Console

from tensorgauge.analyse.run_report import RunReport, analysis_key
from tensorgauge.model import RunRecord, Summary
from tensorgauge.render.terminal import render_run

RECORD = RunRecord(run_id="r1", command=["python", "train.py"], started_at="2026-01-01T00:00:00+00:00",
                   wall_seconds=2.0, exit_code=3, complete=True)
SUMMARY = Summary(cpu_seconds=1.0, cores_busy_mean=0.5, cores_busy_peak=1.0, rss_peak_bytes=1 << 20,
                  uss_peak_bytes=None, threads_peak=1, processes_peak=1, samples=20)


def shown(record: RunRecord) -> str:
    console = Console(record=True, width=200)
    render_run(console, RunReport(record=record, events=[], summary=SUMMARY))
    return console.export_text()


def test_the_dropped_exports_are_in_the_run_document_and_its_page():
    dropped = dataclasses.replace(RECORD, exports={"otlp": {"dropped": 4}})
    assert RunReport(record=dropped, events=[], summary=SUMMARY).to_dict()["exports"] == {"otlp": {"dropped": 4}}
    assert "exports dropped (nothing took them; the job was not held up): otlp 4" in shown(dropped)
    none_lost = dataclasses.replace(RECORD, exports={"otlp": {"dropped": 0}})
    assert "exports dropped" not in shown(none_lost)
    assert RunReport(record=RECORD, events=[], summary=SUMMARY).to_dict()["exports"] is None


def test_writing_them_after_the_analysis_keeps_the_stored_analysis():
    assert analysis_key(dataclasses.replace(RECORD, exports={"otlp": {"dropped": 4}})) == analysis_key(RECORD)
    assert analysis_key(dataclasses.replace(RECORD, exit_code=0)) != analysis_key(RECORD)
