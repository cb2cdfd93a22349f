"""The sweep's rule for which member Jobs go: orphans and stale attempts, never the live
attempt, the finished one, or one dispatched just before a crash and not yet recorded."""

from __future__ import annotations

import pytest

from cpn.api import constants as k
from cpn.runtime.engine import why_stale
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
