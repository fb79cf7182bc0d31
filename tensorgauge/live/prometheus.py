"""``tensorgauge run --prometheus ADDR:PORT``: the run's live metrics in Prometheus'
text format, made by the official client (the ``[prometheus]`` extra) and served
(:mod:`.metrics_server`) on loopback unless another address is given. Labels: ``job`` and ``worker``
(from ``TF_CONFIG``, else the run id)."""

from __future__ import annotations

import threading

from tensorgauge.errors import TensorgaugeError
from tensorgauge.live.metrics_server import IDLE_SECONDS, MAX_CONNECTIONS, serve
from tensorgauge.live.state import LiveState
from tensorgauge.model import Event, RunRecord, Sample, shown_metrics

DEFAULT_HOST = "127.0.0.1"


def parse_address(text: str) -> tuple[str, int]:
    """'127.0.0.1:9464', ':9464' or '9464' -> (host, port); loopback unless a host is given."""
    host, _, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise TensorgaugeError(f"--prometheus wants HOST:PORT or PORT, got {text!r}") from None
    if not 0 < number < 65536:
        raise TensorgaugeError(f"--prometheus port must be 1-65535, got {number}")
    return (host.strip("[]") or DEFAULT_HOST), number


class PrometheusExporter:
    """An :class:`~tensorgauge.monitoring.monitor.Exporter`: a gauge per shown sampled metric
    (``tensorgauge_`` + its exported name), the GPUs, the steps and the phase."""

    def __init__(self, address: str, idle_seconds: float = IDLE_SECONDS, max_connections: int = MAX_CONNECTIONS):
        """``idle_seconds``, ``max_connections``: the endpoint's bounds (:mod:`.metrics_server`)."""
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app
        except ImportError:
            raise TensorgaugeError("--prometheus needs the [prometheus] extra: "
                                   "pip install 'tensorgauge[prometheus]'") from None
        self.host, self.port = parse_address(address)
        self.registry = CollectorRegistry()
        labels = ("job", "worker")

        def gauge(name, doc, extra=()):
            return Gauge(f"tensorgauge_{name}", doc, labels + extra, registry=self.registry)

        self.sampled = {m.name: gauge(m.exported, f"{m.label} ({m.unit})" if m.unit else m.label)
                        for m in shown_metrics()}
        self.gpu_util = gauge("gpu_utilization_percent", "GPU utilisation (NVML)", ("gpu",))
        self.gpu_memory = gauge("gpu_memory_used_bytes", "GPU memory used (NVML)", ("gpu",))
        self.gpu_job_memory = gauge("gpu_job_memory_bytes", "GPU memory the job's own processes hold (NVML)",
                                    ("gpu",))
        self.step_rate = gauge("steps_per_second", "Training steps per second over the last 5 s")
        self.step_seconds = gauge("step_seconds", "Duration of the last training step")
        self.phase = gauge("phase", "1 for the phase the job is in (label phase)", ("phase",))
        self.sample_time = gauge("sample_time_seconds", "The last sample's time, seconds from the run's start")
        self.steps = Counter("tensorgauge_steps", "Training steps so far", labels, registry=self.registry)
        self.state = LiveState()
        self.labels = {"job": "", "worker": ""}
        self._phase: str | None = None
        self._steps = 0
        # A scrape reads one sample's values, never some of the last sample's and some of the next.
        self._updating = threading.Lock()
        metrics_app = make_wsgi_app(self.registry)

        def consistent_app(environ, start_response):
            with self._updating:
                return metrics_app(environ, start_response)  # the text is made inside the call

        try:
            self.server, self.thread = serve(consistent_app, self.host, self.port,
                                              idle_seconds, max_connections)
        except OSError as exc:
            raise TensorgaugeError(f"cannot serve Prometheus metrics on {self.host}:{self.port}: "
                                   f"{exc.strerror}") from None

    def start(self, record: RunRecord) -> None:
        """Labels from the run: its job and worker (or run id)."""
        worker = (record.env.get("worker") or {}).get("worker") or record.run_id
        self.labels = {"job": record.job_id or record.name or record.run_id, "worker": worker}

    def observe(self, sample: Sample | None, events: list[Event]) -> None:
        with self._updating:
            self._observe(sample, events)

    def _observe(self, sample: Sample | None, events: list[Event]) -> None:
        self.state.update(sample, events)
        s, labels = self.state.sample, self.labels
        if s is None:
            return
        self.sample_time.labels(**labels).set(s.t)
        for name, sampled in self.sampled.items():
            value = getattr(s, name)
            if value is not None:
                sampled.labels(**labels).set(value)
        for g in s.gpus:
            if g.util_percent is not None:
                self.gpu_util.labels(**labels, gpu=str(g.index)).set(g.util_percent)
            if g.memory_used_bytes is not None:
                self.gpu_memory.labels(**labels, gpu=str(g.index)).set(g.memory_used_bytes)
            if g.job_memory_bytes is not None:
                self.gpu_job_memory.labels(**labels, gpu=str(g.index)).set(g.job_memory_bytes)
        if self.state.steps_total > self._steps:
            self.steps.labels(**labels).inc(self.state.steps_total - self._steps)
            self._steps = self.state.steps_total
        self.step_rate.labels(**labels).set(self.state.step_rate)
        if self.state.last_step_seconds is not None:
            self.step_seconds.labels(**labels).set(self.state.last_step_seconds)
        phase = self.state.phase
        if phase != self._phase:
            if self._phase is not None:
                self.phase.remove(labels["job"], labels["worker"], self._phase)
            if phase is not None:
                self.phase.labels(**labels, phase=phase).set(1)
            self._phase = phase

    def close(self, timeout: float | None = None) -> None:
        self.server.shutdown()
        self.server.server_close()
