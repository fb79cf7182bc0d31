"""``tensorgauge run --otlp`` against hostile or careless Collectors, on real processes: one that sends
its answer's headers a byte a second, or a body without end, costs the run's end no more than the
exports' bound (the exports it took are counted as dropped, with the run), and a Collector's URL or
headers with secrets in them are never printed or stored."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otlp] extra is not installed")

from tensorgauge.live.otlp import EXPORT_TIMEOUT_SECONDS, URL_SECRETS, endpoint  # noqa: E402

PY = sys.executable
# After the job's end: the trace's export and the last metrics' one (each within its bound), and the
# analysis; the margin is for a slow, busy machine (a healthy Collector costs well under a second here).
HELD_BOUND_SECONDS = 2 * EXPORT_TIMEOUT_SECONDS + 20.0
JOB = "import pathlib, time; time.sleep(1.0); pathlib.Path(ENDED).write_text(repr(time.time()))"


class HostileCollector:
    """A TCP server on 127.0.0.1 that takes each request and answers it as ``answer(connection, stop)``
    does, on a thread per connection, until :meth:`close`."""

    def __init__(self, answer):
        self.answer, self.stop = answer, threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection):
        with connection:
            connection.settimeout(5)
            try:
                connection.recv(1 << 20)  # the request (headers and a small body): not looked at
                self.answer(connection, self.stop)
            except OSError:  # the client gave up: what the test wants
                pass

    def close(self):
        self.stop.set()
        self.listener.close()


def headers_a_byte_a_second(connection, stop):
    connection.sendall(b"HTTP/1.1 200 OK\r\n")
    while not stop.wait(1.0):
        connection.sendall(b"x")


def an_endless_body(connection, stop):
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
                       b"Content-Length: 1099511627776\r\n\r\n")
    while not stop.wait(0.05):
        connection.sendall(b"\0" * 65536)


def a_body_a_byte_a_second(connection, stop):
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
    while not stop.wait(1.0):
        connection.sendall(b"\0")


def run_under_otlp(tg_cmd, tmp_path, url, timeout, env=None):
    """``tensorgauge run --otlp URL`` of a 1 s job: (the process, its stderr, seconds from the job's end to
    the command's return; None where it had not returned within ``timeout`` and was killed)."""
    ended = tmp_path / "ended"
    command = [*tg_cmd, "run", "--no-hook", "--otlp", url, "--", PY, "-c", JOB.replace("ENDED", repr(str(ended)))]
    monitor = subprocess.Popen(command, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OTEL_METRIC_EXPORT_INTERVAL": "300", **(env or {})})
    try:
        _, stderr = monitor.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        monitor.kill()
        _, stderr = monitor.communicate()
        return monitor, stderr, None
    returned = time.time()
    return monitor, stderr, returned - float(ended.read_text())


def shown(tg_cmd) -> dict:
    return json.loads(subprocess.run([*tg_cmd, "show", "last", "--json"], capture_output=True, text=True,
                                     check=True).stdout)


@pytest.mark.parametrize("answer", [headers_a_byte_a_second, an_endless_body, a_body_a_byte_a_second])
def test_a_slow_collector_holds_the_run_no_longer_than_the_exports_bound(store_path, tg_cmd, tmp_path, answer):
    """The job's end to the command's return: within the exports' bound (and a margin), whatever the
    Collector sends; each export it held is counted as dropped, kept with the run."""
    collector = HostileCollector(answer)
    try:
        monitor, stderr, held = run_under_otlp(tg_cmd, tmp_path, collector.url, timeout=HELD_BOUND_SECONDS + 30)
    finally:
        collector.close()
    assert held is not None, f"still running {HELD_BOUND_SECONDS + 30:g} s after it started\n{stderr[-2000:]}"
    assert held < HELD_BOUND_SECONDS, f"run returned {held:.1f} s after the job's end\n{stderr[-2000:]}"
    assert monitor.returncode == 0 and "Traceback" not in stderr
    assert collector.connections >= 1  # it was asked: the exports were held, not skipped
    dropped = shown(tg_cmd)["exports"]["otlp"]["dropped"]
    assert dropped >= 2  # the trace, and a metrics export begun while the job ran (failed, or cut at close)
    assert f"otlp: {dropped} export(s) dropped" in stderr


class Keeper(ThreadingHTTPServer):
    """A Collector that takes every export and keeps each request's path and Authorization header."""

    def __init__(self):
        self.requests: list[tuple[str, str | None]] = []
        keeper = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                keeper.requests.append((self.path, self.headers.get("Authorization")))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_a_collectors_secrets_are_sent_to_it_and_never_shown_or_stored(store_path, tg_cmd, tmp_path):
    """A user part and a query token in --otlp, and a header the SDK finds malformed: the Collector gets
    them (basic auth, the query on each signal's path); stderr, ``show`` and the store never hold them."""
    keeper = Keeper()
    port = keeper.server_address[1]
    try:
        monitor, stderr, _ = run_under_otlp(tg_cmd, tmp_path, f"http://tg-user:hunter22@127.0.0.1:{port}/?token=tok3n99",
                                            timeout=120, env={"OTEL_EXPORTER_OTLP_HEADERS": "x-key=s3cr3tkey oops;x"})
    finally:
        keeper.shutdown()
    assert monitor.returncode == 0, stderr[-2000:]
    assert f"OpenTelemetry metrics and trace to http://***@127.0.0.1:{port}/?token=*** (OTLP/HTTP)" in stderr
    assert "x-key=***" in stderr  # the SDK's warning of the header it left out, its value masked
    paths = {path for path, _ in keeper.requests}
    assert {"/v1/metrics?token=tok3n99", "/v1/traces?token=tok3n99"} <= paths
    assert {auth for _, auth in keeper.requests} == {"Basic dGctdXNlcjpodW50ZXIyMg=="}  # tg-user:hunter22
    said = stderr + json.dumps(shown(tg_cmd)) + subprocess.run([*tg_cmd, "show", "last"], capture_output=True,
                                                             text=True).stdout
    stored = b"".join(p.read_bytes() for p in store_path.parent.iterdir() if p.is_file())
    for secret in ("tg-user", "hunter22", "tok3n99", "s3cr3tkey"):
        assert secret not in said and secret.encode() not in stored


def test_a_bad_collector_url_is_refused_with_its_secrets_masked(tg_cmd, store_path):
    done = subprocess.run([*tg_cmd, "run", "--otlp", "ftp://tg-user:hunter22@h/?token=tok3n99", "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "tensorgauge: --otlp wants a Collector's URL such as http://127.0.0.1:4318, got 'ftp://***@h/?token=***'"]


@pytest.mark.parametrize(("url", "masked"), [
    ("http://apikey1234@collector:4318", "http://***@collector:4318"),
    ("https://u:p%40ss:word@collector/?token=a1b2c3&tenant=t9", "https://***@collector/?token=***&tenant=***"),
    ("http://collector:4318/otlp", "http://collector:4318/otlp"),
])
def test_a_collector_url_is_masked_as_a_store_url_is(url, masked):
    assert URL_SECRETS.redact(url) == masked


def test_each_signal_goes_under_the_base_urls_path_with_its_query():
    assert endpoint("http://c:4318", "v1/traces") == "http://c:4318/v1/traces"
    assert endpoint("https://c/otlp/?token=t", "v1/metrics") == "https://c/otlp/v1/metrics?token=t"
