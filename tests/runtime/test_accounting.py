"""The operator's accounting: which transitions end a run, and how the pending records
reach the usage store (batched, retried after a failed write, counted once)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cpn.api import constants as k
from cpn.core.accounting import DayUsage, day_start_s
from cpn.core.gang import Gang, Verdict
from cpn.core.policy import Retry
from cpn.runtime import lifecycle
from cpn.runtime.accounting import Accounting, ended_run
from cpn.runtime.ports import CallFailed
from cpn.runtime.store import Record
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


def test_a_preempted_run_ends_when_it_was_preempted() -> None:
    before = running()
    before.preempted_s = T0 + 300
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
    """A usage store in memory that can fail its next writes (a conflict)."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[DayUsage, str]] = {}
        self.fail_writes = 0
        self.writes = 0

    def days(self) -> list[tuple[DayUsage, str]]:
        return list(self.data.values())

    def read(self, day: str) -> tuple[DayUsage, str]:
        return self.data.get(day, (DayUsage(day), ""))

    def write(self, day: DayUsage, version: str) -> None:
        if self.fail_writes:
            self.fail_writes -= 1
            raise CallFailed("409 Conflict", status=409)
        current = self.data.get(day.day, (None, ""))[1]
        assert version == current, "written over a newer version"
        self.writes += 1
        self.data[day.day] = (day, str(int(current or 0) + 1))


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
    accounting = Accounting(CollectorRegistry(), retention_s=7 * 86400)
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
    first = Accounting(CollectorRegistry(), retention_s=7 * 86400)
    first.store = store
    ended(first, "a", 60)
    asyncio.run(first.flush(direct, T0 + 3600))
    again = Accounting(CollectorRegistry(), retention_s=7 * 86400)  # a new process
    again.store = store
    ended(again, "a", 60)  # the same run, seen again from its member Job
    assert asyncio.run(again.flush(direct, T0 + 3600)) == 0
    assert counted(again) == pytest.approx(1.0)  # read from the store, not added again
    ((day, _),) = store.days()
    assert day.gpu_s() == 3600.0


def test_old_days_are_rolled_up() -> None:
    store = MemoryStore()
    accounting = Accounting(CollectorRegistry(), retention_s=86400)
    accounting.store = store
    ended(accounting, "a", 60)
    asyncio.run(accounting.flush(direct, T0 + 3600))
    later = Accounting(CollectorRegistry(), retention_s=86400)
    later.store = store
    asyncio.run(later.flush(direct, T0 + 3 * 86400))
    ((day, _),) = store.days()
    assert not day.runs and day.gpu_s() == 3600.0
    assert counted(later) == pytest.approx(1.0)
