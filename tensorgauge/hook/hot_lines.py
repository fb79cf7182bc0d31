"""The hottest lines of a Python stage's function, sampled from outside the job with py-spy.

Where the costliest stage of a fit's input runs Python (a ``py_function``, ``numpy_function``, a
generator, a ``PyDataset.__getitem__``), its prefix is pulled once more for a short window while
``py-spy record --nonblocking --format raw`` samples this process from a child process (py-spy, the
``[profile]`` extra, is found on PATH or beside the job's Python; it is not imported). Each sample's
stack is attributed to the deepest frame inside the function's file and line range (its code object's
first to last line): the line of the function that was running, or that called what was. The top
:data:`TOP_LINES` lines go out with their share of the samples inside the function and the line's text,
with py-spy's own CPU seconds (``os.wait4`` on it: all its life, exiting included). py-spy missing, or
unable to attach (no ptrace permission in a container), gives one line why, never an error.
"""

from __future__ import annotations

import linecache
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tensorgauge.hook.protocol import one_line

TOP_LINES = 3
SAMPLE_RATE_HZ = 200
HOT_SECONDS = 1.0  # the sampled window with --diagnose (unbounded)
MIN_HOT_SECONDS = 0.3  # a shorter window than this is not sampled: too few samples to rank lines
STOP_SECONDS = 5.0  # py-spy's time to write its output after SIGINT, before it is killed
INSTALL = "pip install tensorgauge[profile]"
_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>.+):(?P<line>\d+)\)$")

Stack = list[tuple[str, int]]  # (file, line) frames, outermost first


def parse_raw(text: str) -> list[tuple[Stack, int]]:
    """py-spy's raw (collapsed) output, ``frame;frame;... count`` a line with each frame
    ``name (file:line)``, as (frames, samples) pairs; lines that are not one are skipped."""
    out: list[tuple[Stack, int]] = []
    for row in text.splitlines():
        head, _, count = row.strip().rpartition(" ")
        if not head or not count.isdigit():
            continue
        frames = [m for m in (_FRAME.match(f) for f in head.split(";")) if m]
        out.append(([(m["file"], int(m["line"])) for m in frames], int(count)))
    return out


def code_span(function) -> tuple[str, int, int] | None:
    """(file, first line, last line) of ``function``'s code (a bound method's, a partial's, a
    callable object's ``__call__``); None where it has no Python code."""
    import inspect

    try:
        function = inspect.unwrap(getattr(function, "__func__", function))
        function = getattr(function, "func", function)
        code = getattr(function, "__code__", None) or getattr(type(function).__call__, "__code__", None)
        if code is None:
            return None
        lines = [line for _, _, line in code.co_lines() if line is not None]
        return code.co_filename, code.co_firstlineno, max([code.co_firstlineno, *lines])
    except Exception:
        return None


def attribute(stacks: list[tuple[Stack, int]], span: tuple[str, int, int]) -> tuple[Counter, int]:
    """(samples per (file, line), samples inside the function): each stack counted at its deepest frame
    in ``span``'s file and line range; stacks that never enter it are left out. A function AutoGraph
    generated (a map's lambda converted with it) is no line of the user's: its samples go to the
    deepest frame below it in a file of the user's (the function the lambda calls), where there is one."""
    path = os.path.realpath(span[0])
    generated = _generated(span[0])
    lines: Counter = Counter()
    for frames, count in stacks:
        inside = [i for i, (file, line) in enumerate(frames)
                  if span[1] <= line <= span[2] and _same_file(file, span[0], path)]
        if not inside:
            continue
        deepest = inside[-1]
        if generated:
            deepest = max((i for i in range(deepest, len(frames)) if _users(frames[i][0])), default=deepest)
        lines[frames[deepest]] += count
    return lines, sum(lines.values())


def _generated(file: str) -> bool:
    return os.path.basename(file).startswith("__autograph_generated_file")


def _users(file: str) -> bool:
    """A file of the job's own code: not generated, not a library's or the standard library's."""
    if _generated(file) or "site-packages" in file or "dist-packages" in file:
        return False
    return not file.startswith(_STDLIB)


_STDLIB = tuple({os.path.dirname(os.__file__)})


def _same_file(file: str, name: str, real: str) -> bool:
    return file == name or os.path.realpath(file) == real


def top_lines(lines: Counter, samples: int, top: int = TOP_LINES) -> list[dict]:
    """The ``top`` (file, line)s with the most samples: ``{"location": "file.py:line", "code", "share"}``."""
    shown = [(where, count) for where, count in lines.most_common() if not _generated(where[0])][:top]  # no line of
    # the user's: AutoGraph's rewrite of a lambda (its samples count in the share of those shown all the same)
    return [{"location": f"{os.path.basename(file)}:{line}", "code": linecache.getline(file, line).strip(),
             "share": round(count / samples, 4)} for (file, line), count in shown]


def py_spy() -> str | None:
    """The py-spy executable: on PATH, or beside the job's Python (a virtual environment's bin)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def sample(function, make_pull: Callable[[], Callable[[], object]], left_seconds: float | None,
           executable: str | None = None) -> dict:
    """Call the ``make_pull()`` callable for :data:`HOT_SECONDS` (at most ``left_seconds``, what the
    allowance leaves; None: unbounded) while py-spy samples this process; ``{"hot_lines", "hot_samples",
    "sampling_cpu_seconds", "sampling_seconds"}``, or ``{"hot_lines_why": str}`` (with the sampler's
    cost where it ran)."""
    span = code_span(function)
    if span is None:
        return {"hot_lines_why": "its function has no Python code to sample"}
    executable = executable or py_spy()
    if executable is None:
        return {"hot_lines_why": f"py-spy is not installed: {INSTALL} names its hottest lines"}
    seconds = HOT_SECONDS if left_seconds is None else min(HOT_SECONDS, left_seconds)
    if seconds < MIN_HOT_SECONDS:
        return {"hot_lines_why": f"the allowance left {max(seconds, 0.0):.2f} s, under the {MIN_HOT_SECONDS} s "
                                 "a sample of its lines takes (tensorgauge run --diagnose samples them)"}
    with tempfile.TemporaryDirectory(prefix="tg-py-spy-") as folder:
        output = Path(folder) / "raw.txt"
        began = time.perf_counter()
        try:
            spy = subprocess.Popen([executable, "record", "--pid", str(os.getpid()), "--rate", str(SAMPLE_RATE_HZ),
                                    "--format", "raw", "--output", str(output), "--nonblocking", "--full-filenames"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as exc:
            return {"hot_lines_why": f"py-spy could not start: {one_line(str(exc))}"}
        ended = None
        try:
            ended = _pull_for(make_pull(), seconds, spy)
        finally:
            status, cpu = ended or _stop(spy)
        text = output.read_text(errors="replace") if output.is_file() else ""
    stderr = spy.stderr.read().decode(errors="replace") if spy.stderr else ""
    cost = {"sampling_cpu_seconds": round(cpu, 4), "sampling_seconds": round(time.perf_counter() - began, 4)}
    stacks = parse_raw(text)
    if not stacks:
        return {"hot_lines_why": _failure(status, stderr), **cost}
    lines, inside = attribute(stacks, span)
    if not inside:
        return {"hot_lines_why": f"py-spy took {sum(c for _, c in stacks)} samples, none inside the function", **cost}
    return {"hot_lines": top_lines(lines, inside), "hot_samples": inside, **cost}


def _pull_for(pull: Callable[[], object], seconds: float, spy: subprocess.Popen) -> tuple[int, float] | None:
    """``pull()`` until ``seconds`` pass or it runs out (StopIteration); py-spy's (status, CPU seconds)
    where it exited meanwhile (it could not attach), else None."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        ended = _reap(spy, os.WNOHANG)
        if ended is not None:
            return ended
        try:
            pull()
        except StopIteration:
            break
    return None


def _reap(spy: subprocess.Popen, options: int) -> tuple[int, float] | None:
    """py-spy's (exit status, CPU seconds over its life) once it has exited (``os.wait4``); None before."""
    pid, status, usage = os.wait4(spy.pid, options)
    if not pid:
        return None
    spy.returncode = os.waitstatus_to_exitcode(status)
    return spy.returncode, usage.ru_utime + usage.ru_stime


def _stop(spy: subprocess.Popen) -> tuple[int, float]:
    """Stop py-spy (SIGINT: it writes its output) and reap it; killed after :data:`STOP_SECONDS`."""
    spy.send_signal(signal.SIGINT)
    deadline = time.perf_counter() + STOP_SECONDS
    while (ended := _reap(spy, os.WNOHANG)) is None:
        if time.perf_counter() > deadline:
            spy.kill()
            return _reap(spy, 0) or (-9, 0.0)
        time.sleep(0.01)
    return ended


def _failure(status: int, stderr: str) -> str:
    """Why py-spy gave no sample, in one line."""
    said = [line.removeprefix("Error:").strip() for line in stderr.splitlines()
            if line.strip() and not line.startswith("py-spy>")]
    why = one_line(said[-1]) if said else f"it exited with status {status}"
    hint = " (it needs ptrace permission: root, CAP_SYS_PTRACE, or kernel.yama.ptrace_scope=0)" \
        if "ermission" in why or "not permitted" in why else ""
    return f"py-spy took no sample: {why}{hint}"
