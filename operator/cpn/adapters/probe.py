"""Active health of a member: its API server asked ``GET /readyz`` on a schedule of its own.

Watches tell little about a server that hangs (stopped, overloaded, a black-holed link):
it keeps their connections open and sends nothing, which looks like a quiet cluster. A
:class:`Prober` asks every ``period_s``, on its own thread and its own connection (never
queued behind the member's other requests), with a ``timeout_s`` deadline and no retry,
and hands each result to a callback as a core :class:`~cpn.core.health.Probe`, which
:func:`cpn.core.health.health` turns into a verdict. ``/readyz`` is readable by any
client (the ``system:public-info-viewer`` role) and fails while the server shuts down or
loses its etcd, which a list served from the watch cache would not show.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import urllib3
from kubernetes import client

from cpn.adapters.kube import client_without_retries, error_line
from cpn.core.health import Probe

log = logging.getLogger(__name__)

#: Seconds between probes of one member (from one probe's start to the next's).
PROBE_PERIOD_S = 2.0
#: Seconds a probe waits for its answer (connect, TLS and reply together).
PROBE_TIMEOUT_S = 2.0
#: Slack on top of period + timeout before a missing result counts as a miss.
OVERDUE_SLACK_S = 2.0

#: (member name, result)
ProbeFn = Callable[[str, Probe], None]


class Prober(threading.Thread):
    """Probe one member's API server until stopped (a daemon thread: ``start()`` it)."""

    def __init__(
        self,
        name: str,
        api: client.ApiClient,
        on_result: ProbeFn,
        *,
        period_s: float = PROBE_PERIOD_S,
        timeout_s: float = PROBE_TIMEOUT_S,
    ) -> None:
        super().__init__(name=f"probe-{name}", daemon=True)
        self.member = name
        # No retry: a retry would double the time a hung server takes to count as a miss.
        self._api = client_without_retries(api)
        self._on_result = on_result
        self.period_s = period_s
        self.timeout_s = timeout_s
        #: A result comes at least this often; none for longer is a miss (core.health).
        self.overdue_s = period_s + timeout_s + OVERDUE_SLACK_S
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()

    def probe(self) -> Probe:
        """Ask once: ok when ``/readyz`` answers 200 within the timeout."""
        sent = time.monotonic()
        try:
            params = self._api.param_serialize(
                method="GET",
                resource_path="/readyz",
                header_params={"Accept": "text/plain"},
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(*params, _request_timeout=self.timeout_s)
            body = response.read() or b""
        except urllib3.exceptions.NewConnectionError as err:  # refused (a TimeoutError too)
            return Probe(False, sent, f"GET /readyz: {str(err).split(': ', 1)[-1]}")
        except urllib3.exceptions.TimeoutError as err:  # connect or read: said the same way
            error = f"GET /readyz: no answer in {self.timeout_s:g}s ({type(err).__name__})"
            return Probe(False, sent, error)
        except Exception as err:  # noqa: BLE001 - refused, TLS...: a failed probe, reported
            return Probe(False, sent, f"GET /readyz: {error_line(err)}")
        if response.status == 200:
            return Probe(True, sent)
        return Probe(False, sent, f"GET /readyz: HTTP {response.status} {failed_checks(body)}")

    def run(self) -> None:
        while not self._stopped.is_set():
            result = self.probe()
            if self._stopped.is_set():
                return
            if not result.ok:
                log.debug("member %s probe failed: %s", self.member, result.error)
            self._on_result(self.member, result)
            self._stopped.wait(max(0.0, result.at_s + self.period_s - time.monotonic()))


def failed_checks(body: bytes) -> str:
    """The checks ``/readyz`` says failed (its lines ``[-]etcd failed: ...``), or its text."""
    text = body.decode(errors="replace")
    failed = [line[3:].split(" ", 1)[0] for line in text.splitlines() if line.startswith("[-]")]
    if failed:
        return "failed checks: " + ", ".join(failed)
    return " ".join(text.split())[:200]
