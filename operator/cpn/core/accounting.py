"""GPU-hour accounting, as pure values: a record per run, a day's usage, roll-up and queries.

A *run* is one attempt of an AIJob holding GPUs on a member, from when all its workers ran
(or its dispatch, when it ended before it was seen running) to its end: it finished, failed,
was preempted (a *fragment* of the job's work), lost with its member, suspended or
cancelled. :func:`run_record` makes its :class:`UsageRecord` from plain values, so the
operator and the simulator can both use it. Records are keyed by AIJob UID, attempt and
kind: seeing one run twice (after a restart) counts it once (:func:`merged`).

Usage is kept per UTC day (the day a run ended): the day's runs while they are younger than
the retention window, then folded into per-(group, user, GPU type, domain) totals of that
day (:func:`rolled_up`), so that a day's size is bounded by its number of distinct
(group, user, GPU type, domain) once old, and by ``budget_bytes`` always (a day with more
runs than fit folds its oldest runs early). Days older still are folded into per-month
totals (:class:`Archive`, :func:`archived`), once each. :func:`usage_rows` answers queries
over all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

KIND_RUN = "run"
KIND_PREEMPTED = "preempted"  # a fragment: the run ended by a preemption
KIND_STAGING = "staging"  # GPUs held while a run's inputs were staged: not a run
KINDS = (KIND_RUN, KIND_PREEMPTED, KIND_STAGING)

#: How a run ended.
OUTCOMES = ("succeeded", "failed", "retried", "preempted", "lost", "suspended", "cancelled")

#: Ways ``cpn usage --by`` groups rows.
BY = ("group", "user", "gpu-type", "domain")

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One run: who, what, where, from when to when (epoch seconds)."""

    uid: str
    attempt: int
    kind: str
    outcome: str
    namespace: str
    name: str
    user: str
    group: str
    domain: str
    gpu_type: str
    gpus: float
    cluster: str
    start_s: float
    end_s: float

    @property
    def key(self) -> str:
        """What makes it unique: one record per AIJob attempt and kind."""
        return f"{self.uid}/{self.attempt}/{self.kind}"

    @property
    def gpu_s(self) -> float:
        return self.gpus * max(0.0, self.end_s - self.start_s)

    @property
    def day(self) -> str:
        return day_of(self.end_s)


def run_record(
    *,
    uid: str,
    attempt: int,
    outcome: str,
    namespace: str,
    name: str,
    user: str,
    group: str,
    domain: str,
    gpu_type: str,
    gpus: float,
    cluster: str,
    start_s: float,
    end_s: float,
    staging: bool = False,
) -> UsageRecord | None:
    """The record of a run that ended with ``outcome``, or None when it held no GPUs for
    any time (never started, or no GPUs). A preempted run is a fragment (``preempted``);
    ``staging``: the GPUs held while its inputs were staged (kind ``staging``)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r} (one of {', '.join(OUTCOMES)})")
    if start_s <= 0 or end_s <= start_s or gpus <= 0:
        return None
    kind = KIND_PREEMPTED if outcome == "preempted" else KIND_RUN
    if staging:
        kind = KIND_STAGING
    return UsageRecord(
        uid=uid,
        attempt=attempt,
        kind=kind,
        outcome=outcome,
        namespace=namespace,
        name=name,
        user=user,
        group=group,
        domain=domain,
        gpu_type=gpu_type,
        gpus=gpus,
        cluster=cluster,
        start_s=round(start_s, 1),
        end_s=round(end_s, 1),
    )


def day_of(t_s: float) -> str:
    """The UTC day of an instant, ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(t_s, UTC).strftime("%Y-%m-%d")


def day_start_s(day: str) -> float:
    return datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()


#: A total's key: (group, user, GPU type, domain).
TotalKey = tuple[str, str, str, str]


@dataclass(frozen=True, slots=True)
class Total:
    """Rolled-up usage of one day for one (group, user, GPU type, domain)."""

    gpu_s: float
    runs: int


@dataclass(frozen=True, slots=True)
class DayUsage:
    """One UTC day: its runs still kept one by one, and the totals of those rolled up."""

    day: str
    runs: Mapping[str, UsageRecord] = field(default_factory=dict)
    totals: Mapping[TotalKey, Total] = field(default_factory=dict)

    def gpu_s(self) -> float:
        return sum(r.gpu_s for r in self.runs.values()) + sum(t.gpu_s for t in self.totals.values())


def merged(day: DayUsage, new: Iterable[UsageRecord]) -> tuple[DayUsage, list[UsageRecord]]:
    """``day`` with the records of ``new`` it has not got yet (by key), and those added."""
    runs = dict(day.runs)
    added = []
    for record in new:
        if record.day != day.day:
            raise ValueError(f"run {record.key} ended on {record.day}, not {day.day}")
        if record.key not in runs:
            runs[record.key] = record
            added.append(record)
    return replace(day, runs=runs), added


def total_key(record: UsageRecord) -> TotalKey:
    return (record.group, record.user, record.gpu_type, record.domain)


def rolled_up(day: DayUsage, *, before_s: float, budget_bytes: int, row_bytes: int) -> DayUsage:
    """``day`` with its runs that ended before ``before_s`` folded into its totals, and
    then its oldest runs too while its rows would take more than ``budget_bytes``
    (``row_bytes`` each, a bound on an encoded row)."""
    runs = sorted(day.runs.values(), key=lambda r: (r.end_s, r.key))
    totals = dict(day.totals)
    max_rows = max(1, budget_bytes // max(row_bytes, 1))
    folded = 0
    for record in runs:
        if record.end_s >= before_s and len(runs) - folded + len(totals) <= max_rows:
            break
        old = totals.get(total_key(record), Total(0.0, 0))
        runs_added = int(record.kind != KIND_STAGING)  # staging's GPU-hours, not a run
        totals[total_key(record)] = Total(old.gpu_s + record.gpu_s, old.runs + runs_added)
        folded += 1
    if not folded:
        return day
    return DayUsage(day.day, {r.key: r for r in runs[folded:]}, totals)


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Usage of one (group, user, GPU type, domain) over a window."""

    group: str
    user: str
    gpu_type: str
    domain: str
    gpu_s: float
    runs: int

    @property
    def gpu_hours(self) -> float:
        return self.gpu_s / 3600.0


@dataclass(frozen=True, slots=True)
class Archive:
    """Per-month totals of the days folded into it (``YYYY-MM``, group, user, GPU type,
    domain), and which days were folded (so folding one again changes nothing)."""

    months: Mapping[tuple[str, str, str, str, str], Total] = field(default_factory=dict)
    days: frozenset[str] = frozenset()


def archived(archive: Archive, day: DayUsage, *, forget_before: str = "") -> Archive:
    """``archive`` with ``day`` folded into its month (unless it was already), and the days
    before ``forget_before`` no longer remembered as folded (none can come again)."""
    days = frozenset(d for d in archive.days if d >= forget_before)
    if day.day in archive.days:
        return replace(archive, days=days)
    months = dict(archive.months)
    month = day.day[:7]
    folded = rolled_up(day, before_s=float("inf"), budget_bytes=0, row_bytes=1)
    for key, total in folded.totals.items():
        old = months.get((month, *key), Total(0.0, 0))
        months[(month, *key)] = Total(old.gpu_s + total.gpu_s, old.runs + total.runs)
    return Archive(months, days | {day.day})


def month_bounds_s(month: str) -> tuple[float, float]:
    """The first and the next month's first instant of ``YYYY-MM`` (UTC)."""
    year, number = int(month[:4]), int(month[5:7])
    begins = datetime(year, number, 1, tzinfo=UTC)
    after = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=UTC)
    return begins.timestamp(), after.timestamp()


def usage_rows(
    days: Iterable[DayUsage],
    *,
    archive: Archive | None = None,
    since_s: float | None = None,
    until_s: float | None = None,
    group: str | None = None,
    user: str | None = None,
) -> list[UsageRow]:
    """Usage per (group, user, GPU type, domain) in ``[since_s, until_s)``: kept runs count
    the part of them inside it; rolled-up days count whole when the day overlaps it (their
    resolution is a day), archived months whole when the month overlaps it. Rows sorted
    by key. For fair share, too."""
    lo = since_s if since_s is not None else float("-inf")
    hi = until_s if until_s is not None else float("inf")
    sums: dict[TotalKey, list[float]] = {}
    for day in days:
        for record in day.runs.values():
            if (group and record.group != group) or (user and record.user != user):
                continue
            seconds = max(0.0, min(record.end_s, hi) - max(record.start_s, lo))
            if seconds > 0:
                row = sums.setdefault(total_key(record), [0.0, 0])
                row[0] += record.gpus * seconds
                row[1] += int(record.kind != KIND_STAGING)
        begins = day_start_s(day.day)
        if day.totals and begins < hi and begins + DAY_S > lo:
            for key, total in day.totals.items():
                if (group and key[0] != group) or (user and key[1] != user):
                    continue
                row = sums.setdefault(key, [0.0, 0])
                row[0] += total.gpu_s
                row[1] += total.runs
    for (month, *rest), total in (archive.months if archive else {}).items():
        begins, ends = month_bounds_s(month)
        key = (rest[0], rest[1], rest[2], rest[3])
        if (
            begins < hi
            and ends > lo
            and not (group and key[0] != group)
            and not (user and key[1] != user)
        ):
            row = sums.setdefault(key, [0.0, 0])
            row[0] += total.gpu_s
            row[1] += total.runs
    return [UsageRow(*key, gpu_s=v[0], runs=int(v[1])) for key, v in sorted(sums.items())]


def by_kind(
    days: Iterable[DayUsage], rows_of: Callable[[list[DayUsage]], list[UsageRow]]
) -> dict[str, float]:
    """GPU-seconds of the runs kept one by one per kind (run, preempted, staging; 0 when
    none), as ``rows_of`` (a :func:`usage_rows` query: window, group, user) counts them.
    Rolled-up totals and archived months have no kind: what the query counts beyond these
    is theirs."""
    days = list(days)
    out: dict[str, float] = {}
    for kind in KINDS:
        only = [DayUsage(d.day, {k: r for k, r in d.runs.items() if r.kind == kind}) for d in days]
        out[kind] = sum(r.gpu_s for r in rows_of(only))
    return out


def summed_by(rows: Sequence[UsageRow], by: str) -> dict[str, float]:
    """GPU-seconds of ``rows`` per group, user, GPU type or domain (``by``, one of
    :data:`BY`), largest first."""
    if by not in BY:
        raise ValueError(f"cannot group by {by!r} (one of {', '.join(BY)})")
    attr = by.replace("-", "_")
    out: dict[str, float] = {}
    for row in rows:
        name = getattr(row, attr)
        out[name] = out.get(name, 0.0) + row.gpu_s
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def by_group_user(rows: Iterable[UsageRow]) -> dict[tuple[str, str], float]:
    """GPU-seconds per (group, user) of ``rows`` (e.g. for fair share over a window)."""
    out: dict[tuple[str, str], float] = {}
    for row in rows:
        out[(row.group, row.user)] = out.get((row.group, row.user), 0.0) + row.gpu_s
    return out
