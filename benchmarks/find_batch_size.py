"""--find-batch-size's acceptance on three jobs (benchmarks/batch_jobs: dense, conv, LSTM).

For each job: the finder under --max-memory 10% (its recommendation and the trials' time); the
job's full fit at the recommended batch under the same budget, RUNS times (none may be stopped);
once at the next power of two above it (the budget should stop it); and one epoch at the job's
own batch, bare, for the finder's cost (<= 15% of that epoch, or <= 60 s).

    .venv/bin/python benchmarks/find_batch_size.py [RUNS] [JOB...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOBS = Path(__file__).parent / "batch_jobs"
TG = [sys.executable, "-m", "tensorgauge"]


def tg_run(args: list[str], job: str, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run.json"
        result = subprocess.run([*TG, "run", "-q", "--json", str(out), *args, "--", sys.executable,
                                 str(JOBS / f"{job}.py")], env={**os.environ, **env}, capture_output=True, text=True)
        doc = json.loads(out.read_text()) if out.exists() else {}
        return {"exit": result.returncode, "doc": doc}


def main(runs: int, jobs: list[str]) -> None:
    for job in jobs:
        found = tg_run(["--find-batch-size", "--max-memory", "10%"], job, {})
        search = found["doc"].get("batch_size_search") or {}
        batch = search.get("recommended_batch_size")
        print(f"{job}: recommended {batch} (job's {search.get('original_batch_size')}), trials "
              f"{len(search.get('trials') or [])} in {search.get('seconds', 0):.1f} s; "
              f"line {search.get('fixed_bytes', 0) / 2**20:.0f} MiB + {search.get('per_example_bytes', 0) / 2**20:.2f} "
              "MiB per example", flush=True)
        if not batch:
            continue
        peaks, stopped = [], 0
        for _ in range(runs):
            r = tg_run(["--max-memory", "10%"], job, {"BATCH": str(batch)})
            b = r["doc"].get("budget") or {}
            stopped += bool(b.get("stopped")) or r["exit"] != 0
            peaks.append(b.get("peak_bytes", 0) / (b.get("max_memory_bytes") or 1))
        print(f"{job}: full fit at {batch}: {runs - stopped} of {runs} ran to the end under the budget; peak "
              f"{min(peaks):.0%}-{max(peaks):.0%} of it", flush=True)
        above = 1 << batch.bit_length()
        r = tg_run(["--max-memory", "10%"], job, {"BATCH": str(above)})
        b = r["doc"].get("budget") or {}
        print(f"{job}: at {above} (the next power of two): exit {r['exit']}, stopped by the budget: "
              f"{b.get('stopped')}, peak {b.get('peak_bytes', 0) / (b.get('max_memory_bytes') or 1):.0%}", flush=True)
        start = time.monotonic()
        bare = subprocess.run([sys.executable, str(JOBS / f"{job}.py")], env={**os.environ, "EPOCHS": "1"},
                              capture_output=True)
        epoch = time.monotonic() - start
        print(f"{job}: one epoch at the job's batch, bare (with import): {epoch:.1f} s (exit {bare.returncode}); "
              f"the finder's trials {search.get('seconds', 0):.1f} s = {search.get('seconds', 0) / epoch:.0%} "
              f"of it (bound: 15% or 60 s)", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5, sys.argv[2:] or ["dense", "conv", "lstm"])
