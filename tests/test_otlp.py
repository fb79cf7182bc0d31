"""``tensorgauge run --otlp`` against an OTLP/HTTP receiver started here (decoding with
``opentelemetry-proto``): the metrics while the job runs, the run as one trace at its end, and a
Collector that is gone costing the job nothing but a count of dropped exports."""

import json
import os
import pickle
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import made_once, needs_tf

pytest.importorskip("opentelemetry.sdk", reason="the [otlp] extra is not installed")
pytest.importorskip("opentelemetry.proto", reason="opentelemetry-proto is not installed")

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (  # noqa: E402
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent
FIT_JOB = """
import keras, numpy as np
x = np.random.default_rng(0).normal(size=(512, 16)).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(x, x[:, :1], batch_size=32, epochs=3, validation_data=(x[:64], x[:64, :1]), verbose=0)
model.evaluate(x, x[:, :1], verbose=0)
"""
DECODERS = {"/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
            "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse)}


class Receiver:
    """A Collector's OTLP/HTTP side, enough for the test: each request decoded and kept with its time."""

    def __init__(self):
        self.received: list[tuple[float, str, bytes]] = []  # each request's time, path and body
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request, response = DECODERS[self.path]
                request.FromString(body)  # a request that does not decode fails here, in the handler
                receiver.received.append((time.time(), self.path, body))
                reply = response().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, path):
        return [(t, DECODERS[p][0].FromString(body)) for t, p, body in self.received if p == path]


def attributes(items) -> dict:
    values = {}
    for kv in items:
        kind = kv.value.WhichOneof("value")
        values[kv.key] = getattr(kv.value, kind) if kind else None
    return values


def tensorgauge_run(tmp_path, *options, job):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OTEL_METRIC_EXPORT_INTERVAL": "300",
           "OTEL_SERVICE_NAME": "trainer"}
    json_path = tmp_path / "run.json"
    done = subprocess.run([PY, "-m", "tensorgauge", "run", "--store", str(tmp_path / "runs.db"), "--json",
                           str(json_path), *options, "--", PY, "-c", job], env=env, capture_output=True, text=True,
                          timeout=300)
    return done, json.loads(json_path.read_text())


def show(tmp_path, *options) -> str:
    """``tensorgauge show last`` of the store in ``tmp_path``, read after the run ended."""
    return subprocess.run([PY, "-m", "tensorgauge", "show", "last", "--store", str(tmp_path / "runs.db"), *options],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          check=True).stdout


class Received:
    """What a :class:`Receiver` was sent, read back from a file."""

    def __init__(self, url: str, received: list):
        self.url, self.received = url, received

    of = Receiver.of


def _fit_under_otlp(folder: Path) -> None:
    receiver = Receiver()
    done, report = tensorgauge_run(folder, "--otlp", receiver.url, job=FIT_JOB)
    receiver.server.shutdown()
    assert done.returncode == 0, done.stderr[-2000:]
    (folder / "fit_run.pickle").write_bytes(pickle.dumps((receiver.url, receiver.received, report,
                                                          json.loads(show(folder, "--json")), done.stderr)))


@pytest.fixture(scope="module")
def fit_run(tmp_path_factory):
    """One small real Keras job under ``--otlp`` for the whole module (:func:`made_once`)."""
    folder = made_once(tmp_path_factory, "otlp-fit", _fit_under_otlp)
    url, received, report, shown, stderr = pickle.loads((folder / "fit_run.pickle").read_bytes())
    return Received(url, received), report, shown, stderr


def spans_of(receiver):
    traces = receiver.of("/v1/traces")
    assert len(traces) == 1  # one trace, at the end
    request = traces[0][1]
    [resource_spans] = request.resource_spans
    spans = [s for scope in resource_spans.scope_spans for s in scope.spans]
    return attributes(resource_spans.resource.attributes), spans


@needs_tf
@pytest.mark.tf
def test_the_metrics_arrive_while_the_job_runs(fit_run):
    receiver, report, shown, stderr = fit_run
    from datetime import datetime

    job_end = datetime.fromisoformat(report["started_at"]).timestamp() + report["wall_seconds"]
    metrics = receiver.of("/v1/metrics")
    early = [request for t, request in metrics if t < job_end]
    assert early, f"no metrics before the job's end ({len(metrics)} in all)"
    names = {m.name for request in early for rm in request.resource_metrics for sm in rm.scope_metrics
             for m in sm.metrics}
    assert {"tensorgauge.rss_bytes", "tensorgauge.cores_busy", "tensorgauge.threads"} <= names
    assert f"OpenTelemetry metrics and trace to {receiver.url}" in stderr
    assert report["exports"] == shown["exports"] == {"otlp": {"dropped": 0}}


@needs_tf
@pytest.mark.tf
def test_the_trace_is_the_run_its_phases_and_findings(fit_run):
    receiver, report, shown, _ = fit_run
    resource, spans = spans_of(receiver)
    assert resource["tensorgauge.run_id"] == shown["run_id"] and resource["service.instance.id"] == shown["run_id"]
    assert resource["service.name"] == "trainer" and resource["host.name"]
    [root] = [s for s in spans if not s.parent_span_id]
    assert root.name == f"run {shown['run_id']}"
    by_id = {s.span_id: s for s in spans}
    [fit] = [s for s in spans if s.parent_span_id == root.span_id and s.name == "fit"]
    epochs = sorted((s for s in spans if s.parent_span_id == fit.span_id), key=lambda s: s.start_time_unix_nano)
    assert [s.name for s in epochs] == ["epoch 1", "epoch 2", "epoch 3"]
    assert all(any(c.parent_span_id == e.span_id and c.name.startswith("validation") for c in spans) for e in epochs)
    # Every phase of `show --json` is a span under its parent, with the same figures.
    assert len(spans) == 1 + len(shown["phases"])
    for phase in shown["phases"]:
        [span] = [s for s in spans if s.name == phase["name"]
                  and abs(s.start_time_unix_nano - spans_start(shown, phase)) < 2_000]
        parent = by_id[span.parent_span_id]
        assert parent.name == (shown["phases"][phase["parent"]]["name"] if phase["parent"] is not None else root.name)
        figures = attributes(span.attributes)
        for key in ("cpu_seconds", "rss_peak_bytes", "steps", "step_seconds_p50", "cores_busy_mean"):
            assert figures.get(f"tensorgauge.{key}") == phase[key], (phase["name"], key)
    assert [e.name for e in root.events] == [f["id"] for f in shown["findings"]]
    for event, finding in zip(root.events, shown["findings"]):
        assert attributes(event.attributes)["tensorgauge.severity"] == finding["severity"]


def spans_start(shown, phase) -> int:
    from datetime import datetime

    return int((datetime.fromisoformat(shown["started_at"]).timestamp() + phase["start"]) * 1e9)


def test_with_the_collector_gone_the_job_ends_as_it_would_and_the_drops_are_told(tmp_path):
    receiver = Receiver()  # started and stopped: a port nothing listens on any more
    receiver.server.shutdown()
    receiver.server.server_close()
    job = "import time; time.sleep(1.0); raise SystemExit(3)"
    done, report = tensorgauge_run(tmp_path, "--no-hook", "--otlp", receiver.url, job=job)
    assert done.returncode == 3
    dropped = report["exports"]["otlp"]["dropped"]
    assert dropped >= 2  # metrics while it ran and at the end, and the trace
    assert f"otlp: {dropped} export(s) dropped" in done.stderr
    assert "Traceback" not in done.stderr
    # Kept with the run: `show` says it once the run has ended, beside the job's own exit code.
    shown = json.loads(show(tmp_path, "--json"))
    assert shown["exports"] == {"otlp": {"dropped": dropped}} and shown["exit_code"] == 3
    assert f"exports dropped (nothing took them; the job was not held up): otlp {dropped}" in show(tmp_path)
    bare, bare_report = tensorgauge_run(tmp_path, "--no-hook", job=job)
    assert bare.returncode == 3 and bare_report["exports"] is None
    assert json.loads(show(tmp_path, "--json"))["exports"] is None and "exports dropped" not in show(tmp_path)
