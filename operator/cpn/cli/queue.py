"""``cpn queue``: the queue across all member clusters, as a researcher reads it.

One row per AIJob that has not finished: position, job, user, group, GPUs,
predicted runtime, ETA, phase and the reason it waits (or where it runs).
Reads the AIJobs' status from the hub, so it shows exactly what the operator
wrote; ``-o json|yaml`` for scripts. The kubeconfig context's namespace unless
``-n NAMESPACE`` or ``-A`` (every namespace), as kubectl.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from cpn.api import constants as k

COLUMNS = (
    "POSITION",
    "AIJOB",
    "USER",
    "GROUP",
    "GPUS",
    "PREDICTED",
    "ETA",
    "LIKELY-START",
    "PHASE",
    "REASON",
)


def rows_from(
    items: Sequence[Mapping[str, Any]], *, queue: str | None = None, include_finished: bool = False
) -> list[dict[str, Any]]:
    """Queue rows, waiting jobs first by position, then running ones."""
    rows = []
    for item in items:
        status = item.get("status") or {}
        phase = status.get("phase", "")
        if phase in k.FINISHED_PHASES and not include_finished:
            continue
        if queue and status.get("queue") != queue:
            continue
        meta = item.get("metadata") or {}
        where = status.get("cluster")
        rows.append(
            {
                "position": status.get("position"),
                "aijob": f"{meta.get('namespace')}/{meta.get('name')}",
                "queue": status.get("queue", ""),
                "user": status.get("user", ""),
                "group": status.get("group", ""),
                "gpus": status.get("gpus"),
                "predicted": status.get("predicted", ""),
                "eta": status.get("eta", ""),
                "estimatedStart": status.get("estimatedStart"),
                "estimatedStartRange": status.get("estimatedStartRange"),
                "phase": phase,
                "cluster": where,
                "gpuType": status.get("gpuType"),
                "reason": status.get("reason", ""),
                "message": status.get("message", ""),
            }
        )
    waiting = [r for r in rows if r["phase"] in {k.PHASE_QUEUED, k.PHASE_SUSPENDED, ""}]
    others = [r for r in rows if r not in waiting]
    waiting.sort(key=lambda r: (r["position"] is None, r["position"] or 0, r["aijob"]))
    others.sort(key=lambda r: (r["phase"], r["aijob"]))
    return waiting + others


def _span(span: Mapping[str, str] | None) -> str:
    """A start range as clock times: "14:05:00Z-15:30:00Z", or "by 15:30:00Z"."""
    if not span or "latest" not in span:
        return ""
    latest = span["latest"][11:]
    return f"{span['earliest'][11:]}-{latest}" if "earliest" in span else f"by {latest}"


def render_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A terminal table; the REASON column carries the one-line message."""
    cells = []
    for row in rows:
        reason = row["message"] or row["reason"]
        cells.append(
            [
                str(row["position"] or ""),
                row["aijob"],
                row["user"],
                row["group"],
                f"{row['gpus']:g}" if isinstance(row["gpus"], int | float) else "",
                row["predicted"],
                row["eta"],
                _span(row["estimatedStartRange"]),
                row["phase"],
                reason[:80],
            ]
        )
    widths = [max(len(c[i]) for c in [list(COLUMNS), *cells]) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
        for line in [list(COLUMNS), *cells]
    ]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="cpn queue", description=__doc__)
    parser.add_argument("--queue", help="only this queue")
    parser.add_argument(
        "-n", "--namespace", help="this namespace (default: the kubeconfig context's, as kubectl)"
    )
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    parser.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")
    parser.add_argument("--all", action="store_true", help="include finished jobs")
    parser.add_argument("--kubeconfig", help="the hub's kubeconfig (default: as kubectl)")
    args = parser.parse_args(list(argv))
    from cpn.adapters.hubcli import on_hub

    return on_hub("cpn queue", lambda: _show(args))


def _show(args: argparse.Namespace) -> int:
    from cpn.adapters.hubcli import HubAnswer, hub_api, hub_namespace, list_aijobs

    api = hub_api(args.kubeconfig)
    namespace = None if args.all_namespaces else args.namespace or hub_namespace(args.kubeconfig)
    try:
        items = list_aijobs(api, namespace)
    except HubAnswer as err:
        if err.status != 403:
            raise
        where = f"namespace {namespace}" if namespace else "all namespaces"
        hint = "" if namespace else "; try -n NAMESPACE for one you may read"
        print(f"cpn queue: you may not list AIJobs in {where}{hint}", file=sys.stderr)
        return 1
    rows = rows_from(items, queue=args.queue, include_finished=args.all)
    if args.output == "json":
        print(json.dumps(rows, indent=1))
    elif args.output == "yaml":
        print(yaml.safe_dump(rows, sort_keys=False), end="")
    else:
        print(render_table(rows) if rows else "no AIJobs in the queue", file=sys.stdout)
    return 0
