"""The HTTP endpoint ``--prometheus`` serves: prometheus_client's WSGI app behind a server that idle
connections cannot fill.

prometheus_client's own server gives every connection a thread that waits for its request for ever:
each idle connection holds a thread, and once the process may start no more (a task limit: a
container's, a cgroup's ``pids.max``), every scrape is refused. Here a connection has
``idle_seconds`` to send its request and read the answer, and at most ``max_connections`` are
served at once: one more drops the one that has waited longest.
"""

from __future__ import annotations

import socket
import threading
from collections import OrderedDict
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

IDLE_SECONDS = 5.0  # a scraper sends its request at once; Prometheus' own scrape timeout is 10 s
MAX_CONNECTIONS = 16  # served at once (a thread each)


class _QuietHandler(WSGIRequestHandler):
    """No access log on the run's stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _BoundedServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # never holds the run's end up
    request_queue_size = 64  # a burst of connections waits to be accepted (5, the default, drops some for 1 s)
    max_connections = MAX_CONNECTIONS

    def __init__(self, *args: Any, **kwargs: Any):
        self._open: OrderedDict[int, socket.socket] = OrderedDict()  # by id, oldest first
        self._lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            while len(self._open) >= self.max_connections:
                _, oldest = self._open.popitem(last=False)
                _drop(oldest)  # its thread reads an end of file and finishes
            self._open[id(request)] = request
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._open.pop(id(request), None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that timed out or was dropped (or no thread for it): closed, no traceback on stderr."""


def _drop(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def serve(app: Any, host: str, port: int, idle_seconds: float = IDLE_SECONDS,
          max_connections: int = MAX_CONNECTIONS) -> tuple[WSGIServer, threading.Thread]:
    """``app`` served on ``host:port`` (IPv4 or IPv6) from a daemon thread; OSError if the port cannot be had."""
    family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    handler = type("Handler", (_QuietHandler,), {"timeout": idle_seconds})
    server_class = type("Server", (_BoundedServer,), {"address_family": family, "max_connections": max_connections})
    server = server_class((sockaddr[0], port), handler)
    server.set_app(app)
    thread = threading.Thread(target=server.serve_forever, name="tensorgauge-prometheus", daemon=True)
    thread.start()
    return server, thread
