"""The README's first set-up command: `tensorgauge demo` records the built-in job and shows its phases."""

import pytest
from conftest import needs_tf

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.cli import main
from tensorgauge.store import Store

pytestmark = [needs_tf, pytest.mark.tf]


def test_demo_records_train_save_load_predict(store_path, capsys, monkeypatch):
    monkeypatch.setenv("TENSORGAUGE_DEMO_EPOCHS", "1")
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "Phases" in out and "import tensorflow" in out and "epoch 1" in out
    report = RunReport.load(Store.open(store_path), "demo")
    page = store_path.parent / "reports" / f"{report.record.run_id}.html"
    assert f"Report: {page}" in out.replace("\n", "") and "c-cores" in page.read_text()
    kinds = [p.kind for p in report.phases if p.parent is None]
    assert kinds == ["import", "fit", "save", "load", "predict"]
    assert report.record.env["job"]["tensorflow_version"]
    datasets = [e.data for e in report.events if e.kind == "dataset"]
    assert {"op": "from_tensor_slices", "bytes": 20_000 * 64 * 4 + 20_000 * 4, "elements": 20_000} in [
        {k: d[k] for k in ("op", "bytes", "elements")} for d in datasets if d["op"] == "from_tensor_slices"]
    assert any(d["op"] == "shuffle" and d["buffer_size"] == 4096 for d in datasets)
