"""Whether the verdicts hold on real programs: each program run N times under ``tensorgauge run``
(default options) and a markdown table of what each run found, with how many runs agreed.

    .venv/bin/python benchmarks/verdict_table.py [--runs N] [--lock FILE] DIR [DIR ...]

Each DIR is one program: ``cmd.txt`` holds its command line (run in DIR; a bare ``python`` is the
interpreter running this script), ``env.txt`` optional ``KEY=VALUE`` lines added to its
environment, ``truth.txt`` an optional one-line truth (the bare A/B) shown in the table. Runs are
recorded in DIR/s.db. With ``--lock FILE`` each run holds that file (flock) while it trains, so
runs on a shared machine do not overlap. The programs take turns, run 1 of each, then run 2 ...
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Program:
    folder: Path
    argv: list[str]
    env: dict[str, str]

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def truth(self) -> str:
        """Read when the table is made, so it may be written while the runs go on."""
        truth_file = self.folder / "truth.txt"
        return truth_file.read_text().strip() if truth_file.exists() else ""


@dataclass
class RunVerdict:
    run_id: str
    input_class: str  # "found (SEVERITY)" | "within noise" | "no cost" | "not measured" | "failed"
    share: float | None
    interval: tuple[float, float] | None
    findings: list[str] = field(default_factory=list)
    ab_failed: bool = False
    epoch_start_share: float | None = None

    def cell(self) -> str:
        share = "" if self.share is None else f" {self.share:.0%}"
        if self.interval is not None:
            share += f" [{self.interval[0]:.0%}, {self.interval[1]:.0%}]"
        if self.epoch_start_share is not None:
            share += f", at epoch starts {self.epoch_start_share:.0%}"
        others = [f for f in self.findings if f != "input_bound"]
        text = f"{self.input_class}{share}" + (f"; {', '.join(others)}" if others else "")
        return text + ("; **A/B failed**" if self.ab_failed else "")


def load_program(folder: Path) -> Program:
    argv = shlex.split((folder / "cmd.txt").read_text())
    env_file = folder / "env.txt"
    env = dict(line.split("=", 1) for line in env_file.read_text().split() if "=" in line) if env_file.exists() else {}
    return Program(folder, argv, env)


def classify(doc: dict) -> RunVerdict:
    """One run's input verdict and findings from its tensorgauge.run/1 document."""
    ids = [f["id"] for f in doc.get("findings") or []]
    split = doc.get("input_split") or {}
    text = json.dumps(doc).lower()
    ab_failed = "a/b failed" in text
    verdict = str(split.get("verdict") or "")
    found = [f for f in doc.get("findings") or [] if f["id"] == "input_bound"]
    if found:
        input_class = f"found ({found[0]['severity']})"
    elif not split.get("measured"):
        input_class = "failed" if ab_failed else "not measured"
    elif verdict.startswith("within noise"):
        input_class = "within noise"
    else:
        input_class = "no cost"
    share = split.get("input_share")
    low, high = split.get("input_share_low"), split.get("input_share_high")
    interval = (low, high) if low is not None and high is not None else None
    epoch_start = (split.get("epoch_start_input") or {}).get("share")
    return RunVerdict(doc.get("run_id", "?"), input_class, share, interval, ids, ab_failed, epoch_start)


@contextmanager
def held(lock: Path | None):
    if lock is None:
        yield
        return
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_once(program: Program, lock: Path | None) -> RunVerdict:
    """The program once under ``tensorgauge run`` with default options; its verdict."""
    env = {**os.environ, **program.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "run.json"
        command = [sys.executable, "-m", "tensorgauge", "run", "-q", "--store", str(program.folder / "s.db"),
                   "--json", str(out), "--", *program.argv]
        with held(lock):
            done = subprocess.run(command, cwd=program.folder, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        if not out.exists():
            raise SystemExit(f"{program.name}: no run document (exit {done.returncode}): {done.stderr[-400:]}")
        return classify(json.loads(out.read_text()))


def recorded(program: Program, run_id: str) -> RunVerdict:
    """A run already in DIR/s.db, classified again (to table a series that was cut short)."""
    done = subprocess.run([sys.executable, "-m", "tensorgauge", "show", "--store", str(program.folder / "s.db"),
                           "--json", "-", run_id], capture_output=True, text=True, check=True)
    return classify(json.loads(done.stdout))


def agreement(verdicts: list[RunVerdict]) -> str:
    """How many runs gave the commonest input verdict, and each other finding's count. "Within noise" and
    "no cost" are the same finding (none), so runs that found none count together, each kind named; runs
    that found it count together too, each severity named."""
    n = len(verdicts)
    input_class, count = Counter(v.input_class for v in verdicts).most_common(1)[0]
    quiet = Counter(v.input_class for v in verdicts if v.input_class in ("within noise", "no cost"))
    found = Counter(v.input_class.removeprefix("found (").rstrip(")") for v in verdicts
                    if v.input_class.startswith("found"))
    if input_class in quiet and len(quiet) > 1:
        input_class = "not found (" + ", ".join(f"{kind} {c}" for kind, c in quiet.most_common()) + ")"
        count = sum(quiet.values())
    elif input_class.startswith("found") and len(found) > 1:
        input_class = "found (" + ", ".join(f"{severity} {c}" for severity, c in found.most_common()) + ")"
        count = sum(found.values())
    others = Counter(f for v in verdicts for f in set(v.findings) if f != "input_bound")
    parts = [f"input {input_class} {count}/{n}"] + [f"{f} {c}/{n}" for f, c in sorted(others.items())]
    failed = sum(v.ab_failed for v in verdicts)
    return "; ".join(parts + ([f"A/B failed {failed}/{n}"] if failed else []))


def table(rows: list[tuple[Program, list[RunVerdict]]]) -> str:
    runs = max(len(v) for _, v in rows)
    head = ["program", "truth (bare A/B)"] + [f"run {i + 1}" for i in range(runs)] + ["same in"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for program, verdicts in rows:
        cells = [program.name, program.truth] + [v.cell() for v in verdicts] + [agreement(verdicts)]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="program folders (cmd.txt, env.txt, truth.txt)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lock", type=Path, help="flock this file around each run")
    parser.add_argument("--ids", type=Path, help="also append each run's id and verdict to this file")
    parser.add_argument("--table-only", action="store_true",
                        help="run nothing: table the runs that --ids lists, as they are recorded")
    args = parser.parse_args(argv)
    programs = [load_program(f.resolve()) for f in args.folders]
    verdicts: dict[str, list[RunVerdict]] = {p.name: [] for p in programs}
    if args.table_only:
        by_name = {p.name: p for p in programs}
        for line in args.ids.read_text().splitlines():  # "NAME run I: RUN_ID ..."
            name, _, rest = line.partition(" run ")
            if name in by_name:
                verdicts[name].append(recorded(by_name[name], rest.split(": ", 1)[1].split()[0]))
        print(table([(p, verdicts[p.name]) for p in programs if verdicts[p.name]]))
        return 0
    for i in range(args.runs):  # round by round, so a slow minute on the machine falls on all programs
        for program in programs:
            verdict = run_once(program, args.lock)
            verdicts[program.name].append(verdict)
            line = f"{program.name} run {i + 1}: {verdict.run_id} {verdict.cell()}"
            print(line, file=sys.stderr, flush=True)
            if args.ids:
                with open(args.ids, "a") as log:
                    log.write(line + "\n")
    rows = [(p, verdicts[p.name]) for p in programs]
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
