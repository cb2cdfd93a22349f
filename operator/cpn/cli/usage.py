"""``cpn usage``: GPU-hours used, from the usage store on the hub (docs/admin-guide.md,
"Accounting").

Sums the runs the operator recorded (preempted fragments and the GPUs held while staging
included; ``runs`` counts runs, not stagings; ``gpuHoursByKind`` splits the runs still kept
one by one into run, preempted and staging, the rest being rolled up) per (group, user, GPU
type, domain) over a window, optionally for one group or user, and groups them ``--by``
one of those. ``--since``/``--until`` take a date (``2026-11-01``, UTC), a time
(``2026-11-01T12:00:00Z``) or an age (``7d``, ``12h``, ``30m``: that long ago). Runs kept
one by one count the part of them inside the window; days already rolled up (older than
the operator's retention) count whole when they overlap it. ``--json`` prints one JSON
document. Reads the ConfigMaps ``cpn-usage-*`` of the operator's namespace (``-n``,
default cpn-system) through the kubeconfig, as kubectl.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from cpn.core.accounting import BY, Archive, DayUsage, UsageRow, by_kind, summed_by, usage_rows

_AGE = re.compile(r"^(\d+(?:\.\d+)?)([dhm])$")
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0}


def parse_when(text: str, now_s: float) -> float:
    """Epoch seconds of a date, a time or an age; ValueError saying what is accepted."""
    age = _AGE.match(text.strip())
    if age:
        return now_s - float(age.group(1)) * _UNIT_S[age.group(2)]
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a date (2026-11-01), a time (2026-11-01T12:00:00Z) "
            "or an age (7d, 12h, 30m)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _iso(t_s: float | None) -> str | None:
    if t_s is None:
        return None
    return datetime.fromtimestamp(t_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def report(
    days: Sequence[DayUsage],
    archive: Archive | None = None,
    *,
    since_s: float | None,
    until_s: float | None,
    group: str | None,
    user: str | None,
    by: str | None,
) -> dict[str, Any]:
    """What ``cpn usage`` shows, as one JSON-ready document."""

    def query(over: list[DayUsage], archive: Archive | None = None) -> list[UsageRow]:
        return usage_rows(
            over, archive=archive, since_s=since_s, until_s=until_s, group=group, user=user
        )

    rows = query(list(days), archive)
    total_s = sum(r.gpu_s for r in rows)
    doc: dict[str, Any] = {
        "since": _iso(since_s),
        "until": _iso(until_s),
        "group": group,
        "user": user,
        "totalGpuHours": round(total_s / 3600.0, 6),
        "totalGpuSeconds": round(total_s, 1),
        "runs": sum(r.runs for r in rows),
        "rows": [_row(r) for r in rows],
    }
    kinds = by_kind(days, query)
    kinds["rolled-up"] = max(0.0, total_s - sum(kinds.values()))
    doc["gpuHoursByKind"] = {kind: round(s / 3600.0, 6) for kind, s in kinds.items()}
    if by:
        doc["by"] = by
        doc["gpuHoursBy"] = {name: round(s / 3600.0, 6) for name, s in summed_by(rows, by).items()}
    return doc


def _row(row: UsageRow) -> dict[str, Any]:
    return {
        "group": row.group,
        "user": row.user,
        "gpuType": row.gpu_type,
        "domain": row.domain,
        "gpuHours": round(row.gpu_hours, 6),
        "gpuSeconds": round(row.gpu_s, 1),
        "runs": row.runs,
    }


def render(doc: dict[str, Any]) -> str:
    """A terminal table: per ``--by`` key when given, else per row."""
    if "gpuHoursBy" in doc:
        head = [doc["by"].upper(), "GPU-HOURS"]
        cells = [[name or "-", f"{hours:.2f}"] for name, hours in doc["gpuHoursBy"].items()]
    else:
        head = ["GROUP", "USER", "GPU-TYPE", "DOMAIN", "RUNS", "GPU-HOURS"]
        cells = [
            [
                r["group"] or "-",
                r["user"] or "-",
                r["gpuType"] or "-",
                r["domain"] or "-",
                str(r["runs"]),
                f"{r['gpuHours']:.2f}",
            ]
            for r in doc["rows"]
        ]
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(len(head))]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip()
        for c in [head, *cells]
    ]
    lines.append(f"total: {doc['totalGpuHours']:.2f} GPU-hours in {doc['runs']} run(s)")
    kinds = doc.get("gpuHoursByKind") or {}
    if kinds.get("staging"):
        lines.append("by kind: " + ", ".join(f"{k} {h:.2f}" for k, h in kinds.items() if h))
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="cpn usage", description=__doc__)
    parser.add_argument("--group", help="only this group")
    parser.add_argument("--user", help="only this user")
    parser.add_argument("--since", help="from (a date, a time or an age such as 7d)")
    parser.add_argument("--until", help="until (a date, a time or an age)")
    parser.add_argument("--by", choices=BY, help="sum per group, user, GPU type or domain")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument(
        "-n", "--namespace", default="cpn-system", help="the operator's namespace (cpn-system)"
    )
    parser.add_argument("--kubeconfig", help="the hub's kubeconfig (default: as kubectl)")
    args = parser.parse_args(list(argv))
    now = time.time()
    try:
        since = parse_when(args.since, now) if args.since else None
        until = parse_when(args.until, now) if args.until else None
    except ValueError as err:
        parser.error(str(err))
    from cpn.adapters.hubcli import on_hub

    return on_hub("cpn usage", lambda: _show(args, since, until))


def _show(args: argparse.Namespace, since: float | None, until: float | None) -> int:
    from cpn.adapters.hubcli import hub_api
    from cpn.adapters.usagestore import KubeUsageStore
    from cpn.api.usage import stored

    store = KubeUsageStore(hub_api(args.kubeconfig), args.namespace)
    days, archive, errors = stored(store.list())
    for error in errors:
        print(f"cpn usage: {error}; left out", file=sys.stderr)
    doc = report(
        days,
        archive,
        since_s=since,
        until_s=until,
        group=args.group,
        user=args.user,
        by=args.by,
    )
    doc["days"] = len(days)
    print(json.dumps(doc, indent=1) if args.json else render(doc))
    return 0
