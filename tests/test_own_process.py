"""The monitor's own settings (one OpenBLAS thread) never reach the job it runs."""

import os
import subprocess
import sys

from tensorgauge.monitoring.runner import job_environment
from tensorgauge.own_process import OWN_SETTINGS, lighten, without_own


def test_lighten_sets_one_blas_thread_only_where_the_user_set_none_and_numpy_is_not_loaded(monkeypatch):
    monkeypatch.setattr("tensorgauge.own_process.OWN_SETTINGS", {})
    from tensorgauge import own_process

    environ: dict[str, str] = {}
    lighten(environ, modules={})
    assert environ == {"OPENBLAS_NUM_THREADS": "1"} == own_process.OWN_SETTINGS
    assert without_own(dict(environ)) == {}
    assert without_own({"OPENBLAS_NUM_THREADS": "4"}) == {"OPENBLAS_NUM_THREADS": "4"}  # changed since: kept
    mine = {"OPENBLAS_NUM_THREADS": "8"}
    lighten(mine, modules={})  # the user's own setting stands
    assert mine == {"OPENBLAS_NUM_THREADS": "8"}
    loaded: dict[str, str] = {}
    lighten(loaded, modules={"numpy": object()})  # too late to matter: left alone
    assert loaded == {}


def test_the_jobs_environment_leaves_out_the_monitors_own_settings(monkeypatch):
    monkeypatch.setitem(OWN_SETTINGS, "OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert "OPENBLAS_NUM_THREADS" not in job_environment(None, "r", hook=False)


def test_a_job_run_by_the_cli_sees_the_users_environment(tg_cmd, store_path, tmp_path):
    show = "import os; print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([*tg_cmd, "run", "-q", "--", sys.executable, "-c", show], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "None"
    env["OPENBLAS_NUM_THREADS"] = "3"
    out = subprocess.run([*tg_cmd, "run", "-q", "--", sys.executable, "-c", show], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "3"
