"""Preemption bookkeeping in the store: attained service, checkpoints, status, restore."""

from __future__ import annotations

from typing import Any

import pytest

from cpn.api import constants as k
from cpn.core.policy import Preemption, QueuePolicy
from cpn.runtime.status import render_status
from cpn.runtime.store import Record, Store, preempted, preemption_status
from tests.runtime.fakes import upsert
from tests.runtime.test_store import FixedEstimator, body

RULES = Preemption(enabled=True, restart_cost_s=10.0, checkpoint_interval_s=30.0)


def running(spec: dict[str, Any] | None = None, **status: Any) -> tuple[Store, Record]:
    doc = body("a", "uid-1")
    doc["spec"].update({"checkpoint": True, **(spec or {})})
    doc["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z", **status}
    store = Store(QueuePolicy(), FixedEstimator())
    return store, upsert(store, doc, user="u", group="g")


def test_a_first_preemption_keeps_whole_intervals_and_counts_all_it_ran() -> None:
    """95 s into its first attempt, with checkpoints every 30 s: 90 s kept, 5 s lost."""
    _, record = running()
    lost = preempted(record, record.start_s + 95.0, "for x", RULES)
    assert (record.checkpointed_s, lost, record.attained_s) == (90.0, 5.0, 95.0)
    assert record.preemptions == 1 and record.preempted_why == "for x"
    assert record.job is not None and record.job.attained_gpu_s == 95.0  # 1 GPU


def test_a_resumed_attempt_computes_only_after_its_restart_cost() -> None:
    """Second preemption 75 s into a resumed attempt: 10 s restart, 65 s computed, 60 kept."""
    _, record = running(preemptions=1, attainedSeconds=95.0, checkpointedSeconds=90.0)
    lost = preempted(record, record.start_s + 75.0, "for y", RULES)
    assert (record.checkpointed_s, lost, record.attained_s) == (150.0, 5.0, 170.0)
    assert record.preemptions == 2


def test_the_jobs_own_interval_wins_over_the_policys() -> None:
    _, record = running({"checkpointIntervalSeconds": 20})
    preempted(record, record.start_s + 95.0, "for x", RULES)
    assert record.checkpointed_s == 80.0


def test_a_job_preempted_before_it_ran_keeps_nothing_and_ran_nothing() -> None:
    """Dispatched but not yet running: no service, no checkpoint, still counted."""
    _, record = running()
    record.phase = k.PHASE_DISPATCHED
    assert preempted(record, record.start_s + 95.0, "for x", RULES) == 0.0
    assert (record.attained_s, record.checkpointed_s, record.preemptions) == (0.0, 0.0, 1)


def test_preemption_status_survives_a_restart_and_feeds_attained_service() -> None:
    """What the status says is what a new process's store reads back, into the Job too."""
    _, record = running()
    assert preemption_status(record) == {}  # never preempted: nothing written
    preempted(record, 1767225695.0, "for x", RULES)
    status = preemption_status(record)
    assert status == {
        "preemptions": 1,
        "lastPreemption": {"time": "2026-01-01T00:01:35Z", "reason": "for x"},
        "attainedSeconds": 95.0,
        "checkpointedSeconds": 90.0,
    }
    doc = body("a", "uid-1")
    doc["spec"]["checkpoint"] = True
    doc["status"] = {"phase": "Queued", **status}
    again = upsert(Store(QueuePolicy(), FixedEstimator()), doc, user="u", group="g")
    assert preemption_status(again) == status
    assert again.job is not None and again.job.attained_gpu_s == pytest.approx(95.0)


def test_a_record_whose_preempted_job_is_not_gone_is_not_offered_to_the_cycle() -> None:
    """One member Job at a time: while draining, the job is not in the snapshot."""
    store, record = running()
    preempted(record, record.start_s + 95.0, "for x", RULES)
    record.phase = k.PHASE_QUEUED
    record.draining = ("member-a", "a-uid1-1")
    assert store.snapshot(0.0, [], {}).pending == ()
    record.draining = None
    (job,) = store.snapshot(0.0, [], {}).pending
    assert job.attained_gpu_s == 95.0 and job.checkpoint


def test_a_preemption_moves_the_fifo_due_time_by_what_the_attempt_ran() -> None:
    """The due time is a wait budget (cpn.core.fifodue): the 95 s it ran are added, on the
    record (status.fifoDue) and on the job the next cycle sees. The calibrated due time
    stays: what a stopped attempt ran counts against the calibrated budget."""
    store, record = running()
    record.fifo_due_s = record.start_s + 50.0
    record.fifo_calibrated_due_s = record.start_s + 500.0
    preempted(record, record.start_s + 95.0, "for x", RULES)
    assert record.fifo_due_s == record.start_s + 145.0
    assert record.job is not None and record.job.fifo_due_s == record.fifo_due_s
    record.phase = k.PHASE_QUEUED
    (job,) = store.snapshot(0.0, [], {}).pending
    assert (job.fifo_due_s, job.fifo_calibrated_due_s) == (
        record.start_s + 145.0,
        record.start_s + 500.0,
    )


def test_the_work_a_preempted_job_needed_leaves_out_what_its_preemptions_threw_away() -> None:
    """For the runtime ratio (cpn.core.fifodue) a job counts the work FIFO would have run:
    preempted once after 95 s with 90 s checkpointed, then 200 s to the end (10 s of it
    the restart): 295 s held, less the 5 s lost and the 10 s restart: 280 s."""
    from cpn.runtime.store import work_s

    _, record = running()
    preempted(record, record.start_s + 95.0, "for x", RULES)
    record.actual_s = record.attained_s + 200.0
    assert work_s(record, RULES.restart_cost_s) == 295.0 - 5.0 - RULES.restart_cost_s
    never = running()[1]
    never.actual_s = 300.0
    assert work_s(never, RULES.restart_cost_s) == 300.0  # never preempted: all of it


def test_failed_attempts_survive_a_restart_apart_from_attempts() -> None:
    """status.failedAttempts is written beside status.attempts and read back on its own: a
    new process keeps counting only the failures towards retry.max_attempts."""
    doc = body("a", "uid-1")
    doc["status"] = {"phase": "Queued", "attempts": 4, "failedAttempts": 1, "preemptions": 2}
    record = upsert(Store(QueuePolicy(), FixedEstimator()), doc, user="u", group="g")
    assert (record.attempts, record.failed_attempts, record.preemptions) == (4, 1, 2)
    written, _ = render_status(record, 0.0)
    assert (written["attempts"], written["failedAttempts"]) == (4, 1)
