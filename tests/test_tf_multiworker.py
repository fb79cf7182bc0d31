"""A 2-worker MultiWorkerMirroredStrategy job on localhost, worker 1 slowed by its input
on purpose; both record into one PostgreSQL store; compare --job names worker 1 as the
straggler, with input as its cause."""

import importlib.util
import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import needs_tf

pytestmark = [needs_tf, pytest.mark.tf,
              pytest.mark.skipif(importlib.util.find_spec("tf_keras") is None,
                                 reason="tf-keras is not installed (make test installs it)")]
JOB = Path(__file__).parent / "jobs" / "multi_worker.py"


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


# A worker ended by SIGABRT (glibc's "munmap_chunk(): invalid pointer"), SIGSEGV or SIGBUS: the same crash, the
# slow worker dying without a word and the other failing its collective (4 of 14 runs here: 3 SIGABRT, 1
# SIGSEGV; SIGBUS once in CI beside a one-core hog).
CRASHED = (128 + 6, 128 + 7, 128 + 11)
ATTEMPTS = 8  # at 10-14 of 33 runs crashed, all eight crash about 1 time in 1,000


def run_job(tg_cmd, postgres_url, job, tmp_path, attempt) -> tuple[list[int], list[str]]:
    """Both workers of one job; their exit codes and output."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers, logs = [], [tmp_path / f"attempt{attempt}-worker{index}.log" for index in (0, 1)]
    for index in (0, 1):
        env = {**os.environ, "SLOW_WORKER": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        # Output to files: a pipe read only after the other worker ends can fill and block this one.
        with open(logs[index], "w") as log:
            workers.append(subprocess.Popen([*tg_cmd, "run", "-q", "--diagnose", "--store", postgres_url, "--job",
                                             job, "--", sys.executable, str(JOB)], env=env,
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
    return [w.wait(timeout=300) for w in workers], [log.read_text() for log in logs]


def test_slow_worker_is_named_the_straggler_with_its_cause(postgres_url, tg_cmd, tmp_path):
    # TensorFlow 2.21 sometimes crashes a MultiWorkerMirroredStrategy worker as the profiler window of
    # --diagnose stops (TraceMeRecorder::Consume merging events of tf.data's threads, which are still producing
    # the next batch; the slow worker only, 10-14 runs in 33 here, also when stopped after the fit). That crash,
    # and only it, gets another attempt with a new job id.
    for attempt in range(ATTEMPTS):
        job = f"mwms-{uuid.uuid4().hex[:8]}"
        codes, outputs = run_job(tg_cmd, postgres_url, job, tmp_path, attempt)
        if not any(code in CRASHED for code in codes):
            break
    assert codes == [0, 0], [text[-1500:] for text in outputs]
    out = subprocess.run([*tg_cmd, "compare", "--store", postgres_url, "--job", job, "--json"],
                         capture_output=True, text=True, check=True).stdout
    doc = json.loads(out)
    assert [w["worker"] for w in doc["workers"]] == ["worker:0", "worker:1"]
    assert all(w["steps"] == 80 for w in doc["workers"])
    (finding,) = doc["findings"]
    assert finding["id"] == "straggler" and finding["evidence"]["straggler"] == "worker:1"
    assert "input: its tf.data pipeline works" in finding["title"]
    # Worker 0 waits 13-16 ms a step for it here alone, 4.3 ms was seen beside another test process: the
    # finding's floor is the bound; the cause's evidence is the 50 ms sleep a batch (30-35 ms of tf.data work a
    # step against 0.1-0.3 ms).
    assert finding["evidence"]["others_wait_seconds_per_step"]["worker:0"] >= 0.002
    work = finding["evidence"]["input_work_seconds_per_step"]
    assert work["worker:1"] > 10 * work["worker:0"]
