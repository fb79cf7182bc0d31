"""How one run is recorded, as one object from the command line to the runner: ``tensorgauge run``
builds it once from its flags (:class:`tensorgauge.commands._recording.RecordOptions` adds what only
the command needs), and :func:`tensorgauge.monitoring.runner.run` reads it."""

from __future__ import annotations

from dataclasses import dataclass

STORE_WAIT_SECONDS = 120.0  # how long the end of a run waits for a locked or busy store
STOP_GRACE_SECONDS = 10.0  # after a SIGTERM or SIGINT passed on, the job's tree is killed if it still runs (docker's)


@dataclass
class RunOptions:
    """``diagnose``: the input split measured within its cost bound ("auto"), unbounded ("always" or True),
    or not at all ("" or False); ``job``: the distributed job the worker belongs to (else from
    ``TF_CONFIG``); ``keep_job_on_failure``: the job is left running if the monitor fails;
    ``stop_grace_seconds``: after a SIGTERM or SIGINT passed on, before the tree is killed;
    ``extra_env``: set for the job; ``parent_run_id``: the run this one is a trial of;
    ``store_wait_seconds``: how long the run's end waits for the store."""

    interval_seconds: float = 0.1
    name: str | None = None
    hook: bool = True
    diagnose: str | bool = "auto"
    job: str | None = None
    keep_job_on_failure: bool = False
    stop_grace_seconds: float = STOP_GRACE_SECONDS
    extra_env: dict[str, str] | None = None
    parent_run_id: str | None = None
    store_wait_seconds: float = STORE_WAIT_SECONDS

    def diagnosis_mode(self) -> str:
        """"auto", "always" or "" (off)."""
        mode = ("always" if self.diagnose else "") if isinstance(self.diagnose, bool) else self.diagnose
        if mode not in ("auto", "always", ""):
            raise ValueError(f"diagnose must be 'auto', 'always' or '', not {self.diagnose!r}")
        return mode
