"""``cpn run``: the operator process (kopf, all handlers of :mod:`cpn.handlers`).

With leader election (on by default; ``--no-leader-elect`` or
``CPN_LEADER_ELECTION=false`` turn it off) the process first waits to hold a
Lease in the operator's namespace, then runs; if it loses the Lease it exits at
once, so that at most one instance ever schedules (two replicas, or a local run
next to a deployed one), and the Deployment restarts it as a standby. On SIGTERM
it stops scheduling, then gives the Lease up so the next one starts at once.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from cpn.config import load_config

log = logging.getLogger(__name__)


#: Exit status of a replica that lost its Lease (its Deployment starts it again as a standby).
EXIT_LEADERSHIP_LOST = 3


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="cpn run", description=__doc__)
    parser.add_argument(
        "--namespace",
        help="operator namespace (policy, secrets, lease); default $CPN_NAMESPACE or cpn-system",
    )
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--log-format", choices=["plain", "json", "full"], default="plain")
    parser.add_argument(
        "--liveness",
        metavar="URL",
        help="serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz",
    )
    parser.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run only while holding the Lease cpn-operator, so one instance is active "
        "(default: on, or $CPN_LEADER_ELECTION)",
    )
    args = parser.parse_args(list(argv))
    if args.namespace:
        os.environ["CPN_NAMESPACE"] = args.namespace
    config = load_config(leader_election=args.leader_elect)
    from cpn.handlers import entry  # registers every handler

    entry.configure(verbose=args.verbose, log_format=args.log_format)
    if config.leader_election:
        # A standby answers its liveness probe while it waits, or the kubelet would
        # restart it over and over; kopf serves the same endpoint once this one leads.
        standby = _standby_health(args.liveness) if args.liveness else None
        _lead(config.namespace, config.lease_duration_s)
        if standby is not None:
            standby.shutdown()
            standby.server_close()
    entry.run(liveness=args.liveness)
    return 0


def _lead(namespace: str, duration_s: float) -> None:
    """Block until this process leads; exit the process when leadership is lost."""
    from cpn.adapters.kube import hub_client
    from cpn.adapters.lease import Lease, Renewer, acquire, install

    identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    lease = Lease(hub_client(), namespace, "cpn-operator", identity, duration_s)
    acquire(lease)

    def lost() -> None:
        log.error("leadership lost; exiting so a standby can take over")
        os._exit(EXIT_LEADERSHIP_LOST)

    renewer = Renewer(lease, lost)
    install(renewer)
    renewer.start()


def _standby_health(url: str) -> ThreadingHTTPServer:
    """Answer 200 "standby" on the liveness endpoint's address (any path) in a thread."""
    where = urlsplit(url)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"standby: waiting for the lease\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    server = ThreadingHTTPServer((where.hostname or "127.0.0.1", where.port or 80), Handler)
    threading.Thread(target=server.serve_forever, name="standby-health", daemon=True).start()
    return server
