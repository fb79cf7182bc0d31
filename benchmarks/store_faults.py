"""Random faults on a PostgreSQL store and on the local spools of the monitors recording into it, against
real `tensorgauge run` processes: nothing the recording acknowledged is lost, no run is lost while the
store answers.

    .venv/bin/python benchmarks/store_faults.py [--jobs 60] [--faults 200] [--machines 3] [--seed N]
        [--long-outages 0.05]

Runs as root (it mounts a tmpfs per simulated machine, and the server runs as 'postgres'); starts its own
throwaway server (scripts/postgres-for-tests, on a free port). Each machine (a data folder on its own
1 MiB tmpfs) runs short plain Python jobs one after another under `tensorgauge run --store URL`, each
shipping its spool every 0.5 s; the machines run beside each other. Each job gets 1 to 4 faults at random
times, drawn from a seeded generator: the server killed (SIGKILL of all its processes, restarted 0.1-1.5 s
later, recovering as from a crash; a share ``--long-outages`` of them 16-20 s later, past the 15 s a run's
end waits for a store that takes nothing, so runs end with their data left in their spools), the monitor killed (SIGKILL, with its job), the machine's disk filled
(before the job starts or during it, freed 0.2-1.5 s later or at the job's end). So every write path is
tried: the spool on disk, batches and records held in memory while the disk refuses, shipping during the
run, the drain at its end, a killed monitor's spool shipped as the next run on its machine ends, and
`tensorgauge ship`, run on every machine once the faults are over.

Acknowledged: what a run that ended says it kept (samples taken less those it counted as lost), and of a
killed run what was durable after its kill (in its spool file or committed by the store). Found: the run's
samples in the store at the end. Lost: acknowledged and not found; stored twice: a sample time found more
than once. A run is lost while a store was up when a run that ended is not in the store at the end without
having said it lost its data (a store that did not answer at its end, with the disk under its spool full).
Exits 1, printing the seed, when a sample or a run was lost or a sample stored twice, a job's exit code
changed, a spool holding data was left after `tensorgauge ship`, or a monitor hung.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DISK_OPTIONS = "size=1m,mode=0700"
SHIP_SECONDS = "0.5"
JOB_SECONDS = (0.2, 1.2)
DOWN_SECONDS = (0.1, 1.5)  # the server stays down this long (then its restart, about a second)
# ... or, with --long-outages, past the 15 s a run's end waits for a store that takes nothing
LONG_DOWN_SECONDS = (16.0, 20.0)
FILL_SECONDS = (0.2, 1.5)
FAULTS_PER_JOB = (1, 4)
KINDS = ("server", "disk", "monitor")
HUNG_SECONDS = 300.0  # a monitor still running this long after its start is killed, and the draw fails
RUN_ID = re.compile(r"recording run (\S+) every")


class Server:
    """The throwaway server: killed as a crash kills it, restarted on a thread of its own."""

    def __init__(self, folder: Path):
        self.data = folder / "pg"
        folder.chmod(0o755)  # the server runs as 'postgres'
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.env = {**os.environ, "TENSORGAUGE_PG_DATA": str(self.data), "TENSORGAUGE_PG_PORT": str(port)}
        self.url = self._start(keep=False)
        self.up = threading.Event()
        self.up.set()
        self.kills = 0
        self._lock = threading.Lock()

    def _start(self, keep: bool) -> str:
        for _ in range(20):
            done = subprocess.run([str(ROOT / "scripts/postgres-for-tests"), "start"], capture_output=True, text=True,
                                  env={**self.env, **({"TENSORGAUGE_PG_KEEP": "1"} if keep else {})}, timeout=120)
            if done.returncode == 0:
                return done.stdout.strip()
            time.sleep(0.5)  # the killed server's processes still going: tried again
        raise RuntimeError(f"the server did not start again: {done.stderr}")

    def kill(self, down_seconds: float) -> bool:
        """SIGKILL every process of the server, started again ``down_seconds`` later; False while it is down."""
        import psutil

        with self._lock:
            if not self.up.is_set():
                return False
            self.up.clear()
            self.kills += 1
        procs = []
        for p in psutil.process_iter(["cwd"]):
            if p.info["cwd"] == str(self.data):
                procs.append(p)
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
        psutil.wait_procs(procs, timeout=30)
        threading.Thread(target=self._restart, args=(down_seconds,), daemon=True).start()
        return True

    def _restart(self, down_seconds: float) -> None:
        time.sleep(down_seconds)
        self._start(keep=True)
        self.up.set()

    def stop(self) -> None:
        self.up.wait(120)
        subprocess.run([str(ROOT / "scripts/postgres-for-tests"), "stop"], env=self.env, timeout=60)


@dataclass
class Job:
    name: str
    machine: int
    seconds: float
    faults: list[tuple[float, str, float]]  # (seconds from the start, kind, how long it lasts)
    run_id: str | None = None
    killed: bool = False
    exit_code: int | None = None
    stderr: str = ""
    durable: set[float] | None = None  # a killed run's sample times durable after the kill
    durable_record: bool = False  # ... and whether its record was
    faults_made: list[str] = field(default_factory=list)
    hung: bool = False


def plan_job(rng: random.Random, name: str, machine: int, long_outages: float = 0.0) -> Job:
    """A job's length and faults: 1-4 of them, a monitor killed at most once; a share ``long_outages`` of
    the server's outages long."""
    seconds = rng.uniform(*JOB_SECONDS)
    faults: list[tuple[float, str, float]] = []
    for _ in range(rng.randint(*FAULTS_PER_JOB)):
        kind = rng.choice(KINDS)
        if kind == "monitor" and any(k == "monitor" for _, k, _ in faults):
            kind = "server"
        at = rng.uniform(-0.5 if kind == "disk" else 0.05, seconds + 1.0)  # a disk may be full from the start
        lasts = rng.uniform(*(FILL_SECONDS if kind != "server" else LONG_DOWN_SECONDS
                              if rng.random() < long_outages else DOWN_SECONDS))
        faults.append((at, kind, lasts))
    return Job(name, machine, seconds, sorted(faults))


class Machine:
    """A data folder on a small disk of its own, its jobs one after another."""

    def __init__(self, index: int, folder: Path):
        self.index = index
        self.data = folder / f"machine-{index}"
        self.data.mkdir()
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", DISK_OPTIONS, "tmpfs", str(self.data)],
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise PermissionError(f"cannot mount a tmpfs (root only): {made.stderr.strip()}")
        self.spools = self.data / "tensorgauge" / "spool"
        self.leftovers_shipped = 0  # spools of earlier runs gone by a run's end
        self._filled_until: float | None = None

    def fill(self, until: float) -> None:
        """Every free block taken, until ``until`` (seconds from the job's start) at least."""
        self._filled_until = max(until, self._filled_until or until)
        with open(self.data / "filler", "ab", buffering=0) as f:
            try:
                while f.write(b"\0" * 4096):
                    pass
            except OSError:
                pass

    def free(self, now: float) -> None:
        if self._filled_until is not None and now >= self._filled_until:
            (self.data / "filler").unlink(missing_ok=True)
            self._filled_until = None

    def spool_files(self) -> set[Path]:
        return set(self.spools.glob("*.db")) if self.spools.is_dir() else set()

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.data)], check=False)


def _kill_monitor(monitor: subprocess.Popen) -> None:
    import psutil

    try:
        job = psutil.Process(monitor.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        job = []
    monitor.send_signal(signal.SIGKILL)
    for p in job:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def run_job(job: Job, machine: Machine, server: Server, url: str, count_fault) -> None:
    """The job under `tensorgauge run`, its faults made at their times (a full disk may come before it)."""
    before = machine.spool_files()
    for _, _, lasts in [f for f in job.faults if f[0] < 0]:
        machine.fill(until=lasts)
        job.faults_made.append("disk")
        count_fault("disk")
    monitor = subprocess.Popen(
        [sys.executable, "-m", "tensorgauge", "run", "--store", url, "--name", job.name, "--",
         sys.executable, "-c", f"import time; time.sleep({job.seconds:.3f})"],
        env={**os.environ, "XDG_DATA_HOME": str(machine.data), "TENSORGAUGE_SHIP_SECONDS": SHIP_SECONDS,
             "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    began = time.monotonic()
    pending = [f for f in job.faults if f[0] >= 0]
    while monitor.poll() is None:
        now = time.monotonic() - began
        while pending and pending[0][0] <= now:
            _, kind, lasts = pending.pop(0)
            if _make(kind, lasts, now, monitor, machine, server):
                job.faults_made.append(kind)
                job.killed = job.killed or kind == "monitor"
                count_fault(kind)
        machine.free(now)
        if now > HUNG_SECONDS and not job.hung:
            job.hung = True
            _kill_monitor(monitor)
        time.sleep(0.01)
    machine.free(float("inf"))
    job.stderr = monitor.stderr.read() if monitor.stderr else ""
    job.exit_code = monitor.wait()
    found = RUN_ID.search(job.stderr)
    new = machine.spool_files() - before
    job.run_id = found[1] if found else (min(new).stem if new else None)
    if not job.killed:
        machine.leftovers_shipped += len(before - machine.spool_files())


def _make(kind: str, lasts: float, now: float, monitor: subprocess.Popen, machine: Machine, server: Server) -> bool:
    """One fault, now; False where it cannot be made (the server is already down)."""
    if kind == "server":
        return server.kill(lasts)
    if kind == "disk":
        machine.fill(until=now + lasts)
        return True
    _kill_monitor(monitor)
    return True


def _sample_times(rows: list, index: int) -> list[float]:
    return [float(row[index]) for row in rows]


def spool_times(path: Path) -> tuple[list[float], bool]:
    """Sample times in a spool file (read only), and whether it holds the run's record."""
    from tensorgauge.store.schema import SAMPLE_COLUMNS

    index = [c.name for c in SAMPLE_COLUMNS].index("t")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10.0)
        try:
            bodies = [row[0] for row in conn.execute("SELECT body FROM batches ORDER BY seq")]
            record = conn.execute("SELECT 1 FROM meta WHERE key = 'record'").fetchone() is not None
        finally:
            conn.close()
    except sqlite3.Error:  # made, never written (its disk full)
        return [], False
    return [t for body in bodies for t in _sample_times(json.loads(zlib.decompress(body))[0], index)], record


def store_times(url: str, run_id: str) -> list[float] | None:
    """The run's sample times in the store; None when the store has no such run."""
    from tensorgauge.errors import UnknownRunError
    from tensorgauge.store import Store

    with Store.open(url) as store:
        try:
            store.run(run_id)
        except UnknownRunError:
            return None
        return [s.t for s in store.samples(run_id)]


def note_durable(job: Job, machine: Machine, server: Server, url: str) -> None:
    """What a killed run left durable: its spool file (read first: what leaves it is in the store), the store."""
    if job.run_id is None:  # killed before it named its run: the store may have it by name
        server.up.wait(120)
        job.run_id = _retry(lambda: _run_id_named(url, job.name))
    if job.run_id is None:
        job.durable = set()
        return
    path = machine.spools / f"{job.run_id}.db"
    spooled, record = spool_times(path) if path.exists() else ([], False)
    server.up.wait(120)
    stored = _retry(lambda: store_times(url, job.run_id))
    job.durable = set(spooled) | set(stored or ())
    job.durable_record = record or stored is not None


def _retry(read, seconds: float = 60.0):
    """``read()``, tried again while the store refuses (restarting)."""
    from tensorgauge.errors import StoreError

    deadline = time.monotonic() + seconds
    while True:
        try:
            return read()
        except StoreError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@dataclass
class Figures:
    seed: int
    jobs: int = 0
    machines: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    acknowledged: int = 0
    found: int = 0
    lost: int = 0
    twice: int = 0
    killed: int = 0
    runs_lost_store_up: int = 0
    runs_lost_said: int = 0
    never_acknowledged: int = 0
    counted_lost: int = 0  # samples the runs themselves said were lost
    beyond: int = 0  # samples found that were not acknowledged (counted as lost, or in flight at a kill)
    exit_codes_changed: int = 0
    held_in_memory: int = 0
    leftovers_by_next_run: int = 0
    shipped_by_command: int = 0
    spools_left: int = 0  # holding data
    empty_spools_left: int = 0
    wall_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what is worth a look, not a failure

    @property
    def held(self) -> bool:
        return not (self.lost or self.twice or self.runs_lost_store_up or self.spools_left or self.exit_codes_changed
                    or self.problems)

    def lines(self) -> list[str]:
        made = ", ".join(f"{kind} {n}" for kind, n in sorted(self.faults.items()))
        return [
            f"store faults: seed {self.seed}; {self.jobs} jobs on {self.machines} machines, "
            f"{sum(self.faults.values())} faults ({made}) in {self.wall_seconds:.0f} s",
            f"samples acknowledged {self.acknowledged}, found {self.found} (beyond those acknowledged "
            f"{self.beyond}), lost {self.lost}, stored twice {self.twice}",
            f"runs: killed {self.killed} (never acknowledged {self.never_acknowledged}), lost while a store was up "
            f"{self.runs_lost_store_up}, lost whole or their end, and said so (store down at the end, disk full) "
            f"{self.runs_lost_said}; "
            f"samples the runs counted as lost {self.counted_lost}; exit codes changed {self.exit_codes_changed}",
            f"write paths: runs held in memory {self.held_in_memory}, spools shipped as a next run ended "
            f"{self.leftovers_by_next_run}, by 'tensorgauge ship' {self.shipped_by_command}; spools left "
            f"{self.spools_left} (and {self.empty_spools_left} empty, of monitors killed as they made them)",
            *self.problems[:20],
            *self.notes[:10],
        ]


def check_job(job: Job, url: str, figures: Figures) -> None:
    """The job's acknowledged samples against those found."""
    figures.held_in_memory += "held in memory" in job.stderr
    if job.hung:
        figures.problems.append(f"{job.name}: its monitor still ran {HUNG_SECONDS:g} s after its start")
    found = _retry(lambda: store_times(url, job.run_id)) if job.run_id else None
    if job.killed:
        figures.killed += 1
        acknowledged = job.durable or set()
        if not (acknowledged or job.durable_record):
            figures.never_acknowledged += 1
            return
        if found is None:
            figures.runs_lost_store_up += 1
            figures.problems.append(f"{job.name} ({job.run_id}): killed, durable, and not in the store")
            found = []
        missing = len(acknowledged - set(found))
        figures.acknowledged += len(acknowledged)
        figures.beyond += len(set(found) - acknowledged)
        if set(found) - acknowledged:
            figures.notes.append(f"{job.name} ({job.run_id}): killed, {len(set(found) - acknowledged)} found beyond "
                                 f"the {len(acknowledged)} durable after the kill")
    else:
        if job.exit_code != 0:
            figures.exit_codes_changed += 1
            figures.problems.append(f"{job.name}: exit {job.exit_code}: {job.stderr.strip()[-300:]}")
        if found is None:
            said = "is lost" in job.stderr
            figures.runs_lost_said += said
            figures.runs_lost_store_up += not said
            if not said:
                figures.problems.append(f"{job.name} ({job.run_id}): not in the store; {job.stderr.strip()[-300:]}")
            return
        run_id = job.run_id or ""
        record = _retry(lambda: _record(url, run_id))
        if not record.complete:  # its last record was lost: held in memory, its store down at its end
            said = "is lost" in job.stderr
            figures.runs_lost_said += said
            figures.runs_lost_store_up += not said
            if not said:
                figures.problems.append(f"{job.name} ({job.run_id}): its end not in the store, unsaid")
            figures.twice += len(found) - len(set(found))
            return
        counted = record.samples_lost or 0
        figures.counted_lost += counted
        acknowledged_count = (record.samples_taken or 0) - counted
        figures.acknowledged += acknowledged_count
        missing = max(0, acknowledged_count - len(set(found)))
        figures.beyond += max(0, len(set(found)) - acknowledged_count)
        if len(set(found)) > acknowledged_count:
            figures.notes.append(f"{job.name} ({job.run_id}): {len(set(found)) - acknowledged_count} found beyond the "
                                 f"{acknowledged_count} it kept by its count ({counted} counted as lost)")
    figures.found += len(set(found))
    figures.lost += missing
    figures.twice += len(found) - len(set(found))
    if missing or len(found) != len(set(found)):
        figures.problems.append(f"{job.name} ({job.run_id}): {missing} lost, {len(found) - len(set(found))} twice")


def _run_id_named(url: str, name: str) -> str | None:
    from tensorgauge.store import Store

    with Store.open(url) as store:
        return next((r.run_id for r in store.runs() if r.name == name), None)


def _record(url: str, run_id: str):
    from tensorgauge.store import Store

    with Store.open(url) as store:
        return store.run(run_id)


def ship_all(machines: list[Machine], url: str, figures: Figures) -> None:
    """`tensorgauge ship` on every machine; then no spool may be left."""
    for machine in machines:
        done = subprocess.run([sys.executable, "-m", "tensorgauge", "ship", "--store", url], capture_output=True,
                              text=True, env={**os.environ, "XDG_DATA_HOME": str(machine.data),
                                              "PYTHONPATH": str(ROOT)}, timeout=300)
        figures.shipped_by_command += done.stdout.count(": shipped (")
        if done.returncode != 0:
            figures.problems.append(f"tensorgauge ship on machine {machine.index}: exit {done.returncode}: "
                                    f"{(done.stdout + done.stderr).strip()[-300:]}")
        for left in sorted(machine.spool_files()):
            times, record = spool_times(left)
            if not (times or record):  # a monitor killed as it made it: removed once a minute old
                figures.empty_spools_left += 1
                continue
            figures.spools_left += 1
            figures.problems.append(f"left on machine {machine.index}: {left.name}, {left.stat().st_size} bytes, "
                                    f"{len(times)} samples, {'a' if record else 'no'} record")
        figures.leftovers_by_next_run += machine.leftovers_shipped


def run(jobs: int, faults: int, machines: int, seed: int, long_outages: float = 0.0) -> Figures:
    """At least ``jobs`` jobs and ``faults`` faults on ``machines`` machines beside each other; a share
    ``long_outages`` of the server's outages outlasting a run's wait for its store."""
    figures = Figures(seed=seed, machines=machines)
    folder = Path(tempfile.mkdtemp(prefix="tg-store-faults-"))
    began = time.monotonic()
    made: list[Machine] = []
    server = Server(folder)
    try:
        made = [Machine(i, folder) for i in range(machines)]
        done = _drive(made, server, (jobs, faults), seed, long_outages, figures)
        server.up.wait(120)
        ship_all(made, server.url, figures)
        for job in done:
            check_job(job, server.url, figures)
        figures.jobs = len(done)
    finally:
        server.stop()
        for machine in made:
            machine.unmount()
        shutil.rmtree(folder, ignore_errors=True)
    figures.wall_seconds = time.monotonic() - began
    return figures


def _drive(machines: list[Machine], server: Server, least: tuple[int, int], seed: int, long_outages: float,
           figures: Figures) -> list[Job]:
    """Every machine's jobs, until the ``least`` (jobs, faults) are reached."""
    jobs, faults = least
    lock = threading.Lock()
    done: list[Job] = []
    counts = {"jobs": 0}

    def count_fault(kind: str) -> None:
        with lock:
            figures.faults[kind] = figures.faults.get(kind, 0) + 1

    def take() -> int | None:
        with lock:
            if counts["jobs"] >= jobs and sum(figures.faults.values()) >= faults:
                return None
            counts["jobs"] += 1
            return counts["jobs"] - 1

    def machine_loop(machine: Machine) -> None:
        rng = random.Random(seed * 1000 + machine.index)
        killed: Job | None = None
        while (index := take()) is not None:
            job = plan_job(rng, f"sf{seed}-m{machine.index}-j{index}", machine.index, long_outages)
            if killed is not None:
                note_durable(killed, machine, server, server.url)
            run_job(job, machine, server, server.url, count_fault)
            killed = job if job.killed else None
            with lock:
                done.append(job)
        if killed is not None:
            note_durable(killed, machine, server, server.url)

    threads = [threading.Thread(target=machine_loop, args=(m,)) for m in machines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60, help="at least this many jobs (default 60)")
    parser.add_argument("--faults", type=int, default=200, help="at least this many faults (default 200)")
    parser.add_argument("--machines", type=int, default=3, help="machines beside each other (default 3)")
    parser.add_argument("--seed", type=int, default=None, help="the random generator's seed (default: drawn)")
    parser.add_argument("--long-outages", type=float, default=0.05, metavar="SHARE",
                        help="the share of the server's outages that outlast a run's wait for it (default 0.05)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    try:
        figures = run(args.jobs, args.faults, args.machines, seed, args.long_outages)
    except PermissionError as exc:
        print(f"store_faults: {exc}", file=sys.stderr)
        return 2
    for line in figures.lines():
        print(line)
    if not figures.held:
        print(f"store_faults: FAILED (seed {seed}: rerun with --seed {seed})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
