"""``cpn run``: the operator process (kopf, all handlers of :mod:`cpn.handlers`).

With leader election on (``--leader-elect`` or ``CPN_LEADER_ELECTION=true``) the
process first waits to hold a Lease in the operator's namespace, then runs;
if it loses the Lease it exits at once, so that at most one replica ever
schedules, and the Deployment restarts it as a standby.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import uuid
from collections.abc import Sequence

import kopf

from cpn.config import load_config

log = logging.getLogger(__name__)


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
        action="store_true",
        default=None,
        help="run only while holding the Lease (two replicas, one active)",
    )
    args = parser.parse_args(list(argv))
    if args.namespace:
        os.environ["CPN_NAMESPACE"] = args.namespace
    config = load_config(leader_election=args.leader_elect)
    import cpn.handlers  # noqa: F401  (registers every handler)

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[args.log_format.upper()])
    if config.leader_election:
        _lead(config.namespace, config.lease_duration_s)
    kopf.run(clusterwide=True, standalone=True, liveness_endpoint=args.liveness)
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
        os._exit(3)

    renewer = Renewer(lease, lost)
    install(renewer)
    renewer.start()
