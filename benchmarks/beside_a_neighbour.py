"""Whether the input verdict holds beside a neighbour that comes and goes: the healthy demo (its bare A/B
0-3.5%) run N times beside another process's work, each run's verdict counted; then A/Bs drawn at random
from every round the runs recorded, each through the verdict's rules, and how often they establish a cost:
A/Bs of 3, 4 and 5 rounds, and A/Bs that draw a round more while the rounds so far are in doubt, as the A/B
runs them.

    .venv/bin/python benchmarks/beside_a_neighbour.py [--runs 40] [--neighbour suite|hog|none]
        [--store FILE] [--draws 20000] [--lock FILE]

``suite``: the test suite's other tests in one process, over and over (what the other pytest process does
in ``make test``); ``hog``: ``python -c "while True: pass"``. ``--runs 0`` draws from a store already made.
The draws are a guide, not a rate: a neighbour's state in one round is not independent of the next's.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from contextlib import contextmanager, nullcontext
from pathlib import Path

from tensorgauge.analyse.input_split import ab_verdict
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.hook.input_ab import ROUNDS
from tensorgauge.hook.protocol import AB_MIN_ROUNDS, round_share, round_share_error, rounds_in_doubt
from tensorgauge.store import Store

ROOT = Path(__file__).resolve().parent.parent
NEIGHBOURS = {
    "suite": ["bash", "-c", f"cd {ROOT} && while true; do {sys.executable} -m pytest -q -p no:cacheprovider "
              "-m 'not alone' tests/ >/dev/null 2>&1; done"],
    "hog": [sys.executable, "-c", "while True: pass"],
}


@contextmanager
def neighbour(kind: str):
    """The neighbour's processes, in a session of their own, killed whole at the end."""
    if kind == "none":
        yield
        return
    process = subprocess.Popen(NEIGHBOURS[kind], start_new_session=True)
    try:
        yield
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextmanager
def held(lock: str | None):
    """``lock`` (a file path) held with flock meanwhile, so runs on a shared machine do not overlap; None: none."""
    with open(lock, "w") if lock else nullcontext() as handle:
        if handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def run_demo(store: str) -> dict:
    subprocess.run([sys.executable, "-m", "tensorgauge", "demo", "--store", store, "--scenario", "healthy"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return RunReport.load(Store.open(store), "last").input_split or {}


def recorded_rounds(store: str) -> list[tuple]:
    """(real steps, compute-only steps, other cores, the machine's CPUs) of every round of every input A/B in
    ``store``."""
    opened = Store.open(store)
    ids = [record.run_id for record in opened.runs()]
    rounds = []
    for events in opened.events_of_kind(ids, "input_ab").values():
        for event in events:
            data = event.data
            loads = list(data.get("other_cores") or [])
            for i, (real, compute) in enumerate(zip(data["real_step_seconds"], data["compute_step_seconds"])):
                if real and compute:
                    rounds.append((real, compute, loads[i] if i < len(loads) else None, data.get("machine_cpus")))
    return rounds


def draw(rounds: list[tuple], size: int, draws: int, seed: int = 1, in_doubt_to: int | None = None) -> int:
    """How many of ``draws`` A/Bs of ``size`` rounds drawn at random establish a cost; with ``in_doubt_to``, a
    round more drawn, up to that many, while they are in doubt (:func:`rounds_in_doubt`), as the A/B runs them."""
    pick = random.Random(seed)
    found = 0
    for _ in range(draws):
        chosen = pick.sample(rounds, max(size, in_doubt_to or size))
        size_now = size
        doubt_rounds = 0  # each round drawn in doubt is one more look, as the A/B counts them
        while in_doubt_to and size_now < in_doubt_to and rounds_in_doubt(
                [round_share(r[0], r[1]) for r in chosen[:size_now]],
                [round_share_error(r[0], r[1]) for r in chosen[:size_now]], looks=1 + doubt_rounds):
            size_now += 1
            doubt_rounds += 1
        chosen = chosen[:size_now]
        found += ab_verdict({"real_step_seconds": [r[0] for r in chosen],
                             "compute_step_seconds": [r[1] for r in chosen], "doubt_rounds": doubt_rounds,
                             "other_cores": [r[2] for r in chosen], "machine_cpus": chosen[0][3]})["established"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--neighbour", choices=[*NEIGHBOURS, "none"], default="suite")
    parser.add_argument("--store", default="beside.db")
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--lock", help="a file held (flock) while the runs train")
    args = parser.parse_args()
    verdicts: Counter = Counter()
    with held(args.lock), neighbour(args.neighbour if args.runs else "none"):
        for run in range(args.runs):
            split = run_demo(args.store)
            verdict = split.get("verdict") or "not measured"
            verdicts["input costs the steps" if split.get("established") else verdict.split(":")[0]] += 1
            print(f"run {run + 1}: {verdict} (share {split.get('input_share')}, "
                  f"{split.get('disturbed_rounds', 0)} rounds left out, "
                  f"other cores {split.get('other_cores_mean')})", flush=True)
    if verdicts:
        print(", ".join(f"{count} {verdict}" for verdict, count in verdicts.most_common()))
    rounds = recorded_rounds(args.store)
    for size in (3, 4, 5):
        if len(rounds) >= size:
            found = draw(rounds, size, args.draws)
            print(f"{args.draws} A/Bs of {size} rounds drawn from {len(rounds)}: a cost established in {found} "
                  f"({found / args.draws:.2%})")
    if len(rounds) >= ROUNDS:
        found = draw(rounds, AB_MIN_ROUNDS, args.draws, in_doubt_to=ROUNDS)
        print(f"{args.draws} A/Bs drawn as the A/B runs them ({AB_MIN_ROUNDS} rounds, up to {ROUNDS} while in doubt): "
              f"a cost established in {found} ({found / args.draws:.2%})")


if __name__ == "__main__":
    main()
