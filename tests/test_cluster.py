"""Distributed jobs: worker identity from TF_CONFIG, and the straggler from each worker's
measured all-reduce and input time (on fakes)."""

import json

from tensorgauge.analyse.straggler import WorkerRow, straggler
from tensorgauge.sources.cluster import worker_identity

CLUSTER = {"worker": ["127.0.0.1:2001", "127.0.0.1:2002"], "chief": ["127.0.0.1:2000"]}


def tf_config(kind, index, cluster=CLUSTER):
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})}


def test_workers_of_one_cluster_share_a_derived_job_id():
    job0, w0 = worker_identity(tf_config("worker", 0))
    job1, w1 = worker_identity(tf_config("worker", 1))
    chief, c = worker_identity(tf_config("chief", 0))
    assert job0 == job1 == chief and job0.startswith("tf-")
    assert (w0["worker"], w1["worker"], c["worker"]) == ("worker:0", "worker:1", "chief:0")
    assert w0["cluster"] == {"worker": 2, "chief": 1}
    other, _ = worker_identity(tf_config("worker", 0, {"worker": ["10.0.0.1:1", "10.0.0.2:1"]}))
    assert other != job0


def test_a_given_job_id_wins_and_no_tf_config_is_no_worker():
    assert worker_identity(tf_config("worker", 1), job="nightly")[0] == "nightly"
    assert worker_identity({"TENSORGAUGE_JOB": "env-job", **tf_config("worker", 1)})[0] == "env-job"
    assert worker_identity({}) == (None, None)
    assert worker_identity({"TF_CONFIG": "{not json"}) == (None, None)


def row(worker, allreduce, input_work=0.0005, cores=2.0, model="EPYC", busy=0.8, step=0.022):
    return WorkerRow(worker=worker, run_id=f"r-{worker}", hostname="h", fit_seconds=5.0, steps=80,
                     step_seconds_p50=step, cores_busy_mean=busy, cores_allowed=cores, cpu_model=model,
                     allreduce_seconds_per_step=allreduce, input_work_seconds_per_step=input_work)


def test_the_worker_others_wait_for_is_named_with_its_input_cause():
    finding = straggler([row("worker:0", 0.018), row("worker:1", 0.005, input_work=0.030)])
    assert finding.id == "straggler" and finding.evidence["straggler"] == "worker:1"
    assert finding.evidence["others_wait_seconds_per_step"] == {"worker:0": 0.013}
    assert "input: its tf.data pipeline works 30.0 ms a step" in finding.title and finding.severity == "high"
    assert "input pipeline" in finding.fix


def test_quota_and_hardware_causes():
    quota = straggler([row("worker:0", 0.015), row("worker:1", 0.001, cores=0.5), row("worker:2", 0.016)])
    assert quota.evidence["straggler"] == "worker:1" and "CPU quota: it may use 0.5 CPUs, the others 2" in quota.title
    assert quota.evidence["others_wait_seconds_per_step"] == {"worker:0": 0.014, "worker:2": 0.015}
    other = straggler([row("worker:0", 0.015), row("worker:1", 0.001, model="Xeon E5")])
    assert "different hardware: Xeon E5 against EPYC" in other.title


def test_no_straggler_when_nobody_waits_or_nothing_was_measured():
    assert straggler([row("worker:0", 0.0030), row("worker:1", 0.0025)]) is None  # 0.5 ms: noise
    assert straggler([row("worker:0", None), row("worker:1", 0.001)]) is None  # run without --diagnose
    assert straggler([row("worker:0", 0.02)]) is None
