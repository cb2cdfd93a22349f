"""A day's usage (:class:`cpn.core.accounting.DayUsage`) as a ConfigMap of the operator's
namespace, and back.

The ConfigMap ``cpn-usage-YYYY-MM-DD`` (label ``cpn.io/usage=day``) holds, under ``runs``,
one compact JSON array per kept run (the columns :data:`RUN_COLUMNS`) and, under
``totals``, one per rolled-up (group, user, GPU type, domain) (:data:`TOTAL_COLUMNS`),
each as a JSON list of rows, one row a line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from cpn.api import constants as k
from cpn.core.accounting import DayUsage, Total, UsageRecord

PREFIX = "cpn-usage-"
LABEL_USAGE = "cpn.io/usage"
FORMAT = "1"
RUN_COLUMNS = (
    "uid",
    "attempt",
    "kind",
    "outcome",
    "namespace",
    "name",
    "user",
    "group",
    "domain",
    "gpuType",
    "gpus",
    "cluster",
    "start",
    "end",
)
TOTAL_COLUMNS = ("group", "user", "gpuType", "domain", "gpuSeconds", "runs")
#: What a ConfigMap of usage may hold (the API server refuses objects past 1 MiB).
BUDGET_BYTES = 900_000

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class UsageFormatError(ValueError):
    """A usage ConfigMap that cannot be read; ``str()`` names it and what is wrong."""


def configmap_name(day: str) -> str:
    return f"{PREFIX}{day}"


def run_row(record: UsageRecord) -> str:
    return json.dumps(
        [
            record.uid,
            record.attempt,
            record.kind,
            record.outcome,
            record.namespace,
            record.name,
            record.user,
            record.group,
            record.domain,
            record.gpu_type,
            record.gpus,
            record.cluster,
            record.start_s,
            record.end_s,
        ],
        separators=(",", ":"),
    )


def _rows(lines: list[str]) -> str:
    return "[\n" + ",\n".join(lines) + "\n]" if lines else "[]"


def encode(day: DayUsage) -> dict[str, str]:
    """The ConfigMap ``data`` of a day."""
    runs = [run_row(r) for r in sorted(day.runs.values(), key=lambda r: (r.end_s, r.key))]
    totals = [
        json.dumps([*key, round(t.gpu_s, 1), t.runs], separators=(",", ":"))
        for key, t in sorted(day.totals.items())
    ]
    return {"format": FORMAT, "day": day.day, "runs": _rows(runs), "totals": _rows(totals)}


def configmap(day: DayUsage, namespace: str, resource_version: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": configmap_name(day.day),
        "namespace": namespace,
        "labels": {k.LABEL_MANAGED: k.MANAGED_BY, LABEL_USAGE: "day"},
    }
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": encode(day)}


def decode(name: str, data: Mapping[str, str]) -> DayUsage:
    """A day from its ConfigMap's ``data``; :class:`UsageFormatError` naming ``name``."""
    day = data.get("day", "")
    if not _DAY.match(day):
        raise UsageFormatError(f"usage ConfigMap {name}: 'day' is {day!r}, not YYYY-MM-DD")
    if data.get("format") != FORMAT:
        raise UsageFormatError(
            f"usage ConfigMap {name}: format {data.get('format')!r} (this version reads {FORMAT})"
        )
    try:
        runs_in = json.loads(data.get("runs") or "[]")
        totals_in = json.loads(data.get("totals") or "[]")
        runs = {}
        for row in runs_in:
            if len(row) != len(RUN_COLUMNS):
                raise ValueError(f"a run row has {len(row)} columns, not {len(RUN_COLUMNS)}")
            record = UsageRecord(
                uid=str(row[0]),
                attempt=int(row[1]),
                kind=str(row[2]),
                outcome=str(row[3]),
                namespace=str(row[4]),
                name=str(row[5]),
                user=str(row[6]),
                group=str(row[7]),
                domain=str(row[8]),
                gpu_type=str(row[9]),
                gpus=float(row[10]),
                cluster=str(row[11]),
                start_s=float(row[12]),
                end_s=float(row[13]),
            )
            runs[record.key] = record
        totals = {}
        for row in totals_in:
            if len(row) != len(TOTAL_COLUMNS):
                raise ValueError(f"a total row has {len(row)} columns, not {len(TOTAL_COLUMNS)}")
            key = (str(row[0]), str(row[1]), str(row[2]), str(row[3]))
            totals[key] = Total(float(row[4]), int(row[5]))
    except (ValueError, TypeError, IndexError) as err:
        raise UsageFormatError(f"usage ConfigMap {name}: {err}") from None
    return DayUsage(day, runs, totals)


def size_bytes(day: DayUsage) -> int:
    return sum(len(v) for v in encode(day).values())
