"""``tensorgauge run --otlp [URL]``: the run in OpenTelemetry, over OTLP/HTTP with the official SDK
(the ``[otlp]`` extra, imported only here). While the job runs, every shown sampled metric
(:func:`~tensorgauge.model.shown_metrics`), the GPUs and the steps, as gauges read at each periodic
export; at its end one trace: a span for the run, one per phase (nested as the phases are), with
the phase's figures as attributes and each finding as an event of the run's span.

Resource attributes name the run, the host, and the job and worker (``TF_CONFIG``): a multi-worker
job's traces join on ``tensorgauge.job``. A Collector that is gone, or slow, never holds the job or
the run's end up: the metrics are exported on the SDK's own thread, every export ends within
:data:`EXPORT_TIMEOUT_SECONDS` in all whatever the Collector sends (:mod:`.deadline_http`), nothing
queues up (the reader keeps only the current values; the trace is one export), and what was lost is
counted in :attr:`OtlpExporter.dropped`. The Collector's URL is shown with its secrets masked (a user
part, query values), and so are the values of headers the SDK warns about (``OTEL_EXPORTER_OTLP_HEADERS``)."""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tensorgauge.errors import TensorgaugeError
from tensorgauge.live.state import LiveState
from tensorgauge.model import Event, RunRecord, Sample, shown_metrics
from tensorgauge.redaction import UrlSecrets, redact_headers

DEFAULT_URL = "http://127.0.0.1:4318"
EXPORT_TIMEOUT_SECONDS = 2.0  # one export's bound, its retries included
METRIC_INTERVAL_SECONDS = 5.0  # between metric exports, unless OTEL_METRIC_EXPORT_INTERVAL (ms) says
PREFIX = "tensorgauge."
# The SDK's exporters log each failed export; what was lost is told once, at the run's end, as a count.
_QUIET_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk.metrics._internal.export")
_HEADERS_LOGGER = "opentelemetry.util.re"  # warns of each malformed OTEL_EXPORTER_OTLP_HEADERS entry, value and all
URL_SECRETS = UrlSecrets()  # a Collector's user part may be a token, and any query value may be one


def base_url(url: str | None) -> str:
    """The Collector's base URL: ``url``, else ``$OTEL_EXPORTER_OTLP_ENDPOINT``, else :data:`DEFAULT_URL`."""
    text = url or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_URL
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise TensorgaugeError(f"--otlp wants a Collector's URL such as {DEFAULT_URL}, got "
                               f"{URL_SECRETS.redact(text)!r}")
    return text.rstrip("/")


def endpoint(base: str, signal_path: str) -> str:
    """The URL a signal goes to: ``signal_path`` (``v1/metrics``) after the base URL's path, its query kept."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{signal_path}"))


class _MaskedHeaders(logging.Filter):
    """The SDK's warning about a malformed header, with the header's value masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_headers(a) if isinstance(a, str) else a for a in record.args)
        return True


def _mask_header_warnings() -> None:
    logger = logging.getLogger(_HEADERS_LOGGER)
    if not any(isinstance(f, _MaskedHeaders) for f in logger.filters):
        logger.addFilter(_MaskedHeaders())


def _interval_millis() -> float:
    try:
        return float(os.environ["OTEL_METRIC_EXPORT_INTERVAL"])
    except (KeyError, ValueError):
        return METRIC_INTERVAL_SECONDS * 1000


def _seconds_since_epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _attributes(values: dict[str, Any]) -> dict[str, Any]:
    """Only what OTLP carries as attribute values (None and nested objects left out)."""
    return {f"{PREFIX}{k}": v for k, v in values.items() if isinstance(v, (str, bool, int, float))}


class OtlpExporter:
    """An :class:`~tensorgauge.monitoring.monitor.Exporter` to an OpenTelemetry Collector."""

    def __init__(self, url: str | None = None, timeout_seconds: float = EXPORT_TIMEOUT_SECONDS):
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise TensorgaugeError("--otlp needs the [otlp] extra: pip install 'tensorgauge[otlp]'") from None
        from tensorgauge.live.deadline_http import deadline_session

        self.base_url = base_url(url)
        self.shown_url = URL_SECRETS.redact(self.base_url)  # what messages say
        self.timeout_seconds = timeout_seconds
        _mask_header_warnings()  # before the exporters read the headers
        self._metric_exporter = OTLPMetricExporter(endpoint=endpoint(self.base_url, "v1/metrics"),
                                                   timeout=timeout_seconds, session=deadline_session(timeout_seconds))
        self._span_exporter = OTLPSpanExporter(endpoint=endpoint(self.base_url, "v1/traces"), timeout=timeout_seconds,
                                               session=deadline_session(timeout_seconds))
        self.count = ExportCount()
        self.record: RunRecord | None = None
        self.state = LiveState()  # the last sample, the steps so far
        self._provider: Any = None
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)

    @property
    def sent(self) -> int:
        """Exports the Collector took."""
        return self.count.sent

    @property
    def dropped(self) -> int:
        """Exports that failed, and those still under way when it was closed."""
        return self.count.dropped

    def resource(self, record: RunRecord) -> Any:
        from opentelemetry.sdk.resources import Resource

        worker = record.env.get("worker") or {}
        host = record.env.get("host") or {}
        values = {"service.name": os.environ.get("OTEL_SERVICE_NAME") or "tensorgauge",
                  "service.instance.id": record.run_id, "host.name": host.get("hostname") or "",
                  f"{PREFIX}run_id": record.run_id, f"{PREFIX}run_name": record.name or "",
                  f"{PREFIX}job": record.job_id or "", f"{PREFIX}worker": worker.get("worker") or record.run_id}
        return Resource.create({k: v for k, v in values.items() if v})  # an empty name, job: left out

    def start(self, record: RunRecord) -> None:
        """The metrics' provider, with the run's resource; its reader exports on a thread of its own."""
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        self.record = record
        reader = PeriodicExportingMetricReader(_counted(self._metric_exporter, self.count),
                                               export_interval_millis=_interval_millis(),
                                               export_timeout_millis=self.timeout_seconds * 1000)
        self._provider = MeterProvider(resource=self.resource(record), metric_readers=[reader])
        self._gauges(self._provider.get_meter("tensorgauge"))

    def _gauges(self, meter: Any) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation

        def sampled(name: str):
            def read(options: CallbackOptions):
                value = getattr(self.state.sample, name, None) if self.state.sample is not None else None
                return [] if value is None else [Observation(value)]
            return read

        def gpus(field: str):
            def read(options: CallbackOptions):
                found = self.state.sample.gpus if self.state.sample is not None else []
                return [Observation(getattr(g, field), {"gpu": g.index}) for g in found
                        if getattr(g, field) is not None]
            return read

        for m in shown_metrics():
            meter.create_observable_gauge(f"{PREFIX}{m.exported}", [sampled(m.name)], unit=m.unit or "",
                                          description=m.label)
        meter.create_observable_gauge(f"{PREFIX}gpu_utilization_percent", [gpus("util_percent")], unit="percent")
        meter.create_observable_gauge(f"{PREFIX}gpu_memory_used_bytes", [gpus("memory_used_bytes")], unit="bytes")
        meter.create_observable_counter(f"{PREFIX}steps", [lambda options: [Observation(self.state.steps_total)]],
                                        description="training steps so far")

    def observe(self, sample: Sample | None, events: list[Event]) -> None:
        self.state.update(sample, events)

    def conclude(self, report: dict) -> None:
        """The run's trace, exported once (bounded like any export)."""
        if self.record is None:
            return
        spans = trace_spans(report, self.resource(self.record))
        self.count.started()
        self.count.ended(self._span_exporter.export(spans).name == "SUCCESS")

    def close(self, timeout: float | None = None) -> None:
        """The last metrics exported (within ``timeout``), the exporters shut, the count closed."""
        if self._provider is not None:
            bound = min(timeout, self.timeout_seconds) if timeout is not None else self.timeout_seconds
            self._provider.shutdown(timeout_millis=bound * 1000)
            self._provider = None
        self._span_exporter.shutdown()
        self.count.close()


class ExportCount:
    """Exports taken and dropped. Once closed (the run's count is told and stored), an export still under
    way is dropped, and its outcome, come later, is not counted."""

    def __init__(self) -> None:
        self.sent = self.dropped = 0
        self._under_way = 0
        self._closed = False
        self._lock = threading.Lock()

    def started(self) -> None:
        with self._lock:
            self._under_way += 1

    def ended(self, ok: bool) -> None:
        with self._lock:
            self._under_way -= 1
            if self._closed:
                return
            if ok:
                self.sent += 1
            else:
                self.dropped += 1

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self.dropped += self._under_way
                self._closed = True


def _counted(inner: Any, count: ExportCount) -> Any:
    """``inner`` (a MetricExporter), each export counted in ``count``."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class Counted(MetricExporter):
        def __init__(self) -> None:
            super().__init__(preferred_temporality=inner._preferred_temporality,
                             preferred_aggregation=inner._preferred_aggregation)

        def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
            count.started()
            result = MetricExportResult.FAILURE
            try:
                result = inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            finally:
                count.ended(result == MetricExportResult.SUCCESS)
            return result

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return inner.force_flush(timeout_millis)

        def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
            inner.shutdown(timeout_millis=timeout_millis, **kwargs)

    return Counted()


def trace_spans(report: dict, resource: Any) -> list:
    """The run (a ``tensorgauge.run/1`` document) as finished SDK spans: the run's, then a span per phase
    under its parent phase's (or the run's), at the run's wall-clock times; findings as the run's events."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    class Keep(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list = []

        def on_end(self, span) -> None:
            self.spans.append(span)

    keep = Keep()
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(keep)
    tracer = provider.get_tracer("tensorgauge")
    t0 = _seconds_since_epoch(report["started_at"])
    end = t0 + (report.get("wall_seconds") or 0.0)
    summary = report.get("summary") or {}
    root = tracer.start_span(f"run {report.get('name') or report['run_id']}", start_time=_ns(t0),
                             attributes=_attributes({"run_id": report["run_id"], "exit_code": report.get("exit_code"),
                                                     "signal": report.get("signal"),
                                                     "command": " ".join(report.get("command") or []),
                                                     "wall_seconds": report.get("wall_seconds"), **summary}))
    opened: list = []
    for phase in report.get("phases") or []:
        parent = opened[phase["parent"]] if phase.get("parent") is not None else root
        figures = {k: phase.get(k) for k in ("kind", "cpu_seconds", "cores_busy_mean", "cores_busy_peak",
                                             "rss_peak_bytes", "steps", "step_seconds_p50")}
        opened.append(tracer.start_span(phase["name"], context=trace.set_span_in_context(parent),
                                        start_time=_ns(t0 + phase["start"]), attributes=_attributes(figures)))
    for finding in report.get("findings") or []:
        values = {k: finding.get(k) for k in ("severity", "title", "fix", "expected_gain")}
        evidence = {f"evidence.{k}": v for k, v in (finding.get("evidence") or {}).items()}
        root.add_event(finding["id"], _attributes({**values, **evidence}), timestamp=_ns(end))
    for span, phase in reversed(list(zip(opened, report.get("phases") or []))):
        span.end(end_time=_ns(t0 + phase["end"]))
    root.end(end_time=_ns(end))
    return keep.spans
