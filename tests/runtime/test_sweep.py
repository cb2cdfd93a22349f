"""The restart rules: which member Jobs the sweep deletes (orphans and stale attempts, never
the live attempt, the finished one, or one dispatched just before a crash and not yet
recorded), and which records go back to the queue (Dispatched, but no member has the Job)."""

from __future__ import annotations

import pytest

from cpn.api import constants as k
from cpn.runtime.following import uncreated, why_stale
from cpn.runtime.store import Record


def record(phase: str, attempts: int, *, cluster: str = "", member_job: str = "") -> Record:
    return Record(
        key="ns/a",
        namespace="ns",
        name="a",
        uid="u1",
        generation=1,
        body={},
        user="ns",
        group="ns",
        phase=phase,
        attempts=attempts,
        cluster=cluster,
        member_job=member_job,
    )


def test_a_job_whose_aijob_is_gone_is_deleted() -> None:
    """No record for the Job's origin UID: the AIJob was deleted, the Job goes."""
    assert why_stale(None, "m1", "a-1", 1) == "its AIJob is gone"


@pytest.mark.parametrize("phase", [k.PHASE_DISPATCHED, k.PHASE_RUNNING])
def test_the_live_attempt_is_kept_only_on_its_cluster(phase: str) -> None:
    """The running attempt stays; the same name on another cluster is a stale copy."""
    live = record(phase, 2, cluster="m1", member_job="a-2")
    assert why_stale(live, "m1", "a-2", 2) is None
    assert why_stale(live, "m2", "a-2", 2) is not None
    assert "attempt 1 is stale" in str(why_stale(live, "m1", "a-1", 1))


@pytest.mark.parametrize("phase", [k.PHASE_SUCCEEDED, k.PHASE_FAILED])
def test_the_finished_attempt_is_kept_and_earlier_ones_go(phase: str) -> None:
    """A finished AIJob keeps the Job that ran it (its record) and loses older attempts."""
    done = record(phase, 2, cluster="m1", member_job="a-2")
    assert why_stale(done, "m1", "a-2", 2) is None
    assert why_stale(done, "m1", "a-1", 1) is not None


def test_a_job_dispatched_before_its_status_landed_is_kept() -> None:
    """After a crash the status may still say Queued, attempt 0, while attempt 1 exists
    (created, maybe already finished): deleting it would run the job a second time."""
    queued = record(k.PHASE_QUEUED, 0)
    assert why_stale(queued, "m1", "a-1", 1) is None
    requeued = record(k.PHASE_QUEUED, 1)  # attempt 1 failed or was preempted
    assert why_stale(requeued, "m1", "a-1", 1) is not None
    assert why_stale(requeued, "m1", "a-2", 2) is None


def test_a_dispatched_record_without_its_job_is_found() -> None:
    """The status said Dispatched (written, then a crash before the create): the synced
    member has no such Job, so the record is found; one whose Job exists is not."""
    cut_off = record(k.PHASE_DISPATCHED, 1, cluster="m1", member_job="a-1")
    landed = record(k.PHASE_RUNNING, 2, cluster="m1", member_job="b-2")
    assert uncreated([cut_off, landed], {"m1": {"b-2": {}}}) == [cut_off]


def test_records_on_an_unsynced_member_or_not_active_are_not_judged() -> None:
    """A member whose Jobs are not listed yet proves nothing; a queued or finished
    record has no Job to miss."""
    away = record(k.PHASE_DISPATCHED, 1, cluster="m2", member_job="a-1")
    queued = record(k.PHASE_QUEUED, 1)
    done = record(k.PHASE_SUCCEEDED, 1, cluster="m1", member_job="a-1")
    assert uncreated([away, queued, done], {"m1": {}}) == []
