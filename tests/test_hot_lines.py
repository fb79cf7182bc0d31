"""A Python stage's hottest lines from py-spy's raw output (hook.hot_lines), on fakes: frames parsed,
samples attributed to the deepest line inside the function's range, the top lines ranked with their
text; py-spy missing or unable to attach gives one line why; the lines in the stage row, ``show`` and
the HTML report."""

import io
import os
import stat
import sys
from pathlib import Path

from rich.console import Console

from tensorgauge.analyse.input_stages import own_costs
from tensorgauge.hook.hot_lines import attribute, code_span, parse_raw, sample, top_lines
from tensorgauge.render.terminal import render_hot_lines


def featurize(x):
    y = x * 2
    total = sum(i * i for i in range(50))
    return y + total


FIRST = featurize.__code__.co_firstlineno
HOT = FIRST + 2
HERE = __file__


def raw() -> str:
    """py-spy's raw output for ``featurize``: its hot line under a generator expression, its cheap line,
    a stack outside it, and a line that is not a stack."""
    return "\n".join([
        f"<module> (/job/train.py:9);featurize ({HERE}:{HOT});featurize.<locals>.<genexpr> ({HERE}:{HOT}) 70",
        f"<module> (/job/train.py:9);featurize ({HERE}:{HOT}) 10",
        f"<module> (/job/train.py:9);featurize ({HERE}:{FIRST + 1});helper (/job/util.py:3) 20",
        "<module> (/job/train.py:12);fit (/lib/keras/trainer.py:300) 400",
        "not a stack",
        ""])


def test_raw_output_is_parsed_into_frames_and_counts():
    stacks = parse_raw(raw())
    assert len(stacks) == 4
    assert stacks[0] == ([("/job/train.py", 9), (HERE, HOT), (HERE, HOT)], 70)
    assert parse_raw("<module> (C:\\a b\\t.py:3) 2") == [([("C:\\a b\\t.py", 3)], 2)]


def test_samples_go_to_the_deepest_line_inside_the_function_and_the_top_lines_are_ranked():
    span = code_span(featurize)
    assert span is not None and span[0] == HERE and span[1] == FIRST and span[2] == FIRST + 3
    lines, inside = attribute(parse_raw(raw()), span)
    assert inside == 100  # the 400 samples in fit are not featurize's
    assert lines == {(HERE, HOT): 80, (HERE, FIRST + 1): 20}  # a callee's samples go to the calling line
    ranked = top_lines(lines, inside)
    name = os.path.basename(HERE)
    assert ranked == [{"location": f"{name}:{HOT}", "code": "total = sum(i * i for i in range(50))", "share": 0.8},
                      {"location": f"{name}:{FIRST + 1}", "code": "y = x * 2", "share": 0.2}]


def test_a_lambda_autograph_generated_has_its_samples_on_the_users_function_it_calls():
    generated = "/tmp/__autograph_generated_fileab12.py"
    library = "/venv/lib/python3.11/site-packages/numpy/core/fromnumeric.py"
    stacks = [([(generated, 14), (HERE, HOT), (library, 3)], 9),  # in featurize's hot line, then numpy
              ([(generated, 14)], 1)]  # in the lambda itself
    lines, inside = attribute(stacks, (generated, 10, 20))
    assert lines == {(HERE, HOT): 9, (generated, 14): 1} and inside == 10
    assert [x["location"] for x in top_lines(lines, inside)] == [f"{os.path.basename(HERE)}:{HOT}"]  # not AutoGraph's


def test_a_file_outside_the_function_at_the_same_lines_is_not_counted():
    lines, inside = attribute([([("/elsewhere/other.py", HOT)], 5)], (HERE, FIRST, FIRST + 3))
    assert inside == 0 and not lines


def fake_py_spy(tmp_path: Path, body: str) -> str:
    """An executable standing in for py-spy: a shell script."""
    script = tmp_path / "py-spy"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_py_spy_missing_gives_one_line_with_the_extra_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    out = sample(featurize, lambda: lambda: None, None)
    assert out == {"hot_lines_why": "py-spy is not installed: pip install tensorgauge[profile] names its hottest lines"}


def test_py_spy_unable_to_attach_gives_one_line_why_and_its_cost(tmp_path):
    spy = fake_py_spy(tmp_path, "echo 'Error: Permission Denied (os error 13)' >&2; exit 1")
    pulls = []
    out = sample(featurize, lambda: lambda: pulls.append(1), None, executable=spy)
    assert out["hot_lines_why"].startswith("py-spy took no sample: Permission Denied (os error 13) (it needs ptrace")
    assert "\n" not in out["hot_lines_why"] and "hot_lines" not in out
    assert out["sampling_cpu_seconds"] >= 0


def test_a_sampler_that_writes_raw_output_names_the_lines(tmp_path):
    # Stands in for py-spy record: writes the raw file named after --output, then waits for SIGINT.
    body = f"""out=""; while [ $# -gt 0 ]; do [ "$1" = --output ] && out="$2"; shift; done
cat > "$out" <<'RAW'
{raw()}
RAW
trap 'exit 0' INT; while true; do sleep 0.01; done"""
    out = sample(featurize, lambda: lambda: None, 0.3, executable=fake_py_spy(tmp_path, body))
    assert out["hot_lines"][0]["location"].endswith(f":{HOT}") and out["hot_lines"][0]["share"] == 0.8
    assert out["hot_samples"] == 100 and out["sampling_cpu_seconds"] >= 0


def test_too_little_allowance_left_is_said_not_sampled(tmp_path):
    out = sample(featurize, lambda: lambda: None, 0.05, executable=fake_py_spy(tmp_path, "exit 0"))
    assert out["hot_lines_why"].startswith("the allowance left 0.05 s")


def test_the_row_carries_the_hot_lines_and_show_prints_them():
    stage = {"stage": "Map (py_function)", "function": "featurize", "location": "t.py:3", "prefix_seconds_per_batch": 0.01,
             "cores": 1.0, "hot_lines": [{"location": "t.py:5", "code": "total = sum(...)", "share": 0.97}],
             "hot_samples": 119, "sampling_cpu_seconds": 0.23, "sampling_seconds": 1.2}
    row = own_costs([stage])[0]  # type: ignore[list-item]
    assert row["hot_lines"] == stage["hot_lines"] and row["sampling_cpu_seconds"] == 0.23
    buffer = io.StringIO()
    render_hot_lines(Console(file=buffer, width=200), row)
    text = buffer.getvalue()
    assert "hot lines of featurize (119 py-spy samples, sampling cost 0.23 s CPU)" in text
    assert "97%  t.py:5  total = sum(...)" in text
    buffer = io.StringIO()
    render_hot_lines(Console(file=buffer, width=200), {"function": "featurize", "hot_lines_why": "py-spy is not installed"})
    assert "hot lines of featurize: not sampled: py-spy is not installed" in buffer.getvalue()
