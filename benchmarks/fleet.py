"""A fleet of N simulated workers recording into one real PostgreSQL store, through the real writer code.

    TENSORGAUGE_BENCH_POSTGRES=postgresql://... .venv/bin/python benchmarks/fleet.py N [--seconds 30] [--procs 32]

Each worker is a run as ``tensorgauge run --store postgresql://... --job JOB`` records it: a
:class:`~tensorgauge.monitoring.recording.Recording` (the Recorder, the StoreWriter thread, the
spooled store and its shipper thread) fed 10 samples a second, a ``steps`` event every half second
(stored as step digests) and epoch phases every 10 s, on the real clock. Workers are spread over
``--procs`` processes, eight to a simulated machine (a data folder), at a lower priority than the server
(each would have its own machine). At the end every worker drains its spool, saves its record, then (once
all have drained) analyses its run, as ``tensorgauge run`` does. Reports samples taken and stored (lost =
taken - stored), the shipping transactions' latency, each worker's end wait and why any stopped waiting,
the runs analysed at their end, connections made, the server's CPU seconds (its processes, from /proc),
the store's growth per worker-hour, and the wall time of ``compare --job`` and ``runs --job`` over the fleet.

``--dilated``: every one of a worker's half-second ticks is made, on time where the machine keeps up and as
soon as it can where it falls behind, with the samples' and events' times on a simulated clock; so every
sample a 10 Hz sampler would take is taken even where the machine has too few cores for N samplers in real
time. The wall time against the simulated time says how much slower than real time the fleet ran (the store
then received its samples at that fraction of the fleet's real rate).
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

SAMPLES_PER_SECOND = 10
WORKERS_PER_NODE = 8  # workers sharing a machine, and so a data folder (their spools)
# The simulated workers yield the cores to the server: on a fleet each worker's monitor has its own machine
# and the server its own, while here they all share this one's.
WORKER_NICENESS = 10


def _server_cpu_seconds(names: tuple[str, ...] = ("postgres", "postmaster")) -> float:
    """User+system CPU seconds of every process so named on this machine (default: the server's; a
    PgBouncer in front of it: ``("pgbouncer",)``)."""
    import psutil

    total = 0.0
    for p in psutil.process_iter(["name", "cpu_times"]):
        if p.info["name"] in names and p.info["cpu_times"]:
            total += p.info["cpu_times"].user + p.info["cpu_times"].system + p.info["cpu_times"].children_user \
                + p.info["cpu_times"].children_system
    return total


def _workers(url: str, job: str, first: int, count: int, seconds: float, out, barrier, dilated: bool = False) -> None:
    """``count`` workers in this process; puts (taken, connections, latencies, end waits, runs analysed, why
    workers stopped waiting, why analyses failed) on ``out``."""
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.errors import TensorgaugeError
    from tensorgauge.model import Sample
    from tensorgauge.monitoring.recording import Recording, new_record, new_run_id
    from tensorgauge.sources.clock import MonotonicClock
    from tensorgauge.store.shipping import open_for_recording

    os.nice(WORKER_NICENESS)
    clock = MonotonicClock()
    rng = random.Random(first)
    fleet = []
    for i in range(first, first + count):
        store = open_for_recording(url)
        store.data_dir = Path(os.environ["XDG_DATA_HOME"]) / f"node{i // WORKERS_PER_NODE}"  # its machine's
        t0 = clock.now()
        record = new_record(f"{new_run_id()}-{i}", ["python", "train.py"], t0, job_id=job,
                            env={"host": {"hostname": f"node{i // WORKERS_PER_NODE}", "cores_allowed": 8.0},
                                 "worker": {"worker": f"worker:{i}", "task_type": "worker", "task_index": i}})
        recording = Recording(store, record, clock)
        recording.recorder.add([], [{"t": t0, "pid": 7, "kind": "phase_begin", "id": 1, "name": "fit",
                                     "phase_kind": "fit", "cpu": 0.0, "rss": 1 << 30}])
        fleet.append([store, recording, t0, 0, 1, 0.0])  # store, recording, t0, samples, phase id, cpu
    slow = {rng.randrange(first, first + count) for _ in range(max(1, count // 100))}  # stragglers
    start = time.monotonic()
    simulated_from = clock.now()
    tick = 0
    while (tick < seconds * 2) if dilated else (time.monotonic() - start < seconds):
        tick += 1
        for k, worker in enumerate(fleet):
            store, recording, t0, n, phase, cpu = worker
            now = simulated_from + tick * 0.5 if dilated else clock.now()
            samples = []
            for j in range(SAMPLES_PER_SECOND // 2):
                cpu = round(cpu + 0.18, 2)
                samples.append(Sample(t=round(now - t0 - 0.5 + j / SAMPLES_PER_SECOND, 6), cpu_seconds=cpu,
                                      cores_busy=1.8, rss_bytes=(1 << 30) + rng.randrange(1 << 20), threads=40,
                                      processes=1, cpu_percent=[90.0, 91.0]))
            step = 0.02 if first + k in slow else 0.01
            raw = [{"t": now, "pid": 7, "kind": "steps", "phase": phase,
                    "seconds": [round(rng.lognormvariate(0, 0.1) * step, 7) for _ in range(20)]}]
            if tick % 20 == 0:  # an epoch every 10 s
                if phase > 1:
                    raw.append({"t": now, "pid": 7, "kind": "phase_end", "id": phase, "cpu": cpu, "rss": 1 << 30})
                phase += 1
                raw.append({"t": now, "pid": 7, "kind": "phase_begin", "id": phase, "name": f"epoch {phase - 1}",
                            "phase_kind": "epoch", "parent": 1, "cpu": cpu, "rss": 1 << 30})
            recording.recorder.add(samples, raw, force=True)
            worker[3:] = [n + len(samples), phase, cpu]
        time.sleep(max(0.0, start + tick * 0.5 - time.monotonic()))  # never ahead of real time
    print(f"[{first}] {count} workers sampled {tick / 2:g} s in {time.monotonic() - start:.1f} s; ending them", file=sys.stderr,
          flush=True)

    def end(worker: list) -> tuple[bool, float, str | None]:
        """One worker's end, as its own `tensorgauge run` ends it: the store wait, the record. (stored, seconds
        waited, why it stopped waiting)"""
        store, recording, t0, n, phase, cpu = worker
        now = simulated_from + tick * 0.5 if dilated else clock.now()
        raw = [{"t": now, "pid": 7, "kind": "phase_end", "id": phase, "cpu": cpu, "rss": 1 << 30}] if phase > 1 else []
        recording.recorder.add([], raw + [{"t": now, "pid": 7, "kind": "phase_end", "id": 1, "cpu": cpu,
                                           "rss": 1 << 30}], force=True)
        began = time.monotonic()
        recording.settle(120.0)
        record = recording.record
        record.wall_seconds, record.complete, record.exit_code, record.cpu_seconds_total = now - t0, True, 0, cpu
        stored = recording.finish(120.0)
        why = None if stored else (store.ship_error or "no transaction in time")
        if not stored:  # `tensorgauge run` then ends; the rest waits in the spool
            store.close()
        return stored, time.monotonic() - began, why

    def analyse(worker: list) -> str | None:
        """Then its analysis, once and stored, as `tensorgauge run` does (a warning there when it cannot):
        None, or why it could not."""
        store, recording = worker[:2]
        try:
            RunReport.load(store, recording.record.run_id)
            return None
        except TensorgaugeError as exc:
            return str(exc)
        finally:
            store.close()

    from concurrent.futures import ThreadPoolExecutor

    ending = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(fleet)) as pool:  # the workers end at once, as a job's do
        drained = list(pool.map(end, fleet))
        # Each analysis is CPU work on its worker's own machine: here, where every worker shares two cores, it
        # starts once every worker of the fleet has drained, so that it does not starve the others' shipping.
        barrier.wait()
        not_analysed = [why for why in pool.map(analyse, [w for w, (stored, _, _) in zip(fleet, drained) if stored])
                        if why]
    print(f"[{first}] ended in {time.monotonic() - ending:.1f} s", file=sys.stderr, flush=True)
    taken = sum(w[3] for w in fleet)
    connections = sum(w[0].backend.connections_made for w in fleet)
    latencies = [x for w in fleet for x in w[0].latencies]
    end_waits = [d[1] for d in drained]
    gave_up = [d[2] for d in drained if d[2]]
    out.put((taken, connections, latencies, end_waits, len(fleet) - len(gave_up) - len(not_analysed), gave_up,
             not_analysed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workers", type=int)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--procs", type=int, default=32)
    parser.add_argument("--dilated", action="store_true",
                        help="every tick made, late where the machine falls behind, on a simulated clock (see above)")
    args = parser.parse_args()
    url = os.environ.get("TENSORGAUGE_BENCH_POSTGRES")
    if not url:
        sys.exit("set TENSORGAUGE_BENCH_POSTGRES to a postgresql:// URL (scripts/postgres-for-tests start)")
    import tempfile

    import psycopg

    os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="tg-fleet-")  # the workers' spools, not the user's
    job = f"fleet-{args.workers}-{int(time.time())}"
    with psycopg.connect(url, autocommit=True) as admin:
        size_before = admin.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    cpu_before, bouncer_before, wall_before = _server_cpu_seconds(), _server_cpu_seconds(("pgbouncer",)), time.monotonic()
    out: multiprocessing.Queue = multiprocessing.Queue()
    per = -(-args.workers // args.procs)
    starts = [p * per for p in range(args.procs) if p * per < args.workers]
    barrier = multiprocessing.Barrier(len(starts))
    procs = [multiprocessing.Process(target=_workers, args=(url, job, first, min(per, args.workers - first),
                                                            args.seconds, out, barrier, args.dilated))
             for first in starts]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    wall = time.monotonic() - wall_before
    server_cpu = _server_cpu_seconds() - cpu_before
    bouncer_cpu = _server_cpu_seconds(("pgbouncer",)) - bouncer_before
    taken = sum(r[0] for r in results)
    latencies = sorted(x for r in results for x in r[2])
    with psycopg.connect(url, autocommit=True) as admin:
        size_after = admin.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        ids = [r[0] for r in admin.execute("SELECT run_id FROM runs WHERE record::jsonb->>'job_id' = %s",
                                           (job,)).fetchall()]
        stored = admin.execute("SELECT COALESCE(SUM(count), 0) FROM sample_chunks WHERE run_id = ANY(%s)",
                               (ids,)).fetchone()[0] + admin.execute(
            "SELECT COUNT(*) FROM samples WHERE run_id = ANY(%s)", (ids,)).fetchone()[0]
    worker_hours = args.workers * args.seconds / 3600
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    timings = {}
    for name, cmd in (("compare --job", ["compare", "--job", job]), ("runs --job", ["runs", "--job", job])):
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "tensorgauge", *cmd, "--store", url], env=env,
                              capture_output=True, text=True)
        timings[name] = (time.perf_counter() - began, done.returncode, len(done.stdout.splitlines()))
    print(f"workers {args.workers} x {args.seconds:g} s{' (simulated clock)' if args.dilated else ''} in "
          f"{len(procs)} processes; wall {wall:.1f} s")
    print(f"runs stored {len(ids)}; samples taken {taken}, stored {stored}, lost {taken - int(stored)}")
    if latencies:
        print(f"shipping transactions {len(latencies)}: p50 {statistics.median(latencies) * 1000:.1f} ms, "
              f"p99 {latencies[int(0.99 * (len(latencies) - 1))] * 1000:.1f} ms, "
              f"max {latencies[-1] * 1000:.1f} ms")
    waits = sorted(x for r in results for x in r[3])
    if waits:
        print(f"each worker's end wait for the store: p50 {statistics.median(waits):.2f} s, "
              f"max {waits[-1]:.2f} s; runs analysed at their end {sum(r[4] for r in results)}")
    gave_up = collections.Counter(why.split(": ", 1)[-1][:80] for r in results for why in r[5])
    if gave_up:
        print(f"workers that stopped waiting for the store {sum(gave_up.values())}, by its last answer: "
              + "; ".join(f"{n} x {why}" for why, n in gave_up.most_common(4)))
    not_analysed = collections.Counter(why.split(": ", 1)[-1][-90:] for r in results for why in r[6])
    if not_analysed:
        print(f"runs not analysed at their end {sum(not_analysed.values())}: "
              + "; ".join(f"{n} x {why}" for why, n in not_analysed.most_common(4)))
    print(f"connections made {sum(r[1] for r in results)} "
          f"({sum(r[1] for r in results) / wall:.1f}/s)")
    print(f"server CPU {server_cpu:.1f} s ({server_cpu / wall:.2f} cores over the run)")
    if bouncer_cpu:
        print(f"PgBouncer CPU {bouncer_cpu:.1f} s ({bouncer_cpu / wall:.2f} cores)")
    print(f"store growth {(size_after - size_before) / 2**20:.1f} MiB, "
          f"{(size_after - size_before) / 2**20 / worker_hours:.1f} MiB per worker-hour")
    for name, (seconds, code, lines) in timings.items():
        print(f"{name}: {seconds:.2f} s (exit {code}, {lines} lines)")


if __name__ == "__main__":
    main()
