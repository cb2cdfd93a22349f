"""``cpn clusters``: the member clusters as the operator last saw them.

One row per MemberCluster: ready or not (and why not), GPU types, free of total GPUs,
free of total GPUs per logical domain of the policy, the cpn jobs running there and,
when the operator keeps one, the member's data cache. Every figure but the job count
is the MemberCluster's status, written by the operator at its last probe of the member
(``status.lastProbeTime``, shown as AS-OF, its age beside it); the job count is the
AIJobs' status read now. ``--domain D`` keeps the clusters with nodes in domain D and
counts only the jobs running in it; ``--json`` prints one JSON document and nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from cpn.adapters.hubcli import HubAnswer, hub_api, list_aijobs, list_memberclusters, on_hub
from cpn.api import constants as k

COLUMNS = ("CLUSTER", "READY", "TYPES", "GPUS-FREE", "DOMAINS-FREE", "JOBS", "CACHE", "AS-OF")


def _seconds(stamp: Any) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _ready(status: Mapping[str, Any]) -> tuple[bool | None, str]:
    """The Ready condition: True/False (None when not written yet) and why not."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == "Ready":
            ready = {"True": True, "False": False}.get(condition.get("status", ""))
            why = condition.get("message") or condition.get("reason") or ""
            return ready, "" if ready else why
    return None, "the operator has not probed it yet"


def _running(aijobs: Sequence[Mapping[str, Any]], domain: str | None) -> dict[str, int]:
    """Running AIJobs per member cluster (in ``domain`` only, if given)."""
    counts: dict[str, int] = {}
    for item in aijobs:
        status = item.get("status") or {}
        if status.get("phase") != k.PHASE_RUNNING or not status.get("cluster"):
            continue
        if domain is not None and status.get("domain") != domain:
            continue
        counts[status["cluster"]] = counts.get(status["cluster"], 0) + 1
    return counts


def _cache(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """The member's data cache (``status.cache``), when the operator writes one."""
    cache = status.get("cache")
    if not isinstance(cache, Mapping):
        return None
    return {
        "usedBytes": cache.get("usedBytes"),
        "capacityBytes": cache.get("capacityBytes"),
        "count": cache.get("count"),
        "entries": list(cache.get("entries") or ()),
    }


def rows_from(
    members: Sequence[Mapping[str, Any]],
    aijobs: Sequence[Mapping[str, Any]] | None,
    *,
    now_s: float,
    domain: str | None = None,
) -> list[dict[str, Any]]:
    """One row per member cluster, by name. ``aijobs`` None: the jobs could not be read,
    so ``runningJobs`` is None. ``domain``: only the clusters with nodes in it."""
    running = _running(aijobs, domain) if aijobs is not None else None
    rows = []
    for item in members:
        name = (item.get("metadata") or {}).get("name", "")
        status = item.get("status") or {}
        domains = [
            {key: d.get(key) for key in ("domain", "nodes", "gpusTotal", "gpusFree")}
            for d in status.get("domains") or ()
            if domain is None or d.get("domain") == domain
        ]
        if domain is not None and not domains:
            continue
        ready, why = _ready(status)
        probed = _seconds(status.get("lastProbeTime"))
        rows.append(
            {
                "cluster": name,
                "ready": ready,
                "notReadyReason": why,
                "gpuTypes": sorted(
                    r["gpuType"] for r in status.get("inventory") or () if r.get("gpuType")
                ),
                "gpusTotal": status.get("gpusTotal"),
                "gpusFree": status.get("gpusFree"),
                "domains": domains,
                "runningJobs": None if running is None else running.get(name, 0),
                "cache": _cache(status),
                "asOf": status.get("lastProbeTime"),
                "ageSeconds": None if probed is None else round(max(0.0, now_s - probed), 1),
            }
        )
    return sorted(rows, key=lambda r: r["cluster"])


def _gb(value: Any) -> str:
    """Bytes as GB (10^9, as the policy's ``data.cache_gb``)."""
    return f"{value / 1e9:.0f}" if isinstance(value, int | float) else "?"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.0f}h ago"


def _figure(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else "?"


def _cells(row: Mapping[str, Any]) -> list[str]:
    cache = row["cache"]
    if cache is None:
        cached = "-"
    else:
        capacity = "" if cache["capacityBytes"] is None else f"/{_gb(cache['capacityBytes'])}"
        cached = f"{cache['count'] or 0} in {_gb(cache['usedBytes'])}{capacity} GB"
    ready = {True: "True", False: "False", None: "Unknown"}[row["ready"]]
    domains = ", ".join(
        f"{d['domain']} {_figure(d['gpusFree'])}/{_figure(d['gpusTotal'])}" for d in row["domains"]
    )
    jobs = "?" if row["runningJobs"] is None else str(row["runningJobs"])
    return [
        row["cluster"],
        ready,
        ",".join(row["gpuTypes"]) or "-",
        f"{_figure(row['gpusFree'])}/{_figure(row['gpusTotal'])}",
        domains or "-",
        jobs,
        cached,
        _age(row["ageSeconds"]),
    ]


def render_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A terminal table, then one line per cluster that is not ready saying why."""
    cells = [_cells(row) for row in rows]
    widths = [max(len(c[i]) for c in [list(COLUMNS), *cells]) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
        for line in [list(COLUMNS), *cells]
    ]
    for row in rows:
        if row["ready"] is not True:
            lines.append(
                f"{row['cluster']} not ready: {row['notReadyReason'] or 'no reason given'}"
            )
    if any(row["runningJobs"] is None for row in rows):
        lines.append("JOBS ?: you may not list AIJobs in every namespace")
    lines.append(
        "GPU and cache figures as of the operator's last probe of each cluster (AS-OF); "
        "JOBS counted now"
    )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="cpn clusters", description=__doc__)
    parser.add_argument("--domain", help="only clusters with nodes in this domain, and its jobs")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--kubeconfig", help="the hub's kubeconfig (default: as kubectl)")
    args = parser.parse_args(list(argv))
    return on_hub("cpn clusters", lambda: _show(args))


def _show(args: argparse.Namespace) -> int:
    api = hub_api(args.kubeconfig)
    try:
        members = list_memberclusters(api)
    except HubAnswer as err:
        if err.status != 403:
            raise
        print(
            "cpn clusters: you may not list MemberClusters (the cpn-cluster-admin role may)",
            file=sys.stderr,
        )
        return 1
    aijobs: list[dict[str, Any]] | None
    try:
        aijobs = list_aijobs(api, None)
    except HubAnswer as err:
        if err.status != 403:
            raise
        aijobs = None  # shown as "?", the rest is still worth seeing
    rows = rows_from(members, aijobs, now_s=time.time(), domain=args.domain)
    if args.json:
        print(json.dumps(rows, indent=1))
    elif rows:
        print(render_table(rows))
    else:
        where = f" with nodes in domain {args.domain}" if args.domain else ""
        print(f"no member clusters{where}", file=sys.stderr)
    return 0
