"""`tensorgauge fix --verify` against a bare A/B of the same change made by hand, on programs kept outside
the repository (public training programs with synthetic data).

    .venv/bin/python benchmarks/fix_ab.py CASE_DIR [CASE_DIR ...] [--repeat 3] [--json results.json]

A case folder holds ``train.py`` (the program) and ``fixed_by_hand.py`` (the same program with the finding's
fix made by hand), and may hold ``case.json``: ``{"only": ["cache", ...], "env": {"TF_USE_LEGACY_KERAS": "1"},
"python": "/path/to/python"}`` (the fixes to verify, the environment both sides run in, the interpreter).
For each case:

1. the program is recorded: ``tensorgauge run --name fixab-CASE -- python train.py``;
2. ``tensorgauge fix fixab-CASE --verify --repeat N`` reruns it under the tool as it is and with each fix
   (and the paying ones together), seeded alike: the verified gain is the patch's (the fixes together, or
   the one fix);
3. the bare A/B: N interleaved pairs of ``train.py`` and ``fixed_by_hand.py`` without the tool, seeded as
   ``--verify`` seeds, each fit timed by a wrapper of ``Model.fit`` around the program (a custom loop's
   training: the program's run less the median time of importing TensorFlow and Keras); its gain is the
   ratio of the medians.

Prints one row per case (the fixes proposed, the refusals, the verified and the bare gains and their
ratio, the losses) and, with ``--json``, writes them. Every run waits on the lock file
``$TENSORGAUGE_TRAIN_LOCK`` (default /tmp/tg-train.lock) shared with other training processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LOCK = os.environ.get("TENSORGAUGE_TRAIN_LOCK", "/tmp/tg-train.lock")
TIMER = """
import atexit, json, os, runpy, sys, time
fits, losses, start = [], [], time.perf_counter()
def wrap(model_class):
    original = model_class.fit
    def fit(self, *a, **k):
        t = time.perf_counter()
        try:
            history = original(self, *a, **k)
        finally:
            fits.append(time.perf_counter() - t)
        losses.append([float(v) for v in getattr(history, "history", {}).get("loss", [])])
        return history
    model_class.fit = fit
import importlib.abc, importlib.util
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in ("keras", "tf_keras"):
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            wrap(module.Model)
            getattr(getattr(module, "utils", None), "set_random_seed", lambda n: None)(0)
        spec.loader.exec_module = exec_module
        return spec
atexit.register(lambda: open(os.environ["FIX_AB_OUT"], "w").write(json.dumps(
    {"fit_seconds": sum(fits), "fits": len(fits), "script_seconds": time.perf_counter() - start, "losses": losses})))
sys.meta_path.insert(0, Watch())
import random, numpy
random.seed(0); numpy.random.seed(0)
script = sys.argv[1]; sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
"""


def locked(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["flock", LOCK, *command], **kwargs)


def bare(python: str, script: str, folder: Path, env: dict[str, str]) -> dict:
    """One bare run of ``script`` under the fit timer (TensorFlow and Keras seeded as --verify seeds them)."""
    with tempfile.TemporaryDirectory() as scratch:
        timer, out = Path(scratch) / "timer.py", Path(scratch) / "out.json"
        timer.write_text(TIMER)
        done = locked([python, str(timer), script], cwd=folder, env={**env, "FIX_AB_OUT": str(out)},
                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"{folder.name}/{script} failed (exit {done.returncode}): {done.stderr[-400:]}")
        return json.loads(out.read_text())


def import_seconds(python: str, env: dict[str, str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        done = locked([python, "-c", "import time; t = time.perf_counter(); import tensorflow, keras; "
                                     "print(time.perf_counter() - t)"], env=env, capture_output=True, text=True)
        times.append(float(done.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def training_seconds(run: dict, imports: float) -> float:
    return run["fit_seconds"] if run["fits"] else max(run["script_seconds"] - imports, 1e-9)


def case(folder: Path, repeat: int) -> dict:
    config = json.loads((folder / "case.json").read_text()) if (folder / "case.json").exists() else {}
    python = config.get("python", sys.executable)
    env = {**os.environ, **config.get("env", {}), "TENSORGAUGE_SEED": "0", "MPLBACKEND": "Agg"}
    tool = [sys.executable, "-m", "tensorgauge"]
    name = f"fixab-{folder.name}"
    recorded = locked([*tool, "run", "-q", "--name", name, "--", python, "train.py"], cwd=folder, env=env,
                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if recorded.returncode != 0:
        raise SystemExit(f"{folder.name}: the recorded run failed: {recorded.stderr[-400:]}")
    only = [a for fix in config.get("only", []) for a in ("--only", fix)]
    verify = locked([*tool, "fix", name, "--verify", "--repeat", str(repeat), *only, "--json", "-"], cwd=folder,
                    env=env, capture_output=True, text=True)
    if verify.returncode != 0:
        raise SystemExit(f"{folder.name}: fix --verify failed: {verify.stderr[-400:]}")
    doc = json.loads(verify.stdout)
    (folder / "fix.json").write_text(json.dumps(doc, indent=1))  # what fix --verify said, in full
    proposed = [f for f in doc["fixes"] if not f["refused"]]
    together = doc.get("patch_verified") or next((f["verified"] for f in proposed if f["verified"]
                                                  and f["verified"]["pays"]), None)
    before, after = [], []
    for _ in range(repeat):  # interleaved pairs
        before.append(bare(python, "train.py", folder, env))
        after.append(bare(python, "fixed_by_hand.py", folder, env))
    imports = import_seconds(python, env, repeat) if not before[0]["fits"] else 0.0
    bare_gain = statistics.median(training_seconds(r, imports) for r in before) / \
        statistics.median(training_seconds(r, imports) for r in after)
    verified_gain = together["gain"] if together else None
    return {"case": folder.name, "fixes": [_verdict(f) for f in proposed],
            "refused": [f"{f['fix']}: {f['why']}" for f in doc["fixes"] if f["refused"]],
            "verified_gain": verified_gain, "bare_gain": round(bare_gain, 3),
            "ratio": round(verified_gain / bare_gain, 3) if verified_gain else None,
            "finding_gone": together["finding_gone"] if together else None,
            "training_unchanged": together["training_unchanged"] if together else None,
            "bare_losses_equal": before[0]["losses"] == after[0]["losses"] if before[0]["fits"] else None}


def _verdict(fix: dict) -> str:
    checked = fix["verified"] or {}
    if checked.get("pays"):
        return f"{fix['fix']} (pays, {checked['gain']}x)"
    return f"{fix['fix']} (left out, {checked.get('gain')}x: {checked.get('why')})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for folder in args.cases:
        row = case(folder.resolve(), args.repeat)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
