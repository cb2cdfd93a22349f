"""The usage store's ConfigMaps in the operator's namespace, and back.

A day's usage (:class:`cpn.core.accounting.DayUsage`) is kept in one of :data:`SLOTS` day
slots, ``cpn-usage-d00`` .. ``cpn-usage-d31`` (the day's number since 1970 modulo
:data:`SLOTS`; label ``cpn.io/usage=day``): ``day`` says which day it holds; ``runs``, one
compact JSON array per kept run (the columns :data:`RUN_COLUMNS`); ``totals``, one per
rolled-up (group, user, GPU type, domain) (:data:`TOTAL_COLUMNS`); each a JSON list of
rows, one row a line. Before a slot takes a new day, the day it held is folded into the
per-month totals of ``cpn-usage-archive`` (:class:`cpn.core.accounting.Archive`, label
``cpn.io/usage=archive``). A fixed set of names, so the operator's Role can name them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cpn.api import constants as k
from cpn.core.accounting import DAY_S, Archive, DayUsage, Total, UsageRecord, day_start_s

PREFIX = "cpn-usage-"
SLOTS = 32
ARCHIVE = f"{PREFIX}archive"
MONTH_COLUMNS = ("month", "group", "user", "gpuType", "domain", "gpuSeconds", "runs")
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
    """The slot that holds ``day``."""
    number = int(day_start_s(day) // DAY_S)
    return f"{PREFIX}d{number % SLOTS:02d}"


def names() -> list[str]:
    """Every name the usage store writes (the operator's Role lists them)."""
    return [f"{PREFIX}d{i:02d}" for i in range(SLOTS)] + [ARCHIVE]


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


def configmap(name: str, data: Mapping[str, str], namespace: str, version: str) -> dict[str, Any]:
    """A usage ConfigMap (``version``: the resourceVersion it replaces, "" for a new one)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {k.LABEL_MANAGED: k.MANAGED_BY, LABEL_USAGE: kind_of(name)},
    }
    if version:
        meta["resourceVersion"] = version
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


def kind_of(name: str) -> str:
    return "archive" if name == ARCHIVE else "day"


def encode_archive(archive: Archive) -> dict[str, str]:
    months = [
        json.dumps([*key, round(t.gpu_s, 1), t.runs], separators=(",", ":"))
        for key, t in sorted(archive.months.items())
    ]
    return {"format": FORMAT, "months": _rows(months), "days": " ".join(sorted(archive.days))}


def decode_archive(data: Mapping[str, str]) -> Archive:
    """The archive from its ConfigMap's ``data`` (empty when it has none)."""
    if not data:
        return Archive()
    _check_format(ARCHIVE, data)
    try:
        months = {}
        for row in json.loads(data.get("months") or "[]"):
            if len(row) != len(MONTH_COLUMNS):
                raise ValueError(f"a month row has {len(row)} columns, not {len(MONTH_COLUMNS)}")
            key = (str(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]))
            months[key] = Total(float(row[5]), int(row[6]))
    except (ValueError, TypeError) as err:
        raise UsageFormatError(f"usage ConfigMap {ARCHIVE}: {err}") from None
    return Archive(months, frozenset((data.get("days") or "").split()))


def _check_format(name: str, data: Mapping[str, str]) -> None:
    if data.get("format") != FORMAT:
        raise UsageFormatError(
            f"usage ConfigMap {name}: format {data.get('format')!r} (this version reads {FORMAT})"
        )


def decode(name: str, data: Mapping[str, str]) -> DayUsage:
    """A day from its ConfigMap's ``data``; :class:`UsageFormatError` naming ``name``."""
    day = data.get("day", "")
    if not _DAY.match(day):
        raise UsageFormatError(f"usage ConfigMap {name}: 'day' is {day!r}, not YYYY-MM-DD")
    _check_format(name, data)
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


def stored(
    items: Iterable[tuple[str, Mapping[str, str], str]],
) -> tuple[list[DayUsage], Archive, list[str]]:
    """The days and the archive of the usage ConfigMaps (name, data, resourceVersion), and
    why any could not be read (those are left out). A day already in the archive (its
    slot was being reused when the operator stopped) counts there only."""
    days, archive, errors = [], Archive(), []
    for name, data, _ in items:
        try:
            if name == ARCHIVE:
                archive = decode_archive(data)
            else:
                days.append(decode(name, data))
        except UsageFormatError as err:
            errors.append(str(err))
    return [d for d in days if d.day not in archive.days], archive, errors
