"""The operator's accounting: which transitions end a run, and how the pending records
reach the usage store (batched, retried after a failed write, counted once)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pytest

from cpn.api import constants as k
from cpn.api.usage import ARCHIVE, SLOTS, encode, stored
from cpn.core.accounting import DayUsage, day_of, day_start_s, rolled_up
from cpn.core.gang import Gang, Verdict
from cpn.core.policy import Preemption, Retry
from cpn.runtime import lifecycle
from cpn.runtime.accounting import Accounting, ended_run
from cpn.runtime.metrics import OperatorMetrics
from cpn.runtime.ports import CallFailed
from cpn.runtime.store import Record, preempted
from tests.builders import job

T0 = day_start_s("2026-11-27") + 3600.0


def running(uid: str = "u1", *, gpus: int = 2, workers: int = 2, start: float = T0) -> Record:
    record = Record(
        key=f"ns/{uid}", namespace="ns", name=uid, uid=uid, generation=1, body={},
        user="ada", group="vision",
    )  # fmt: skip
    record.job = job(f"ns/{uid}", gpus=gpus, workers=workers)
    record.phase, record.attempts, record.cluster = k.PHASE_RUNNING, 1, "north"
    record.gpu_type, record.domain, record.member_job = "A100-80GB", "batch", f"{uid}-1"
    record.dispatch_s, record.start_s, record.observed = start - 5, start, True
    return record


def test_a_finished_run_counts_from_its_start_to_its_finish() -> None:
    before = running(gpus=2, workers=2)
    step = lifecycle.succeeded(before, T0 + 600)
    made = ended_run(before, step.record, forgotten=False, now_s=T0 + 700)
    assert made is not None
    assert (made.outcome, made.kind, made.gpus, made.start_s, made.end_s) == (
        "succeeded", "run", 4.0, T0, T0 + 600,
    )  # fmt: skip
    assert (made.user, made.group, made.domain, made.cluster, made.attempt) == (
        "ada", "vision", "batch", "north", 1,
    )  # fmt: skip


@pytest.mark.parametrize("deletion_seen_first", [False, True])
def test_a_preempted_run_ends_when_it_was_preempted(deletion_seen_first: bool) -> None:
    """Booked as preempted, then requeued as such, or first failed by its member Job's
    deletion (seen while the preemption awaits the delete): a fragment either way."""
    before = running()
    preempted(before, T0 + 300, "preempted for higher-ranked ns/x", Preemption())
    if deletion_seen_first:
        step = lifecycle.attempt_failed(before, "its member Job was deleted", Retry(), T0 + 301)
    else:
        step = lifecycle.preempted(before, "preempted for higher-ranked ns/x", 10.0)
    made = ended_run(before, step.record, forgotten=False, now_s=T0 + 302)
    assert made is not None and (made.kind, made.end_s) == ("preempted", T0 + 300)


@pytest.mark.parametrize(
    ("transition", "outcome"),
    [
        (lambda r, now: lifecycle.attempt_failed(r, "boom", Retry(), now), "retried"),
        (lambda r, now: lifecycle.member_lost(r, "north", 60, "policy"), "lost"),
        (lambda r, now: lifecycle.suspended(r), "suspended"),
    ],
)
def test_other_ends_of_a_run_count_until_now(
    transition: Callable[[Record, float], lifecycle.Step], outcome: str
) -> None:
    before = running()
    made = ended_run(before, transition(before, T0 + 100).record, forgotten=False, now_s=T0 + 100)
    assert made is not None and (made.outcome, made.end_s) == (outcome, T0 + 100)


def test_a_deleted_aijob_ends_its_run_as_cancelled() -> None:
    before = running()
    made = ended_run(before, before, forgotten=True, now_s=T0 + 50)
    assert made is not None and made.outcome == "cancelled"


def test_an_attempt_whose_workers_never_all_ran_is_not_a_run() -> None:
    before = running()
    before.phase, before.start_s = k.PHASE_DISPATCHED, 0.0
    verdict = Verdict(Gang.REMOVE, "1 of 2 workers running", T0 + 300)
    step = lifecycle.start_judged(before, verdict, 2, 1, Retry(), T0 + 300)
    assert ended_run(before, step.record, forgotten=False, now_s=T0 + 300) is None


def test_a_run_that_continues_ends_nothing() -> None:
    before = running()
    assert ended_run(before, replace(before, message="x"), forgotten=False, now_s=T0) is None


class MemoryStore:
    """Usage ConfigMaps in memory (name -> data, resourceVersion) that can fail writes."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[dict[str, str], str]] = {}
        self.fail_writes = 0
        self.writes = 0

    def list(self) -> list[tuple[str, dict[str, str], str]]:
        return [(name, data, version) for name, (data, version) in self.data.items()]

    def read(self, name: str) -> tuple[dict[str, str], str]:
        return self.data.get(name, ({}, ""))

    def write(self, name: str, data: Mapping[str, str], version: str) -> None:
        if self.fail_writes:
            self.fail_writes -= 1
            raise CallFailed("409 Conflict", status=409)
        current = self.data.get(name, ({}, ""))[1]
        assert version == current, "written over a newer version"
        self.writes += 1
        self.data[name] = (dict(data), str(int(current or 0) + 1))

    def days(self) -> list[DayUsage]:
        return stored(self.list())[0]

    def total_s(self) -> float:
        days, archive, errors = stored(self.list())
        assert not errors
        return sum(d.gpu_s() for d in days) + sum(t.gpu_s for t in archive.months.values())


async def direct(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def counted(accounting: Accounting) -> float:
    """cpn_gpu_hours_total of the test's one (group, user, GPU type)."""
    labels = {"group": "vision", "user": "ada", "gpu_type": "A100-80GB"}
    for metric in accounting.gpu_hours.collect():
        for sample in metric.samples:
            if sample.name == "cpn_gpu_hours_total" and sample.labels == labels:
                return sample.value
    return 0.0


def ended(accounting: Accounting, uid: str, minutes: float) -> None:
    before = running(uid, gpus=1, workers=1)
    after = lifecycle.succeeded(before, T0 + minutes * 60).record
    accounting.saw(before, after, forgotten=False, now_s=T0 + minutes * 60)


def test_pending_runs_are_written_in_one_batch_and_kept_after_a_failed_write() -> None:
    store = MemoryStore()
    accounting = Accounting(OperatorMetrics().gpu_hours, retention_s=7 * 86400)
    accounting.store = store
    ended(accounting, "a", 60)
    ended(accounting, "b", 30)
    store.fail_writes = 1
    assert asyncio.run(accounting.flush(direct, T0 + 3600)) == 0  # a conflict
    assert len(accounting.pending) == 2 and counted(accounting) == 0
    assert asyncio.run(accounting.flush(direct, T0 + 3600)) == 2  # retried
    assert store.writes == 1 and not accounting.pending
    assert counted(accounting) == pytest.approx(1.5)


def test_a_run_seen_again_after_a_restart_is_counted_once_and_the_counter_resumes() -> None:
    store = MemoryStore()
    first = Accounting(OperatorMetrics().gpu_hours, retention_s=7 * 86400)
    first.store = store
    ended(first, "a", 60)
    asyncio.run(first.flush(direct, T0 + 3600))
    again = Accounting(OperatorMetrics().gpu_hours, retention_s=7 * 86400)  # a new process
    again.store = store
    ended(again, "a", 60)  # the same run, seen again from its member Job
    assert asyncio.run(again.flush(direct, T0 + 3600)) == 0
    assert counted(again) == pytest.approx(1.0)  # read from the store, not added again
    (day,) = store.days()
    assert day.gpu_s() == 3600.0


def test_old_days_are_rolled_up() -> None:
    store = MemoryStore()
    accounting = Accounting(OperatorMetrics().gpu_hours, retention_s=86400)
    accounting.store = store
    ended(accounting, "a", 60)
    asyncio.run(accounting.flush(direct, T0 + 3600))
    later = Accounting(OperatorMetrics().gpu_hours, retention_s=86400)
    later.store = store
    asyncio.run(later.flush(direct, T0 + 3 * 86400))
    (day,) = store.days()
    assert not day.runs and day.gpu_s() == 3600.0
    assert counted(later) == pytest.approx(1.0)


def test_a_slot_taken_by_a_new_day_moves_its_old_day_to_the_archive_once() -> None:
    """Day slots are reused after SLOTS days: the old day is folded into its month first.
    Were the operator to stop between the archive's write and the slot's (the slot still
    holding the archived day), that day counts once, and archiving it again adds nothing."""
    store = MemoryStore()
    accounting = Accounting(OperatorMetrics().gpu_hours, retention_s=86400)
    accounting.store = store
    ended(accounting, "a", 60)
    asyncio.run(accounting.flush(direct, T0 + 3600))
    old_slot = dict(store.data)
    later = T0 + SLOTS * 86400  # the same slot, SLOTS days on
    before = running("b", gpus=1, workers=1, start=later)
    accounting.saw(
        before, lifecycle.succeeded(before, later + 1800).record, forgotten=False, now_s=later
    )
    asyncio.run(accounting.flush(direct, later + 1800))
    days, archive, _ = stored(store.list())
    assert [d.day for d in days] == [day_of(later)] and archive.days == {day_of(T0)}
    assert store.total_s() == 3600.0 + 1800.0
    store.data.update({n: v for n, v in old_slot.items() if n != ARCHIVE})  # slot not rewritten
    assert store.total_s() == 3600.0  # the archived day counts in the archive only
    again = Accounting(OperatorMetrics().gpu_hours, retention_s=86400)
    again.store = store
    again.saw(
        before, lifecycle.succeeded(before, later + 1800).record, forgotten=False, now_s=later
    )
    asyncio.run(again.flush(direct, later + 1800))
    assert store.total_s() == 3600.0 + 1800.0


def test_a_retention_past_the_ring_of_slots_is_cut_to_what_it_holds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    accounting = Accounting(OperatorMetrics().gpu_hours, retention_s=90 * 86400)
    assert accounting.retention_s == (SLOTS - 2) * 86400
    assert "CPN_USAGE_RETENTION_DAYS=90 is outside 0..30: runs are kept 30 days" in caplog.text


def test_a_broken_day_is_left_alone_and_the_others_are_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A usage ConfigMap edited into nonsense is named in the log, left out of the totals
    and not written over; runs of other days are still written."""
    store = MemoryStore()
    store.data["cpn-usage-d99"] = ({"format": "1", "day": "never"}, "1")
    accounting = Accounting(OperatorMetrics().gpu_hours, retention_s=86400)
    accounting.store = store
    ended(accounting, "a", 60)
    assert asyncio.run(accounting.flush(direct, T0 + 3600)) == 1
    assert store.data["cpn-usage-d99"] == ({"format": "1", "day": "never"}, "1")
    assert "usage ConfigMap cpn-usage-d99: 'day' is 'never'" in caplog.text
    assert counted(accounting) == pytest.approx(1.0)


def succeeded_record(uid: str, finish: float) -> Record:
    record = running(uid, gpus=1, workers=1)
    return lifecycle.succeeded(record, finish).record


def test_after_a_restart_recent_successes_are_written_unless_they_were() -> None:
    """Killed between an AIJob's Succeeded status and the usage write, its last run would be
    lost: after the restart the recent successes are written again, the ones the store has
    counted once."""
    store = MemoryStore()
    first = Accounting(OperatorMetrics().gpu_hours, retention_s=86400)
    first.store = store
    ended(first, "a", 60)  # a: written before the kill; b: its write lost
    asyncio.run(first.flush(direct, T0 + 3600))
    restarted = Accounting(OperatorMetrics().gpu_hours, retention_s=86400)
    restarted.store = store
    records = [
        succeeded_record("a", T0 + 3600),
        succeeded_record("b", T0 + 1800),
        succeeded_record("old", T0 - 7200),  # beyond RECOVER_S: not looked at
        running("c"),  # still running: its run ends later
    ]
    assert restarted.recover(records, T0 + 3700) == 2
    assert asyncio.run(restarted.flush(direct, T0 + 3700)) == 1  # b only
    (day,) = store.days()
    assert sorted(r.name for r in day.runs.values()) == ["a", "b"]
    assert counted(restarted) == pytest.approx(1.0 + 0.5)


def test_a_recovered_run_is_dropped_when_its_day_was_rolled_up() -> None:
    """Rolled-up runs are not known by key any more: a recovered run not among the kept
    ones might be among them, so it is not written (it was counted, or is lost: never
    counted twice)."""
    store = MemoryStore()
    first = Accounting(OperatorMetrics().gpu_hours, retention_s=86400)
    first.store = store
    ended(first, "a", 60)
    asyncio.run(first.flush(direct, T0 + 3600))
    (day,) = store.days()
    name = next(iter(store.data))
    folded = rolled_up(day, before_s=float("inf"), budget_bytes=10**6, row_bytes=300)
    store.data[name] = (encode(folded), store.data[name][1])
    restarted = Accounting(OperatorMetrics().gpu_hours, retention_s=86400)
    restarted.store = store
    restarted.recover([succeeded_record("a", T0 + 3600)], T0 + 3700)
    assert asyncio.run(restarted.flush(direct, T0 + 3700)) == 0
    assert store.total_s() == 3600.0 and not restarted.pending
