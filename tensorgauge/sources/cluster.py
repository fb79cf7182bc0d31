"""Which worker of which distributed job a run is, from ``TF_CONFIG``.

TensorFlow's ``TF_CONFIG`` (JSON) names the cluster (``{"worker": [...],
"ps": [...], "chief": [...]}``) and this process's task (``{"type",
"index"}``). Every worker of one job runs under its own ``tensorgauge run``;
they share a job id: the one given (``--job`` or ``$TENSORGAUGE_JOB``), else
one derived from the cluster spec, the same on every worker.
"""

from __future__ import annotations

import hashlib
import json

from tensorgauge.hook.protocol import JOB_ENV


def worker_identity(environ: dict[str, str], job: str | None = None) -> tuple[str | None, dict | None]:
    """(job id, {"task_type", "task_index", "worker", "cluster"}) for a process started with ``environ``."""
    job = job or environ.get(JOB_ENV) or None
    try:
        config = json.loads(environ.get("TF_CONFIG") or "{}")
    except ValueError:
        config = {}
    cluster = config.get("cluster") if isinstance(config, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        return job, None
    task_type, task_index = str(task.get("type", "worker")), task.get("index", 0)
    sizes = {str(kind): len(hosts) if isinstance(hosts, list) else 1 for kind, hosts in cluster.items()}
    if job is None:
        spec = json.dumps(cluster, sort_keys=True, default=str)
        job = "tf-" + hashlib.sha1(spec.encode()).hexdigest()[:10]
    return job, {"task_type": task_type, "task_index": task_index, "worker": f"{task_type}:{task_index}",
                 "cluster": sizes}
