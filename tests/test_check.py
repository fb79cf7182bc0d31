"""tensorgauge check and baselines: the decision and the causes on hand-built runs, the outputs, and
the commands on real (small, non-TensorFlow) runs; a run that did not complete, in check and compare."""

import json
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import text_once_written

from tensorgauge.analyse.check import Limits, check
from tensorgauge.analyse.compare import Side, compare
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.model import Event, Finding, RunRecord, Sample
from tensorgauge.render.check import junit, markdown, text

MiB = 1 << 20


def side(label, step=0.010, cpu=10.0, rss=500 * MiB, config=None, weights=4 * MiB, stages=None, other=0.0,
         spread=0.0, killed=False, exit_code=0):
    """A run with one fit of 100 steps of ``step`` seconds (``killed``: by SIGTERM inside the fit)."""
    config = {"backend": "tensorflow", "run_eagerly": False, "jit_compile": "False", "steps_per_execution": 1,
              "batch_size": 64, "dataset": True, "dataset_stages": stages or ["_PrefetchDataset", "_MapDataset",
                                                                                "_BatchDataset"], **(config or {})}
    events = [Event(t=0.9, pid=1, kind="fit_config", data=config),
              Event(t=1.0, pid=1, kind="phase_begin", data={"id": 1, "name": "fit", "phase_kind": "fit"}),
              Event(t=1.1, pid=1, kind="memory_facts", data={"when": "steps", "weights_bytes": weights,
                                                             "optimizer_bytes": 2 * weights, "rss": rss // 2}),
              Event(t=1.0 + 100 * step, pid=1, kind="steps",
                    data={"phase": 1, "seconds": [step * (1 + spread * (-1) ** i) for i in range(100)],
                          "ends": [1.0 + step * (i + 1) for i in range(100)]}),
              Event(t=1.0 + 100 * step + 0.01, pid=1, kind="phase_end", data={"id": 1})]
    if killed:
        events.pop()  # the fit never ended
    end = 1.0 + 100 * step + 0.5
    samples = [Sample(t=0.1 * i, cpu_seconds=cpu * i / (end * 10), cores_busy=1.0, rss_bytes=rss, threads=4,
                      processes=1, cpu_percent=[50.0 * (1.0 + other)] * 2) for i in range(int(end * 10) + 1)]
    record = RunRecord(run_id=label, command=["python", "train.py"], started_at="2026", wall_seconds=end,
                       exit_code=None if killed else exit_code, signal=15 if killed else None, complete=True,
                       cpu_seconds_total=cpu, diagnosis="auto")
    return Side(label, RunReport.build(record, samples, events))


def test_an_unchanged_run_passes():
    result = check(side("a"), side("b", step=0.0102, cpu=10.3, rss=505 * MiB))
    assert result.passed and {c.verdict for c in result.checks} == {"pass"}
    assert [c.name for c in result.checks] == ["fit step p50", "CPU time", "RSS peak"]
    assert result.causes == []


def test_past_the_limit_but_within_the_noise_is_said_so_and_passes():
    result = check(side("a"), side("b", step=0.0115))
    step = result.checks[0]
    assert step.verdict == "within noise" and result.passed
    assert "within noise" in text(result)


def test_a_regression_fails_with_what_changed_first():
    result = check(side("a"), side("b", step=0.030, cpu=25.0, config={"run_eagerly": True}))
    assert not result.passed
    assert [c.verdict for c in result.checks[:2]] == ["fail", "fail"]
    assert result.causes[0] == "fit runs eagerly (run_eagerly): False -> True"
    out = text(result)
    assert out.startswith("FAIL") and "1. fit runs eagerly" in out


def test_times_from_a_busier_machine_are_not_established():
    result = check(side("a"), side("b", step=0.016, cpu=15.0, other=0.8))
    assert result.busier_cores == 0.8 and result.passed
    assert [c.verdict for c in result.checks[:2]] == ["within noise", "within noise"]
    assert "the machine was busier during this run (+0.80 cores" in text(result)
    quiet = check(side("a", other=0.1), side("b", step=0.016, cpu=15.0, other=0.2))
    assert not quiet.passed and quiet.note is None  # 0.1 core more: comparable, and a regression


def test_a_step_fails_only_when_the_step_distributions_separate():
    overlapping = check(side("a", spread=0.4), side("b", step=0.013, spread=0.4))  # +30%, quartiles overlap
    assert overlapping.checks[0].separated is False and overlapping.checks[0].verdict == "within noise"
    apart = check(side("a", spread=0.05), side("b", step=0.013, spread=0.05))
    assert apart.checks[0].separated is True and apart.checks[0].verdict == "fail"


def test_causes_name_a_removed_prefetch_and_a_larger_model():
    removed = check(side("a"), side("b", step=0.015, stages=["_MapDataset", "_BatchDataset"]))
    assert removed.causes[0].startswith("the input pipeline changed: prefetch removed")
    wider = check(side("a"), side("b", step=0.015, weights=int(4 * MiB * 1.6)))
    assert wider.causes[0].startswith("the model's weights: 4.0 MiB -> 6.4 MiB (+60%)")


def test_memory_growth_and_new_findings_fail_where_asked():
    grown = check(side("a"), side("b", rss=600 * MiB))
    assert not grown.passed and grown.failed[0].name == "RSS peak"
    assert check(side("a"), side("b", rss=600 * MiB), Limits(max_memory_growth=0.25)).passed
    a, b = side("a"), side("b")
    b.report.findings.append(Finding(id="input_bound", severity="high", title="input waits 40%"))
    assert check(a, b).passed and check(a, b).new_findings[0]["id"] == "input_bound"
    assert not check(a, b, Limits(no_new_findings=True)).passed


def test_a_run_that_did_not_complete_fails_whatever_its_figures():
    """Killed in its fit with 35% less CPU time: not 'PASS ... within its limits' but a failure that says it
    did not complete, where, in every output; a non-zero exit fails alike."""
    result = check(side("a"), side("b", cpu=6.5, killed=True))
    assert not result.passed and not result.failed and result.ended.where == "fit"
    out = text(result)
    assert out.startswith("FAIL: b against a: did not complete: it was killed by signal 15 (SIGTERM) in 'fit'")
    assert "its figures cover only what ran before it ended" in out and "What changed: nothing" not in out
    assert result.to_dict()["completed"] is False and result.to_dict()["ending"]["where"] == "fit"
    assert "**Failed**: the run did not complete: it was killed by signal 15 (SIGTERM) in 'fit'" in markdown(result)
    failure = ET.fromstring(junit(result)).find("testsuite/testcase[@name='completed']/failure")
    assert failure is not None and failure.get("type") == "not_completed"
    crashed = check(side("a"), side("b", exit_code=1))
    assert not crashed.passed and crashed.not_completed == "did not complete: it exited with code 1"


def test_compare_says_which_side_was_killed_and_compares_a_cut_phase_by_its_steps():
    comparison = compare(side("a"), side("b", cpu=6.5, killed=True))
    assert comparison.cut == ["B was killed by signal 15 (SIGTERM) in 'fit': the phases it cut are compared by "
                              "their steps alone."]
    assert [r.name for r in comparison.results] == ["fit first step (trace, compile)", "fit step p50"]
    assert comparison.largest is None and comparison.to_dict()["b"]["ending"]["completed"] is False
    whole = compare(side("a"), side("b", cpu=6.5))
    assert whole.cut == [] and "fit CPU" in [r.name for r in whole.results]


def test_the_input_of_a_fit_killed_before_its_ab_names_the_kill():
    """Not '--no-diagnose, or recorded by tensorgauge.monitor()' for a run with the A/B on."""
    split = side("b", killed=True).report.input_split
    assert split == {"measured": False, "why": "the job was killed by signal 15 (SIGTERM) in 'fit' before the "
                                                "input A/B reported"}
    assert side("a").report.input_split["why"] == "the input A/B sent no result for this fit"


def test_markdown_and_junit_outputs():
    result = check(side("a"), side("b", step=0.030, config={"run_eagerly": True}))
    md = markdown(result)
    assert "| check | baseline | now | change | limit | noise | verdict |" in md and "**fail**" in md
    assert "1. fit runs eagerly (run_eagerly): False -> True" in md
    suite = ET.fromstring(junit(result)).find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == "1"
    assert suite.find("testcase[@name='completed']/failure") is None
    failure = suite.find("testcase[@name='fit step p50']/failure")
    assert failure is not None and "run_eagerly" in failure.text


JOB = "import time, tensorgauge\nwith tensorgauge.phase('train'):\n    time.sleep(0.3)\n"


def tg(tg_cmd, *args):
    return subprocess.run([*tg_cmd, *args], capture_output=True, text=True, timeout=120)


def test_baselines_are_saved_listed_checked_against_and_removed(store_path, tg_cmd, tmp_path):
    assert tg(tg_cmd, "run", "-q", "--name", "base", "--", sys.executable, "-c", JOB).returncode == 0
    assert tg(tg_cmd, "run", "-q", "--name", "new", "--", sys.executable, "-c", JOB).returncode == 0
    saved = tg(tg_cmd, "baseline", "save", "nightly", "base")
    assert saved.returncode == 0 and "baseline nightly" in saved.stdout
    assert "nightly" in tg(tg_cmd, "baseline", "list").stdout
    checked = tg(tg_cmd, "check", "new", "--against", "nightly", "--max-memory-growth", "200%",
                 "--max-slower", "200%", "--format", "markdown", "--json", str(tmp_path / "check.json"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "tensorgauge check" in checked.stdout and (tmp_path / "check.json").exists()
    bundle = store_path.parent / "baselines" / "nightly.json"
    assert tg(tg_cmd, "check", "new", "--against", str(bundle), "--max-slower", "200%",
              "--max-memory-growth", "200%").returncode == 0  # the same baseline as a file
    assert tg(tg_cmd, "baseline", "rm", "nightly").returncode == 0
    assert "no baselines" in tg(tg_cmd, "baseline", "list").stdout


EPOCHS = Path(__file__).parent / "jobs" / "epochs_until_marked.py"


def test_a_run_killed_in_epoch_2_fails_its_check_and_compare_says_where(store_path, tg_cmd, tmp_path):
    """A real run stopped by SIGTERM part-way, against a complete run's baseline: exit 1 and 'did not
    complete', where the CPU time alone would have passed; compare names the killed side and where; and a
    baseline saved from the killed run is refused (exit 2, one line)."""
    assert tg(tg_cmd, "run", "-q", "--name", "whole", "--", sys.executable, str(EPOCHS)).returncode == 0
    assert tg(tg_cmd, "baseline", "save", "whole", "whole").returncode == 0
    marker = tmp_path / "marker"
    monitor = subprocess.Popen([*tg_cmd, "run", "-q", "--name", "cut", "--", sys.executable, str(EPOCHS), str(marker)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    text_once_written(marker, monitor, timeout=60)
    monitor.send_signal(signal.SIGTERM)  # passed on to the job
    assert monitor.wait(timeout=60) == 128 + signal.SIGTERM
    checked = tg(tg_cmd, "check", "cut", "--against", "whole", "--max-slower", "500%", "--max-memory-growth", "500%")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert ("did not complete: it was killed by signal 15 (SIGTERM) in 'epoch 2'"
            in checked.stdout.splitlines()[0]), checked.stdout
    compared = tg(tg_cmd, "compare", "whole", "cut", "--json", str(tmp_path / "compare.json"))
    assert compared.returncode == 0, compared.stderr
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert doc["cut"] == ["B was killed by signal 15 (SIGTERM) in 'epoch 2': the phases it cut are compared by "
                          "their steps alone."]
    assert {(r["name"], r["measure"]) for r in doc["results"]} & {("fit", "wall"), ("fit CPU", "CPU")} == set()
    assert "B was killed by signal 15 (SIGTERM) in 'epoch 2'" in tg(tg_cmd, "compare", "whole", "cut").stdout
    assert tg(tg_cmd, "baseline", "save", "cut", "cut").returncode == 0
    refused = tg(tg_cmd, "check", "whole", "--against", "cut")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().endswith("did not complete: it was killed by signal 15 (SIGTERM) in 'epoch 2'; "
                                           "save one from a run that completed")


def test_limits_come_from_pyproject_and_flags_win(store_path, tg_cmd, tmp_path):
    assert tg(tg_cmd, "run", "-q", "--name", "new", "--", sys.executable, "-c", JOB).returncode == 0
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.tensorgauge.check]\nmax_slower = "500%"\nmax_memory_growth = 0.2\n')
    doc = tmp_path / "check.json"
    assert tg(tg_cmd, "check", "new", "--against", "new", "--config", str(config), "--json", str(doc)).returncode == 0
    assert __import__("json").loads(doc.read_text())["limits"]["max_slower"] == 5.0
    tg(tg_cmd, "check", "new", "--against", "new", "--config", str(config), "--max-slower", "5%", "--json", str(doc))
    assert __import__("json").loads(doc.read_text())["limits"]["max_slower"] == 0.05
    config.write_text("[tool.tensorgauge.check]\nmax_slowr = 1\n")
    bad = tg(tg_cmd, "check", "new", "--against", "new", "--config", str(config))
    assert bad.returncode == 2 and "unknown keys max_slowr" in bad.stderr


@pytest.mark.parametrize("args, message", [
    (("check", "new", "--against", "missing"), "missing"),
    (("check", "new", "--against", "new", "--max-slower", "ten"), "is not a share"),
    (("baseline", "save", "../x", "new"), "baseline name"),
    (("baseline", "rm", "nope"), "no baseline named nope"),
])
def test_bad_input_is_one_line_and_exit_2(store_path, tg_cmd, args, message):
    assert tg(tg_cmd, "run", "-q", "--name", "new", "--", sys.executable, "-c", JOB).returncode == 0
    result = tg(tg_cmd, *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
