"""``%load_ext tensorgauge`` and ``%%tensorgauge``: a real notebook executed in a real kernel."""

import pytest
from conftest import needs_tf

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.store import Store

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (make test installs it)")
nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (make test installs it)")
pytest.importorskip("ipykernel", reason="ipykernel is not installed (make test installs it)")

FIT_CELL = """%%tensorgauge --name nb-fit
import keras
import numpy as np
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(np.zeros((256, 8)), np.zeros((256, 1)), epochs=2, batch_size=32, verbose=0)
print("trained")"""


def execute(tmp_path, *cells: str):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    return notebook.cells


def outputs(cell, key: str) -> str:
    found = []
    for out in cell.outputs:
        if out.output_type == "stream":
            found.append(out.text if key == "text/plain" else "")
        elif "data" in out:
            found.append(out.data.get(key, ""))
        elif out.output_type == "error":
            found.append(f"{out.ename}: {out.evalue}")
    return "\n".join(found)


@needs_tf
@pytest.mark.tf
def test_a_cell_recorded_by_the_magic_is_in_the_store_and_its_report_in_the_cell(store_path, tmp_path):
    cells = execute(tmp_path, "%load_ext tensorgauge", FIT_CELL, "%tensorgauge show", "%%tensorgauge --bogus\n1",
                    "%%tensorgauge --name nb-error\nraise ValueError('the cell fails')")
    run = next(r for r in Store.open(store_path).runs() if r.name == "nb-fit")
    report = RunReport.load(Store.open(store_path), run.run_id)
    fit = next(p for p in report.phases if p.kind == "fit")
    assert fit.steps == 16 and [p.name for p in report.phases if p.kind == "epoch"] == ["epoch 1", "epoch 2"]
    fit_cell = cells[1]
    assert "trained" in outputs(fit_cell, "text/plain")  # the cell's own output, kept
    html = outputs(fit_cell, "text/html")
    assert "<iframe srcdoc=" in html and run.run_id in html  # the HTML report, inline
    assert run.run_id in outputs(fit_cell, "text/plain")  # and plain text where HTML is not shown
    assert run.run_id in outputs(cells[2], "text/plain") and "fit" in outputs(cells[2], "text/plain")
    assert "unknown option --bogus" in outputs(cells[3], "text/plain")
    # A failing cell: its error is the cell's, and its run is stored all the same.
    assert "ValueError: the cell fails" in outputs(cells[4], "text/plain")
    assert any(r.name == "nb-error" for r in Store.open(store_path).runs())


def test_a_line_magic_without_its_verb_says_so_in_one_line(capsys):
    from tensorgauge.notebook import line_magic

    line_magic("")
    line_magic("bogus")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "tensorgauge: the following arguments are required: what"
    assert out[1].startswith("tensorgauge: argument what: invalid choice: 'bogus'") and len(out) == 2
