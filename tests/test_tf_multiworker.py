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


def test_slow_worker_is_named_the_straggler_with_its_cause(postgres_url, tg_cmd):
    job = f"mwms-{uuid.uuid4().hex[:8]}"
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers = []
    for index in (0, 1):
        env = {**os.environ, "SLOW_WORKER": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        workers.append(subprocess.Popen([*tg_cmd, "run", "-q", "--diagnose", "--store", postgres_url, "--job", job,
                                         "--", sys.executable, str(JOB)], env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True))
    outputs = [w.communicate(timeout=300) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [err[-1500:] for _, err in outputs]
    out = subprocess.run([*tg_cmd, "compare", "--store", postgres_url, "--job", job, "--json"],
                         capture_output=True, text=True, check=True).stdout
    doc = json.loads(out)
    assert [w["worker"] for w in doc["workers"]] == ["worker:0", "worker:1"]
    assert all(w["steps"] == 80 for w in doc["workers"])
    (finding,) = doc["findings"]
    assert finding["id"] == "straggler" and finding["evidence"]["straggler"] == "worker:1"
    assert "input: its tf.data pipeline works" in finding["title"]
    assert finding["evidence"]["others_wait_seconds_per_step"]["worker:0"] > 0.005
