"""The input window's cost bound (on fakes) and what show says about the input split."""

import os
import subprocess
import sys

from tensorgauge.analyse.input_split import describe, input_split
from tensorgauge.hook.input_window import allowance, probe_plan, window_plan
from tensorgauge.model import Event, Phase
from tensorgauge.monitoring.tryfixes import applicable


def test_the_window_is_sized_to_one_percent_of_the_fit_or_skipped_with_the_reason():
    assert allowance(600.0) == 6.0 and allowance(10.0) == 0.5  # 1%, or half a second for short fits
    assert window_plan(0.02, 60.0) == (10, None)  # fast steps: the full window
    assert window_plan(0.131, 60.0) == (10, None)  # the image tutorial's 131 ms steps over a minute
    steps, why = window_plan(0.5, 60.0)  # slower steps: a shorter window
    assert 3 <= steps < 10 and why is None
    assert 0.15 + 0.1 * steps * 0.5 <= allowance(60.0)
    steps, why = window_plan(2.0, 60.0)  # 2 s steps: even 3 profiled steps cost too much
    assert steps == 0 and "more than the 0.60 s allowed" in why and "--diagnose" in why
    assert window_plan(0.02, None)[0] == 0  # the fit's length unknown


def test_the_compute_probe_gets_what_the_window_left():
    assert probe_plan(0.003, 0.4) == (32, None)
    steps, _ = probe_plan(0.05, 0.4)
    assert steps == 8
    assert probe_plan(0.086, 0.4)[0] == 0  # 4 steps and the warm-up one do not fit
    steps, why = probe_plan(0.131, 0.3)
    assert steps == 0 and "compute-only steps" in why


def events_with(*data):
    return [Event(t=5.0, pid=1, kind=kind, data=payload) for kind, payload in data]


def test_the_split_says_what_was_measured_or_why_not():
    fit = Phase("fit", "fit", 1.0, 60.0, steps=400)
    window = {"step_seconds": [0.1] * 10, "get_next_seconds": [0.03] * 10, "start_seconds": 0.01,
              "stop_seconds": 0.1, "allowance_seconds": 0.6, "input_work_seconds": 0.3}
    probe = {"step_seconds": [0.06] * 8, "total_seconds": 0.5, "source": "a real batch"}
    split = input_split(events_with(("input_probe", window), ("compute_probe", probe)), [fit])
    assert split["input_share"] == 0.3 and split["compute_only_step_seconds"] == 0.06
    assert split["cost_seconds"] == 0.61
    assert describe(split) == ("waits 30% of each step (30.0 ms of 100.0 ms, 10 steps, by profiler window); "
                               "compute-only 60.0 ms a step; cost 0.61 s")
    skipped = input_split(events_with(("input_probe", {"skipped": "a profiler window would cost about 0.9 s"})), [fit])
    assert describe(skipped) == "not measured: a profiler window would cost about 0.9 s"
    assert "--no-diagnose" in describe(input_split([], [fit]))
    assert "fewer than the 11" in describe(input_split([], [Phase("fit", "fit", 1.0, 2.0, steps=5)]))
    assert input_split([], [Phase("predict", "predict", 1.0, 2.0)]) is None  # no training: nothing to split


def test_the_profilers_log_lines_are_kept_off_the_jobs_stderr_and_the_rest_passed_on():
    code = ("import os\nfrom tensorgauge.hook.input_window import quiet_profiler_logs\n"
            "with quiet_profiler_logs():\n"
            "    os.write(2, b'I0000 profiler_session.cc:117] Profiler session initializing.\\n')\n"
            "    os.write(2, b'the job said this\\n')\n"
            "os.write(2, b'after\\n')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, env={**os.environ})
    assert result.stderr == b"the job said this\nafter\n"


def test_xla_fit_gets_the_no_jit_trial():
    fixes, _ = applicable({"jit_compile": "True"}, {}, 2.0)
    assert "no_jit" in fixes
    assert "no_jit" not in applicable({"jit_compile": "False"}, {}, 2.0)[0]
