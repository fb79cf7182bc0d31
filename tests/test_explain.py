"""`tensorgauge explain`: a page for every registered finding, written from the rules' own thresholds,
printed by the CLI (and built into the documentation site from the same entries)."""

from typing import get_args

import pytest

import tensorgauge.analyse.findings  # noqa: F401  (every rule registers on import)
from tensorgauge.analyse import pauses
from tensorgauge.analyse.rule_docs import PAGES, ids
from tensorgauge.analyse.rules import REGISTRY
from tensorgauge.cli import main
from tensorgauge.model import Severity
from tensorgauge.render.rule_page import markdown, show_text

SECTIONS = ("## What it means", "## How it is measured", "## When it fires", "## What `show` prints", "## The fix",
            "## How to check it")


def registered() -> dict[str, str]:
    return {i: entry.category for entry in REGISTRY for i in entry.ids}


def test_every_registered_finding_has_a_page_and_every_page_a_rule():
    assert set(PAGES) == set(registered())


def test_each_page_is_filed_under_its_rule_s_category_and_its_example_is_that_finding():
    for rule_id, doc in PAGES.items():
        assert doc.id == rule_id and doc.category == registered()[rule_id]
        assert doc.example.id == rule_id and doc.example.severity in get_args(Severity)
        assert doc.summary and doc.meaning and doc.measured and doc.thresholds and doc.fix and doc.check


def test_the_example_is_printed_as_show_prints_a_finding_with_its_id():
    text = show_text(PAGES["stalls"].example)
    assert text.startswith(f"  {PAGES['stalls'].example.severity} Training stalled") and "(stalls)" in text
    assert "    fix: " in text and "    expected gain: " in text


def test_thresholds_are_written_from_the_rule_s_constants():
    text = " ".join(PAGES["stalls"].thresholds)
    assert f"{pauses.STALL_FACTOR:g}x the fit's median step" in text
    assert f"first {pauses.WARMUP_STEPS} steps" in text


def test_explain_an_id_prints_its_page(capsys):
    assert main(["explain", "stalls"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# `stalls`\n") and all(s in out for s in SECTIONS)
    assert "(stalls)" in out  # the example, as show prints it


@pytest.mark.parametrize("rule_id", sorted(PAGES))
def test_explain_prints_every_page(rule_id, capsys):
    assert main(["explain", rule_id]) == 0
    assert capsys.readouterr().out == markdown(PAGES[rule_id])


def test_explain_without_an_id_lists_every_id(capsys):
    assert main(["explain"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[: len(PAGES)]]
    assert listed == ids() == sorted(registered())


def test_an_unknown_id_exits_2_with_one_line_naming_the_ids(capsys):
    assert main(["explain", "stall"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err and captured.out == ""
    assert "'stall'" in err and all(i in err for i in registered())
