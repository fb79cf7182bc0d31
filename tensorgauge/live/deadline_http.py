"""HTTP requests that end by their deadline whatever the server does. ``requests`` bounds each wait on
the socket (the connect, each read), not the request: a server that sends its headers a byte a second,
or a body without end, holds it for ever. A :func:`deadline_session` bounds each request as a whole —
connect, headers and body — by its ``timeout`` (the connection is shut when it passes, which ends a
blocked read at once), and reads at most :data:`MAX_RESPONSE_BYTES` of a body."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

MAX_RESPONSE_BYTES = 1 << 20  # an answer to an export is a few bytes (a partial success at most)
_CHUNK_BYTES = 64 * 1024


class ResponseTooLarge(requests.exceptions.RequestException):
    """The server's answer is longer than :data:`MAX_RESPONSE_BYTES`: not read, the request failed."""


class _Deadline:
    """One request's deadline: once it passes, the connection the request is on is shut."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.passed = False
        self._connection: Any = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, connection: Any) -> None:
        """``connection`` is the one the request goes out on (shut now if the deadline has passed)."""
        with self._lock:
            self._connection = connection
            if self.passed:
                _shut(connection)

    def _expire(self) -> None:
        with self._lock:
            self.passed = True
            _shut(self._connection)

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(connection: Any) -> None:
    """Both directions of ``connection``'s socket shut: a read blocked on it in another thread returns."""
    sock = getattr(connection, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # closed already
            pass


_current = threading.local()  # the deadline of the request this thread is making


class _Watched:
    """A connection that hands itself to the current request's deadline as each request goes out on it."""

    def request(self, *args: Any, **kwargs: Any) -> Any:
        deadline: _Deadline | None = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline.watch(self)
        return super().request(*args, **kwargs)  # type: ignore[misc]


class _WatchedHTTP(_Watched, HTTPConnection):
    pass


class _WatchedHTTPS(_Watched, HTTPSConnection):
    pass


class _Pool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTP


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPS


def _watch_pools(manager: Any) -> Any:
    manager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}
    return manager


def _seconds(timeout: Any, default: float) -> float:
    """The whole request's bound from ``requests``' ``timeout`` (seconds, or (connect, read), or None)."""
    if isinstance(timeout, tuple):
        parts = [t for t in timeout if t is not None]
        return float(sum(parts)) if parts else default
    return default if timeout is None else float(timeout)


class _DeadlineAdapter(HTTPAdapter):
    def __init__(self, default_seconds: float):
        self.default_seconds = default_seconds
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        _watch_pools(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        return manager if proxy.lower().startswith("socks") else _watch_pools(manager)

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None,
             verify: Any = True, cert: Any = None, proxies: Any = None) -> requests.Response:
        """The request sent and its answer read (capped), all by the deadline; past it, a ``Timeout``."""
        deadline = _Deadline(_seconds(timeout, self.default_seconds))
        _current.deadline = deadline
        response = None
        try:
            response = super().send(request, stream=True, timeout=timeout, verify=verify, cert=cert,
                                    proxies=proxies)
            body = _read(response, deadline)
            if deadline.passed:  # cut off: what was read may parse as a whole answer, and is not one
                raise requests.exceptions.ConnectionError("the connection was shut at the deadline")
        except BaseException as error:
            if response is not None:
                response.close()
            if deadline.passed and isinstance(error, requests.exceptions.RequestException):
                raise requests.exceptions.Timeout(f"no whole answer within {deadline.seconds:g} s",
                                                  request=request) from error
            raise
        finally:
            _current.deadline = None
            deadline.cancel()
        response._content = body  # read: the caller's ``.content``
        response._content_consumed = True
        response.raw.release_conn()
        return response


def _read(response: requests.Response, deadline: _Deadline) -> bytes:
    """The body, at most :data:`MAX_RESPONSE_BYTES` of it, before the deadline."""
    body = bytearray()
    for chunk in response.iter_content(_CHUNK_BYTES):
        body += chunk
        if len(body) > MAX_RESPONSE_BYTES:
            raise ResponseTooLarge(f"an answer of more than {MAX_RESPONSE_BYTES} bytes", response=response)
        if time.monotonic() >= deadline.at:
            deadline.passed = True
            raise requests.exceptions.Timeout("the answer did not end by the deadline", response=response)
    return bytes(body)


def deadline_session(default_seconds: float) -> requests.Session:
    """A ``requests`` session whose every request ends within its ``timeout`` (or ``default_seconds``)."""
    session = requests.Session()
    adapter = _DeadlineAdapter(default_seconds)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
