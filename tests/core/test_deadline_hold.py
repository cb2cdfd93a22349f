"""A job holds room to start by the time it would drain (reservation.deadline_hold,
issue 16).

A job drains once it has waited ``fifo_share`` of its wait limit, and only then reserves;
a long job started on its room a little before that keeps it out for the whole of that
run. Under the option the job holds its room from the first cycle it fits nowhere, to
start at that instant at the latest: others still use the room if they end by then.
"""

from __future__ import annotations

import pytest

from cpn.core.cycle import plan_cycle
from cpn.core.policy import Aging, QueuePolicy, Reservation
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"


def _plan(hold: bool, other_runtime_s: float, big_due_s: float, min_gpus: float = 16.0):
    """m-0 has 4 GPUs free until a 4-GPU job ends at 3,000; m-1 is busy until 30,000. The
    8-GPU job, submitted at 0 with a FIFO due time of ``big_due_s``, has waited 1,000 s at
    ``fifo_share`` 0.9 (with 10,000 it drains at 9,000). A 4-GPU job of ``other_runtime_s``
    could start on m-0 now."""
    c = cluster("m", nodes("m", 2, gpus=8, free=[4.0, 0.0]))
    busy = [
        running(
            job("half", gpus=4, runtime_s=2000.0), "m", A100, ("m-0",), start_s=1000, end_s=3000
        ),
        running(
            job("full", gpus=8, runtime_s=29_000.0), "m", A100, ("m-1",), start_s=1000, end_s=30_000
        ),
    ]
    big = job("big", gpus=8, submitted_s=0, runtime_s=5000.0, fifo_due_s=big_due_s)
    other = job("other", gpus=4, submitted_s=500, runtime_s=other_runtime_s)
    policy = QueuePolicy(
        aging=Aging(max_wait_s=None),
        reservation=Reservation(
            drain_after_s=None,
            fifo_share=0.9,
            hedge_nodes=0.0,
            deadline_hold=hold,
            min_gpus=min_gpus,
        ),
    )
    snap = snapshot(jobs=[big, other], clusters=[c], running_jobs=busy, now_s=1000, policy=policy)
    return plan_cycle(snap)


@pytest.mark.parametrize(
    ("hold", "other_runtime_s", "big_due_s", "started", "reserved_at"),
    [
        (False, 20_000.0, 10_000.0, True, None),  # off: the long job takes m-0 till 21,000
        (True, 20_000.0, 10_000.0, False, 9000.0),  # it would end past the deadline: waits
        (True, 2000.0, 10_000.0, True, 9000.0),  # it ends at 3,000, before: starts
        (True, 20_000.0, 30_000.0, True, 27_000.0),  # the deadline is later than its end
    ],
)
def test_a_job_holds_room_to_start_by_its_deadline(
    hold, other_runtime_s, big_due_s, started, reserved_at
):
    plan = _plan(hold, other_runtime_s, big_due_s)
    assert ("other" in {s.job_key for s in plan.starts}) is started
    held = next(h for h in plan.holds if h.job_key == "big")
    assert held.reserved_start_s == reserved_at


@pytest.mark.parametrize(("hold", "reserved_at"), [(False, 3000.0), (True, 9000.0)])
def test_a_job_reserving_for_its_size_is_held_to_its_deadline_too(hold, reserved_at):
    """With ``min_gpus`` 8 the 8-GPU job reserves for its size: at the earliest start,
    3,000 (m-0 frees), or under the option at its deadline, 9,000."""
    plan = _plan(hold, 20_000.0, 10_000.0, min_gpus=8.0)
    held = next(h for h in plan.holds if h.job_key == "big")
    assert held.reserved_start_s == reserved_at
