"""A slow HTTP proxy for fault tests: a server that answers, but late.

:func:`slow_proxy` serves on ``127.0.0.1`` (a free port) and answers every GET with what
``upstream`` answers for the same path and query, after holding the request ``delay_s``
seconds. Put its URL where a client expects a Prometheus to see how the client copes
with a server that is slow rather than down (a down server refuses at once).
"""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    server: _SlowServer

    def do_GET(self) -> None:
        self.server.requests += 1
        # Hold the request, but let the server stop in the meantime.
        self.server.stopping.wait(self.server.delay_s)
        try:
            with urllib.request.urlopen(self.server.upstream + self.path, timeout=30) as answer:
                status, body = answer.status, answer.read()
                kind = answer.headers.get("Content-Type", "application/json")
        except urllib.error.HTTPError as err:
            status, body, kind = err.code, err.read(), "text/plain"
        except OSError as err:
            status, body, kind = 502, str(err).encode(), "text/plain"
        headers = {"Content-Type": kind, "Content-Length": str(len(body))}
        with contextlib.suppress(OSError):  # the client gave up waiting: nothing to say
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


class _SlowServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, delay_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream.rstrip("/")
        self.delay_s = delay_s
        self.requests = 0
        self.stopping = threading.Event()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


@contextlib.contextmanager
def slow_proxy(upstream: str, delay_s: float) -> Iterator[_SlowServer]:
    """A proxy to ``upstream`` that answers each request ``delay_s`` late, for the body of
    the ``with``; its ``url`` and ``requests`` (how many it got)."""
    server = _SlowServer(upstream, delay_s)
    thread = threading.Thread(target=server.serve_forever, name="slow-proxy", daemon=True)
    thread.start()
    began = time.monotonic()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=max(5.0, delay_s - (time.monotonic() - began)))
