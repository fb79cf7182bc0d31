"""The tool's own settings (one OpenBLAS thread for its numpy) never enter what it records of the
user's environment (issue 34 item 16): `tensorgauge env` and a run's fingerprint, in real processes."""

import json
import os
import subprocess
import sys

import pytest

BLAS_THREADS = ("from threadpoolctl import threadpool_info; import numpy, json; "
                "print(json.dumps([p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']))")


def _users_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    return {**env, **settings}


def _blas_threads_of_a_plain_python(env: dict[str, str]) -> list[int]:
    return json.loads(subprocess.run([sys.executable, "-c", BLAS_THREADS], env=env, capture_output=True, text=True,
                                     check=True).stdout)


@pytest.mark.parametrize("users", [None, "3"])
def test_env_reports_the_users_blas_setting_and_threads_not_the_tools(tg_cmd, tmp_path, users):
    """`tensorgauge env` said OPENBLAS_NUM_THREADS=1 and job.blas num_threads 1 while a job ran 2."""
    pytest.importorskip("threadpoolctl")
    env = _users_env(**({"OPENBLAS_NUM_THREADS": users} if users else {}))
    expected = _blas_threads_of_a_plain_python(env)
    if users is None and expected == [1]:
        pytest.skip("numpy's BLAS runs one thread here anyway (one core): the tool's setting cannot show")
    out = tmp_path / "env.json"
    subprocess.run([*tg_cmd, "env", "--json", str(out)], env=env, check=True, capture_output=True)
    doc = json.loads(out.read_text())
    assert doc["host"]["env_vars"].get("OPENBLAS_NUM_THREADS") == users
    assert [p["num_threads"] for p in doc["job"]["blas"] if p["user_api"] == "blas"] == expected


def test_a_runs_fingerprint_holds_the_users_environment_not_the_monitors(tg_cmd, tmp_path):
    """`show --json`'s env.host.env_vars held the monitor's own OPENBLAS_NUM_THREADS=1."""
    store, out = tmp_path / "runs.db", tmp_path / "run.json"
    for users in (None, "3"):
        env = _users_env(**({"OPENBLAS_NUM_THREADS": users} if users else {}))
        subprocess.run([*tg_cmd, "run", "-q", "--store", str(store), "--json", str(out), "--", sys.executable, "-c",
                        "pass"], env=env, check=True, capture_output=True)
        assert json.loads(out.read_text())["env"]["host"]["env_vars"].get("OPENBLAS_NUM_THREADS") == users
