"""kopf itself, for ``cpn run`` (:mod:`cpn.cli.run`): its logging, then its run loop.

Importing this module imports :mod:`cpn.handlers`, which registers every handler; so
the command line that starts the operator never imports kopf itself.
"""

from __future__ import annotations

import kopf


def configure(*, verbose: bool, log_format: str) -> None:
    """kopf's logging: ``log_format`` is ``plain``, ``json`` or ``full``."""
    kopf.configure(verbose=verbose, log_format=kopf.LogFormat[log_format.upper()])


def run(*, liveness: str | None) -> None:
    """Run every registered handler cluster-wide until the operator stops."""
    kopf.run(clusterwide=True, standalone=True, liveness_endpoint=liveness)
