"""Where `make test`'s time goes: its wall and CPU seconds, each pytest process's tests (their wall time and
the CPU of the process and the children it waited for), and the machine's busy cores every 20 s.

    .venv/bin/python benchmarks/suite_time.py [-- COMMAND...]      # COMMAND: make test, by default

The command's output goes to build/suite_time.log.
A plugin of its own (on PYTHONPATH, named by PYTEST_PLUGINS, so every pytest process loads it) writes a
line per test; /proc/stat is read once a second. Nothing else should run beside it.
"""

import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

COMMAND = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else ["make", "test"]
BUCKET_SECONDS = 20
OUTPUT = Path(__file__).resolve().parent.parent / "build" / "suite_time.log"
PLUGIN = '''
import json, os, resource, time
import pytest

def _cpu():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0, cpu = time.time(), _cpu()
    yield
    with open(os.path.join(os.environ["SUITE_TIME_LOG"], f"{os.getpid()}.jsonl"), "a") as out:
        out.write(json.dumps({"test": item.nodeid, "t0": t0, "t1": time.time(), "cpu": _cpu() - cpu,
                              "process": os.environ.get("PYTEST_XDIST_WORKER") or _part(item.config)}) + "\\n")

def _part(config):
    """A process outside pytest-xdist, named by the part of the suite it runs (scripts/test-suite)."""
    part = config.getoption("--suite-part", None)
    return part or config.getoption("markexpr", "") or str(os.getpid())
'''


def machine_busy(samples: list[tuple[float, float]], stop: threading.Event) -> None:
    """(time, cores busy) once a second, from /proc/stat, until ``stop``."""
    def read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # all, idle + iowait

    cores = os.cpu_count() or 1
    before = read()
    while not stop.wait(1.0):
        now = read()
        samples.append((time.time(), cores * (1 - (now[1] - before[1]) / max(1, now[0] - before[0]))))
        before = now


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="suite-time-") as folder:
        plugin, log = Path(folder) / "plugin", Path(folder) / "log"
        plugin.mkdir()
        log.mkdir()
        (plugin / "suite_time_plugin.py").write_text(PLUGIN)
        env = {**os.environ, "PYTHONPATH": str(plugin), "PYTEST_PLUGINS": "suite_time_plugin",
               "SUITE_TIME_LOG": str(log)}
        busy: list[tuple[float, float]] = []
        stop = threading.Event()
        sampler = threading.Thread(target=machine_busy, args=(busy, stop), daemon=True)
        sampler.start()
        began, cpu = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
        OUTPUT.parent.mkdir(exist_ok=True)
        with open(OUTPUT, "w") as output:
            code = subprocess.run(COMMAND, env=env, stdout=output, stderr=subprocess.STDOUT).returncode
        wall, after = time.time() - began, resource.getrusage(resource.RUSAGE_CHILDREN)
        stop.set()
        tests = [json.loads(line) for path in log.glob("*.jsonl") for line in path.read_text().splitlines()]
    print(f"{' '.join(COMMAND)}: exit {code}, {wall:.0f} s, CPU {after.ru_utime - cpu.ru_utime:.0f} s user + "
          f"{after.ru_stime - cpu.ru_stime:.0f} s system (its output: {OUTPUT})")
    processes = collections.defaultdict(list)
    for test in tests:
        processes[test["process"]].append(test)
    for name, run in sorted(processes.items(), key=lambda item: min(t["t0"] for t in item[1])):
        first, last = min(t["t0"] for t in run) - began, max(t["t1"] for t in run) - began
        print(f"  pytest process {name}: {len(run)} tests from {first:.0f} to {last:.0f} s; their wall "
              f"{sum(t['t1'] - t['t0'] for t in run):.0f} s, CPU {sum(t['cpu'] for t in run):.0f} s")
    buckets = collections.defaultdict(list)
    for t, cores in busy:
        buckets[int((t - began) // BUCKET_SECONDS)].append(cores)
    print(f"  cores busy each {BUCKET_SECONDS} s: " + " ".join(
        f"{sum(values) / len(values):.2f}" for _, values in sorted(buckets.items())))


if __name__ == "__main__":
    main()
