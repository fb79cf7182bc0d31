"""Random faults on a PostgreSQL store and on the spools of the monitors recording into it, on a small
budget: benchmarks/store_faults.py (which says what is counted) over 20 short jobs. Real monitor
processes, a real server killed and restarted, real full disks (a tmpfs per machine: root only)."""

from __future__ import annotations

import glob
import importlib.util
import os
import random
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEED_ENV = "TENSORGAUGE_FAULT_SEED"  # set to rerun a failed draw


def _have_server_binaries() -> bool:
    return bool(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or shutil.which("initdb") is not None


pytestmark = [
    pytest.mark.skipif(not _have_server_binaries(), reason="no PostgreSQL server binaries (initdb) on this machine"),
    pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0,
                       reason="mounts a tmpfs per machine and runs the server as 'postgres': Linux, as root"),
]


def _store_faults():
    spec = importlib.util.spec_from_file_location("store_faults", ROOT / "benchmarks" / "store_faults.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_random_faults_on_the_store_and_the_spools_lose_nothing_acknowledged_and_no_run():
    pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")
    pytest.importorskip("psutil")
    store_faults = _store_faults()
    seed = int(os.environ.get(SEED_ENV) or random.randrange(1 << 30))
    try:
        figures = store_faults.run(jobs=20, faults=30, machines=2, seed=seed)
    except PermissionError as exc:
        pytest.skip(str(exc))
    said = "\n".join([*figures.lines(), f"(rerun this draw with {SEED_ENV}={seed})"])
    assert figures.jobs >= 20 and sum(figures.faults.values()) >= 30, said
    assert figures.acknowledged > 0 and figures.lost == 0 and figures.twice == 0, said
    assert figures.runs_lost_store_up == 0 and figures.exit_codes_changed == 0, said
    assert figures.spools_left == 0 and not figures.problems, said


def test_a_server_refusing_during_the_tls_exchange_is_waited_for_not_a_users_mistake():
    """Found by the draw above: a server restarting answered a connection with an error during the SSL
    exchange, read as an SSL problem of the user's: the run was refused before its job (exit 2)."""
    from tensorgauge.store.postgres import transient

    said = ('connection failed: connection to server at "127.0.0.1", port 59547 failed: server sent an error '
            "response during SSL exchange")
    assert transient(Exception(said))
    assert not transient(Exception("connection failed: server does not support SSL, but SSL was required"))
