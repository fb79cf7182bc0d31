"""Which stage of a fit's tf.data pipeline costs, measured in real jobs with a known truth: each prefix of
the pipeline pulled on its own as the fit ends, the costliest stage named with its function's file:line."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_tf

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.store import Store

pytestmark = [needs_tf, pytest.mark.tf, pytest.mark.apart]  # shares of a pipeline's wall time
JOB = Path(__file__).parent / "jobs" / "staged_input.py"
# The costly map does 10 units of work to each cheap one's one: 0.83-0.91 of the pipeline. Beside a one-core CPU
# hog a cheap stage's time doubled or tripled in some runs (custom loop: 0.63-0.81): asserted to take the most.
COSTLY_SHARE_AT_LEAST = 0.5


def record(tg_cmd, store_path, *args) -> RunReport:
    result = subprocess.run([*tg_cmd, "run", "-q", "--diagnose", "--", sys.executable, str(JOB), *args],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    return RunReport.load(Store.open(store_path), "last")


def line_of(name: str) -> int:
    return next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if line.startswith(f"def {name}("))


def test_the_map_that_does_ten_times_the_work_is_named_costliest(store_path, tg_cmd):
    report = record(tg_cmd, store_path)
    split = report.input_split
    assert split is not None and split.get("stages"), split
    timed = [s for s in split["stages"] if s["share"] is not None]
    top = max(timed, key=lambda s: s["share"])
    assert top["function"] == "costly_transform" and top["location"] == f"staged_input.py:{line_of('costly_transform')}"
    assert top["share"] >= COSTLY_SHARE_AT_LEAST, split["stages"]
    # The cheap maps run Python too: each is named as a py_function stage.
    assert [s["stage"] for s in split["stages"]].count("Map (py_function)") == 3
    assert split["stages_cost_seconds"] > 0
    finding = next(f for f in report.findings if f.id == "input_bound")
    assert finding.evidence["costliest_stage"]["function"] == "costly_transform"
    assert "vectorise costly_transform" in finding.fix


def test_a_generator_fed_fit_names_the_generator_with_its_file_and_line(store_path, tg_cmd):
    report = record(tg_cmd, store_path, "--generator")
    stages = (report.input_split or {}).get("stages") or []
    generator = next(s for s in stages if s["stage"] == "from_generator")
    assert generator["function"] == "slow_rows"
    assert generator["location"] == f"staged_input.py:{line_of('slow_rows')}"
    assert generator["share"] >= 0.5, stages


def test_a_custom_loop_over_the_pipeline_has_its_stages_timed_as_it_ends(store_path, tg_cmd):
    report = record(tg_cmd, store_path, "--loop")
    assert any(p.name == "train loop" for p in report.phases)
    stages = (report.input_split or {}).get("stages") or []
    top = max((s for s in stages if s["share"] is not None), key=lambda s: s["share"])
    assert top["function"] == "costly_transform" and top["location"] == f"staged_input.py:{line_of('costly_transform')}"
    assert top["share"] >= COSTLY_SHARE_AT_LEAST, stages
    finding = next(f for f in report.findings if f.id == "input_bound")
    assert finding.evidence["costliest_stage"]["function"] == "costly_transform"
    assert finding.fix.startswith("The costliest stage is Map (py_function) costly_transform")


def test_a_pydataset_fed_fit_names_its_getitem_with_its_file_and_line(store_path, tg_cmd):
    report = record(tg_cmd, store_path, "--pydataset")
    stages = (report.input_split or {}).get("stages") or []
    assert [s["stage"] for s in stages] == ["PyDataset.__getitem__"], report.input_split
    line = next(i for i, text in enumerate(JOB.read_text().splitlines(), 1) if "def __getitem__(" in text)
    assert stages[0]["function"] == "SlowBatches.__getitem__"
    assert stages[0]["location"] == f"staged_input.py:{line}"
    assert stages[0]["seconds_per_batch"] > 0 and stages[0]["share"] == 1.0
    finding = next(f for f in report.findings if f.id == "input_bound")
    assert "SlowBatches.__getitem__ (staged_input.py:" in finding.fix and "use_multiprocessing=True" in finding.fix


def test_a_stage_whose_elements_are_large_is_not_charged_for_copying_them(store_path, tg_cmd):
    # keras' timeseries_dataset_from_array: the whole array zipped into every element until a map takes a
    # window. Batched as they were, the zip's elements cost ~100 MB of copies a pull, and it was named
    # costliest (keras-io's weather LSTM: Zip 100%, its windowing map 0%).
    report = record(tg_cmd, store_path, "--windows")
    stages = (report.input_split or {}).get("stages") or []
    top = max((s for s in stages if s["share"] is not None), key=lambda s: s["share"])
    assert top["function"] == "costly_window", stages
    assert top["location"] == f"staged_input.py:{line_of('costly_window')}"
    assert top["share"] >= COSTLY_SHARE_AT_LEAST, stages


def test_a_pipeline_ending_in_a_zip_of_batched_branches_times_every_stage_per_batch(store_path, tg_cmd):
    # keras-io's mixup: zip((a.batch(64), b.batch(64))).map(mix_up). The batch size was looked for only
    # above the zip: the stages before the batch were timed per element, the batch per batch, and the
    # batch charged with the costly map's work.
    report = record(tg_cmd, store_path, "--zipped")
    stages = (report.input_split or {}).get("stages") or []
    top = max((s for s in stages if s["share"] is not None), key=lambda s: s["share"])
    assert top["function"] == "costly_transform", stages
    assert top["share"] >= COSTLY_SHARE_AT_LEAST, stages
