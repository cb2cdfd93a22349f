"""The test bed's slow proxy answers what its upstream answers, but only after its delay."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from testbed.slowproxy import slow_proxy


class _Upstream(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"seen {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


@contextmanager
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_answer_is_the_upstreams_and_comes_after_the_delay() -> None:
    with upstream() as url, slow_proxy(url, delay_s=0.5) as proxy:
        assert proxy.url.startswith("http://127.0.0.1:")
        began = time.monotonic()
        with urllib.request.urlopen(proxy.url + "/api/v1/query?query=up", timeout=5) as answer:
            body = answer.read().decode()
        took = time.monotonic() - began
    assert body == "seen /api/v1/query?query=up"
    assert 0.5 <= took < 3.0
    assert proxy.requests == 1
