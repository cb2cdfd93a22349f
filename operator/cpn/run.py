"""``cpn run``: the operator process (kopf, all handlers of :mod:`cpn.handlers`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import kopf


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="cpn run", description=__doc__)
    parser.add_argument(
        "--namespace",
        help="operator namespace (policy, secrets); default $CPN_NAMESPACE or cpn-system",
    )
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--log-format", choices=["plain", "json"], default="plain")
    args = parser.parse_args(list(argv))
    if args.namespace:
        os.environ["CPN_NAMESPACE"] = args.namespace
    import cpn.handlers  # noqa: F401  (registers every handler)

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[args.log_format.upper()])
    kopf.run(clusterwide=True, standalone=True)
    return 0
