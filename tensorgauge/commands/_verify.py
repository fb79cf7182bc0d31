"""The reruns of ``tensorgauge fix --verify``: the run's own command in its own working directory, under
the tool, seeded alike, once as it is and once per fix with that fix alone, interleaved pair by pair.

A fix is tried on a copy of the patched file beside the original (``.train.tensorgauge-fix.py``, removed
after), given to the command in the script's place; a patch of a module the script imports is rerun with
the module's patched text read in its place by the hook (``$TENSORGAUGE_SOURCE_OVERRIDES``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tensorgauge.edit.outcome import Rerun, training
from tensorgauge.edit.patch import Proposal, _alone
from tensorgauge.edit.sites import read_sites
from tensorgauge.errors import TensorgaugeError
from tensorgauge.hook.protocol import SEED_ENV, SOURCE_OVERRIDES_ENV, STEP_LIMIT_ENV
from tensorgauge.model import RunRecord

SEED = 0


def main_script(record: RunRecord) -> tuple[int, str] | None:
    """(the index in the command of the Python script it runs, its absolute path)."""
    cwd = record.cwd or os.getcwd()
    for i, arg in enumerate(record.command[1:], start=1):
        if arg.endswith(".py"):
            return i, os.path.abspath(os.path.join(cwd, arg))
        if arg in ("-m", "-c"):
            return None
    return None


class Reruns:
    """Reruns of one recorded program into ``store``, each loaded back as a :class:`Rerun`."""

    def __init__(self, record: RunRecord, store: str | None, steps: int | None, progress: Callable[[str], None]):
        self.record, self.store, self.steps, self.progress = record, store, steps, progress
        self.script = main_script(record)
        self.count = 0

    def command(self, patched: dict[str, str], copies: list[Path]) -> tuple[list[str], dict[str, str]]:
        """The run's command with the patched script's copy in its place, and the other patched files'
        overrides."""
        command = list(self.record.command)
        overrides = {}
        for path, text in patched.items():
            if self.script is not None and path == self.script[1]:
                original = Path(path)
                copy = original.with_name(f".{original.stem}.tensorgauge-fix-{os.getpid()}.py")
                copy.write_text(text)
                copies.append(copy)
                command[self.script[0]] = str(copy)
            else:
                handle, name = tempfile.mkstemp(suffix=".py", prefix="tensorgauge-fix-")
                with os.fdopen(handle, "w") as f:
                    f.write(text)
                copies.append(Path(name))
                overrides[path] = name
        return command, overrides

    def run(self, label: str, patched: dict[str, str]) -> Rerun:
        from tensorgauge.analyse.run_report import RunReport
        from tensorgauge.commands._shared import open_store

        self.count += 1
        name = f"fix-{self.record.run_id}-{label}-{self.count}-{int(time.time())}"
        copies: list[Path] = []
        try:
            command, overrides = self.command(patched, copies)
            env = dict(os.environ)
            env[SEED_ENV] = str(SEED)
            if self.steps:
                env[STEP_LIMIT_ENV] = str(self.steps)
            if overrides:
                env[SOURCE_OVERRIDES_ENV] = json.dumps(overrides)
            tool = [sys.executable, "-m", "tensorgauge", "run", "--quiet", "--name", name,
                    *(["--store", self.store] if self.store else []), "--", *command]
            self.progress(f"rerun {self.count}: {label}")
            with tempfile.TemporaryFile() as log:
                done = subprocess.run(tool, cwd=self.record.cwd or None, env=env, stdin=subprocess.DEVNULL,
                                      stdout=log, stderr=log)
                if done.returncode != 0:
                    log.seek(0)
                    tail = log.read().decode(errors="replace").strip().splitlines()[-1:]
                    self.progress(f"rerun {self.count} ({label}) exited {done.returncode}: {' '.join(tail)}")
        finally:
            for copy in copies:
                copy.unlink(missing_ok=True)
        with open_store(self.store, create=False) as store:
            try:
                report = RunReport.load(store, name)
            except TensorgaugeError as exc:
                raise TensorgaugeError(f"the rerun '{label}' recorded no run ({exc})") from None
        seconds, step = training(report.phases)
        return Rerun(report.record.run_id, seconds, step, report.findings, read_sites(report.events).losses,
                     report.record.exit_code, report.summary.rss_peak_bytes)


def rerun_pairs(reruns: Reruns, proposals: list[Proposal], originals: dict[str, str], repeat: int
                ) -> tuple[list[Rerun], dict[int, list[Rerun]]]:
    """``repeat`` rounds, each the program as it is and then with each fix alone."""
    before: list[Rerun] = []
    after: dict[int, list[Rerun]] = {i: [] for i in range(len(proposals))}
    for _ in range(repeat):
        before.append(reruns.run("as-is", {}))
        for i, proposal in enumerate(proposals):
            path = proposal.edit.site.path
            after[i].append(reruns.run(proposal.edit.fix, {path: _alone(originals[path], proposal.edit)}))
    return before, after
