"""GPU-hour accounting in the operator: each run that ends becomes a usage record
(:func:`ended_run`; a staging that ends, one of kind ``staging``, :func:`ended_staging`),
when :meth:`~cpn.runtime.following.Following.carry_out` takes a transition, kept pending
in memory and written to the usage store on the hub (:mod:`cpn.adapters.usagestore`) in
one batch per cycle at most (:meth:`Accounting.flush`).

A write that fails (a conflict, an unreachable API server) keeps the batch for the next
flush; writing a record twice counts it once (records are keyed by AIJob UID, attempt and
kind). Days whose runs are older than the retention window are rolled up into per-(group,
user, GPU type, domain) totals (when the day is written, and every day at most once an
hour); a day slot taken by a new day first moves the day it held into the archive. The
counter ``cpn_gpu_hours_total`` (by group, user, GPU type) starts from the store's totals
when the operator starts and grows by each record written, so it agrees with the store
across restarts.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from prometheus_client import Counter

from cpn.api import constants as k
from cpn.api.usage import (
    ARCHIVE,
    BUDGET_BYTES,
    SLOTS,
    UsageFormatError,
    configmap_name,
    decode,
    decode_archive,
    encode,
    encode_archive,
    run_row,
    stored,
)
from cpn.core.accounting import (
    DAY_S,
    DayUsage,
    UsageRecord,
    archived,
    day_of,
    day_start_s,
    merged,
    rolled_up,
    run_record,
)
from cpn.core.model import Usage
from cpn.core.policy import QueuePolicy
from cpn.runtime.fairfeed import FairFeed
from cpn.runtime.ports import describe
from cpn.runtime.store import Record

log = logging.getLogger(__name__)

#: Old days are looked at for roll-up at most this often.
ROLL_UP_EVERY_S = 3600.0
#: Runs are kept one by one at most this long (a day slot is reused after SLOTS days).
MAX_RETENTION_S = (SLOTS - 2) * DAY_S
#: After a restart, AIJobs that succeeded this recently have their last run written again
#: (a no-op when it was written: the key is the same), in case the operator was killed
#: between their status write and the usage write.
RECOVER_S = 3600.0
#: A bound on one encoded run row (long names make it longer; then the real one is used).
ROW_BYTES = 320

#: How a run ended, from the reason of the record after its transition.
_LOST = frozenset({"MemberLost", "MemberRemoved", "MemberJobMissing"})

Call = Callable[..., Awaitable[Any]]


class UsageStore(Protocol):
    """The usage ConfigMaps on the hub as raw ``data`` (:mod:`cpn.api.usage` reads it;
    :class:`cpn.adapters.usagestore.KubeUsageStore`); blocking calls that raise on failure."""

    def list(self) -> list[tuple[str, dict[str, str], str]]: ...

    def read(self, name: str) -> tuple[dict[str, str], str]: ...

    def write(self, name: str, data: Mapping[str, str], version: str) -> None: ...


def outcome_of(before: Record, after: Record, forgotten: bool) -> str:
    """How the run ended, from its record after the transition. A run whose preemption was
    booked (:func:`cpn.runtime.store.preempted`, before its member Job is deleted) was
    preempted, whichever transition ends it (its Job's deletion may be seen first)."""
    if before.preempted_s and before.start_s and before.preempted_s >= before.start_s:
        return "preempted"
    if forgotten:
        return "cancelled"
    if after.phase == k.PHASE_SUCCEEDED:
        return "succeeded"
    if after.phase == k.PHASE_FAILED:
        return "failed"
    if after.phase == k.PHASE_SUSPENDED:
        return "suspended"
    if after.reason == "Preempted":
        return "preempted"
    if after.reason in _LOST:
        return "lost"
    return "retried"


def ended_run(
    before: Record, after: Record, *, forgotten: bool, now_s: float
) -> UsageRecord | None:
    """The run that a transition from ``before`` to ``after`` ended, or None (it ended
    none, or the attempt never ran: refused, or its workers never all started). A run
    starts when all its workers were seen running; one that finished or failed before it
    was seen running started at its dispatch. ``forgotten``: the AIJob was deleted."""
    if not before.active or before.job is None or (after.active and not forgotten):
        return None
    outcome = outcome_of(before, after, forgotten)
    start_s = before.start_s
    if not start_s and before.observed and after.reason != "StartTimeout":
        start_s = before.dispatch_s  # its member Job reported an end before running was seen
    end_s = after.finish_s if after.finished and after.finish_s else now_s
    if outcome == "preempted" and before.preempted_s:
        end_s = before.preempted_s
    return _record_of(before, outcome, start_s, end_s)


def ended_staging(
    before: Record, after: Record, *, forgotten: bool, now_s: float
) -> UsageRecord | None:
    """The staging a transition ended (kind ``staging``): the GPUs ``before`` held from
    its dispatch (when its staging began) until its inputs were all on its member, its
    staging failed, or it was cancelled, preempted or lost meanwhile; None for any other
    transition."""
    if before.phase != k.PHASE_STAGING or before.job is None:
        return None
    if after.phase == k.PHASE_STAGING and not forgotten:
        return None
    if forgotten:
        outcome = "cancelled"
    elif after.phase == k.PHASE_DISPATCHED:
        outcome = "succeeded"  # staged: its run starts now
    else:
        outcome = outcome_of(before, after, forgotten)
    end_s = after.finish_s if after.finished and after.finish_s else now_s
    return _record_of(before, outcome, before.dispatch_s, end_s, staging=True)


def recovered_run(record: Record, now_s: float) -> UsageRecord | None:
    """The last run of an AIJob that succeeded within :data:`RECOVER_S` of ``now_s``, from
    its record as restored from its status (None for any other)."""
    if record.phase != k.PHASE_SUCCEEDED or record.job is None:
        return None
    if not (now_s - RECOVER_S <= record.finish_s <= now_s) or not record.start_s:
        return None
    return _record_of(record, "succeeded", record.start_s, record.finish_s)


def _record_of(
    record: Record, outcome: str, start_s: float, end_s: float, *, staging: bool = False
) -> UsageRecord | None:
    """The usage record of ``record``'s current attempt (which has a job)."""
    assert record.job is not None
    return run_record(
        uid=record.uid,
        attempt=record.attempts,
        outcome=outcome,
        namespace=record.namespace,
        name=record.name,
        user=record.user,
        group=record.group,
        domain=record.domain,
        gpu_type=record.gpu_type,
        gpus=record.job.gpus,
        cluster=record.cluster,
        start_s=start_s,
        end_s=end_s,
        staging=staging,
    )


class Accounting:
    """Usage records pending and written; ``store`` is set by the composition root (None:
    accounting is kept in memory only, e.g. in unit tests of the runtime)."""

    def __init__(self, gpu_hours: Counter, *, retention_s: float) -> None:
        self.store: UsageStore | None = None
        self.retention_s = min(max(retention_s, 0.0), MAX_RETENTION_S)
        if self.retention_s != retention_s:
            log.warning(
                "CPN_USAGE_RETENTION_DAYS=%g is outside 0..%g: runs are kept %g days",
                retention_s / DAY_S, MAX_RETENTION_S / DAY_S, self.retention_s / DAY_S,
            )  # fmt: skip
        self.pending: dict[str, UsageRecord] = {}
        self.recovered: set[str] = set()  # keys of pending runs from recovered_run
        self.stored_already: set[str] = set()  # pending runs the store had when read
        self.loaded = False
        self.written = 0  # records this process added to the store
        self._rolled_at = float("-inf")
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[int] | None = None
        self.gpu_hours = gpu_hours  # cpn_gpu_hours_total (runtime/metrics.py)
        self.fair = FairFeed()  # fair share and budgets (runtime/fairfeed.py)

    def saw(self, before: Record, after: Record, *, forgotten: bool, now_s: float) -> None:
        """A record's transition: the run it ended, if any, is pending from now."""
        for ended in (ended_staging, ended_run):
            record = ended(before, after, forgotten=forgotten, now_s=now_s)
            if record is not None:
                self.pending.setdefault(record.key, record)

    def recover(self, records: Iterable[Record], now_s: float) -> int:
        """After a restart (the AIJobs listed): the recent successes' last runs are pending
        too, unless the retention is shorter than :data:`RECOVER_S` (they may be rolled up
        already); returns how many."""
        if self.retention_s < RECOVER_S:
            return 0
        found = [r for r in (recovered_run(x, now_s) for x in records) if r is not None]
        for record in found:
            if record.key not in self.pending:
                self.pending[record.key] = record
                self.recovered.add(record.key)
        if found:
            log.info("usage: %d recent success(es) checked against the store", len(found))
        return len(found)

    def _count(self, records: Iterable[UsageRecord]) -> None:
        for record in records:
            self.gpu_hours.labels(record.group, record.user, record.gpu_type).inc(
                record.gpu_s / 3600.0
            )

    def usage(self, policy: QueuePolicy, now_s: float) -> Usage | None:
        """The snapshot's past usage for fair share and budgets (runtime/fairfeed.py)."""
        if self.fair.configure(policy):
            log.info("fair share: half-life or budget period changed; usage refed next flush")
        if self.store is None:
            self.fair.ready = True  # nothing to read: the runs seen by this process only
        waiting = (r for key, r in self.pending.items() if key not in self.stored_already)
        return self.fair.view(waiting, now_s)

    async def load(self, call: Call, now_s: float) -> None:
        """Read the store now (at start-up, so the first cycle has the past usage)."""
        if self.store is None or self.loaded:
            return
        async with self._lock:
            try:
                if not self.loaded:
                    self._load(await call(self.store.list), now_s)
            except Exception as err:  # noqa: BLE001 - the next flush reads it again
                log.warning("usage store not read (%s): read again next cycle", describe(err))

    def _load(self, items: list[tuple[str, dict[str, str], str]], now_s: float) -> None:
        days, archive, errors = stored(items)
        self.fair.load(days, archive, now_s)
        by_day = {usage.day: usage for usage in days}
        self.stored_already = {  # recovered runs the store has: not counted twice meanwhile
            key for key, r in self.pending.items() if key in by_day.get(r.day, DayUsage("")).runs
        }
        for error in errors:
            log.error("%s; left out of the usage totals", error)
        for usage in days:
            self._count(usage.runs.values())
            for (group, user, gpu_type, _domain), total in usage.totals.items():
                self.gpu_hours.labels(group, user, gpu_type).inc(total.gpu_s / 3600.0)
        for (_month, group, user, gpu_type, _domain), total in archive.months.items():
            self.gpu_hours.labels(group, user, gpu_type).inc(total.gpu_s / 3600.0)
        self.loaded = True
        log.info(
            "usage store: %d day(s) and %d archived month row(s) read",
            len(days),
            len(archive.months),
        )

    def flush_soon(self, call: Call, now_s: float) -> None:
        """Start a flush in the background unless one runs (a cycle never waits on it)."""
        if self.store is not None and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self.flush(call, now_s))

    async def flush(self, call: Call, now_s: float) -> int:
        """Write the pending records, a day at a time; returns how many the store did not
        have. A day whose write fails stays pending (logged), for the next flush."""
        store = self.store
        if store is None:
            return 0
        async with self._lock:
            try:
                if not self.loaded:
                    self._load(await call(store.list), now_s)
                elif not self.fair.ready:  # the policy's half-life or period changed
                    days, archive, _ = stored(await call(store.list))
                    self.fair.load(days, archive, now_s)
                added = 0
                by_day: dict[str, list[UsageRecord]] = defaultdict(list)
                for record in self.pending.values():
                    by_day[record.day].append(record)
                for day, records in sorted(by_day.items()):
                    added += await self._write_day(call, store, day, records, now_s)
                if now_s - self._rolled_at >= ROLL_UP_EVERY_S:
                    self._rolled_at = now_s  # tried again in an hour, even when it fails
                    await self._roll_up_old(call, store, now_s)
                return added
            except Exception as err:  # noqa: BLE001 - kept pending; retried next flush
                log.warning("usage not written (%s): retried next cycle", describe(err))
                return 0

    def _rolled(self, usage: DayUsage, now_s: float) -> DayUsage:
        row_bytes = max([ROW_BYTES, *(len(run_row(r)) for r in usage.runs.values())])
        return rolled_up(
            usage,
            before_s=now_s - self.retention_s,
            budget_bytes=BUDGET_BYTES,
            row_bytes=row_bytes,
        )

    async def _write_day(
        self, call: Call, store: UsageStore, day: str, records: list[UsageRecord], now_s: float
    ) -> int:
        by_key = [r.key for r in records]
        name = configmap_name(day)
        data, version = await call(store.read, name)
        usage = decode(name, data) if data else DayUsage(day)
        if usage.day < day:  # the slot's old day goes to the archive first
            await self._archive(call, store, usage, day)
            usage = DayUsage(day)
        elif usage.day > day:
            log.error(
                "usage of %d run(s) of %s dropped: ended %d+ days ago, their slot holds %s",
                len(records), day, SLOTS, usage.day,
            )  # fmt: skip
            records = []
        if usage.totals:  # runs of it were rolled up: a recovered run may be among them
            records = [r for r in records if r.key not in self.recovered or r.key in usage.runs]
        new, added = merged(usage, records)
        new = self._rolled(new, now_s)
        if added or new != usage:
            await call(store.write, name, encode(new), version)
        for record in by_key:
            self.pending.pop(record, None)
            self.recovered.discard(record)
            self.stored_already.discard(record)
        self._count(added)
        self.fair.add(added)
        self.written += len(added)
        return len(added)

    async def _archive(self, call: Call, store: UsageStore, old: DayUsage, today: str) -> None:
        data, version = await call(store.read, ARCHIVE)
        archive = decode_archive(data)
        forget = day_of(day_start_s(today) - 2 * SLOTS * DAY_S)
        new = archived(archive, old, forget_before=forget)
        if new != archive:
            await call(store.write, ARCHIVE, encode_archive(new), version)

    async def _roll_up_old(self, call: Call, store: UsageStore, now_s: float) -> None:
        for name, data, version in await call(store.list):
            if name == ARCHIVE:
                continue
            try:
                usage = decode(name, data)
            except UsageFormatError as err:
                log.error("%s; not rolled up (and not written over)", err)
                continue
            new = self._rolled(usage, now_s)
            if new != usage:
                await call(store.write, name, encode(new), version)
