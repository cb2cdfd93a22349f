"""An overdue gang's reserved room takes no new job (reservation.freeze_overdue_gangs,
issue 16).

Backfill on a reserved node is allowed when the newcomer is predicted to end before the
reservation starts; without labels those predictions miss, the room's start keeps
receding, and a job needing several whole nodes can wait far past FIFO's longest wait.
Under the option, once such a job is behind (draining, past its wait bound, its room
starting later still) nothing new starts on the nodes it reserved.
"""

from __future__ import annotations

import pytest

from cpn.core.cycle import plan_cycle
from cpn.core.policy import QueuePolicy, Reservation
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"


def _policy(freeze: bool, hedge: float = 0.0) -> QueuePolicy:
    """Jobs drain past their FIFO due time; 8 GPUs reserve; no hedging unless ``hedge``."""
    return QueuePolicy(
        reservation=Reservation(
            drain_after_s=None,
            drain_fifo=True,
            fifo_share=0.0,
            hedge_nodes=hedge,
            min_gpus=8,
            freeze_overdue_gangs=freeze,
        )
    )


def _half_busy_until_5000():
    """4-GPU jobs on m-0 and m-1, from 1,000 to 5,000."""
    return [
        running(
            job(f"half{i}", gpus=4, runtime_s=4000.0),
            "m",
            A100,
            (f"m-{i}",),
            start_s=1000,
            end_s=5000,
        )
        for i in (0, 1)
    ]


def _plan(freeze: bool, gang_gpus: int, fifo_due_s: float):
    """Two 8-GPU nodes, each half busy until t=5,000; a third busy until 9,000. The gang
    (``gang_gpus`` on 8-GPU nodes) reserves the first two from 5,000; a 4-GPU job of
    1,000 s, predicted to end at 2,000, would backfill there now."""
    c = cluster("m", nodes("m", 3, gpus=8, free=[4.0, 4.0, 0.0]))
    busy = _half_busy_until_5000()
    busy.append(
        running(
            job("full", gpus=8, runtime_s=8000.0), "m", A100, ("m-2",), start_s=1000, end_s=9000
        )
    )
    gang = job(
        "gang",
        gpus=8,
        workers=gang_gpus // 8,
        submitted_s=0,
        runtime_s=50_000,
        fifo_due_s=fifo_due_s,
    )
    small = job("small", gpus=4, submitted_s=500, runtime_s=1000.0)
    policy = _policy(freeze)
    snap = snapshot(jobs=[gang, small], clusters=[c], running_jobs=busy, now_s=1000, policy=policy)
    return plan_cycle(snap)


@pytest.mark.parametrize(
    ("freeze", "gang_gpus", "fifo_due_s", "backfilled"),
    [
        (False, 16, 100.0, True),  # option off: backfill on predicted ends
        (True, 16, 100.0, False),  # a two-node gang past its due time: its room is frozen
        (True, 16, 50_000.0, True),  # not yet due: backfill as usual
        (True, 8, 100.0, True),  # one node only: not a gang, backfill as usual
    ],
)
def test_an_overdue_gangs_room_takes_no_new_job(freeze, gang_gpus, fifo_due_s, backfilled):
    plan = _plan(freeze, gang_gpus, fifo_due_s)
    started = {s.job_key for s in plan.starts}
    assert "gang" not in started
    assert ("small" in started) is backfilled
    hold = next(h for h in plan.holds if h.job_key == "gang")
    assert hold.reserved_start_s == 5000.0


def test_only_the_overdue_gang_due_first_freezes_its_room():
    """Two overdue two-node gangs: the one due first (t=100) reserves m-0 and m-1 from
    5,000 and its room takes no new job; the other (due at 200) reserves m-2 and m-3 from
    6,000 and is backfilled as usual, so one room at a time stands empty."""
    c = cluster("m", nodes("m", 4, gpus=8, free=[4.0] * 4))
    busy = [
        running(
            job(f"half{i}", gpus=4, runtime_s=end - 1000.0),
            "m",
            A100,
            (f"m-{i}",),
            start_s=1000,
            end_s=end,
        )
        for i, end in enumerate([5000.0, 5000.0, 6000.0, 6000.0])
    ]
    first = job("first", gpus=8, workers=2, submitted_s=0, runtime_s=50_000, fifo_due_s=100.0)
    second = job("second", gpus=8, workers=2, submitted_s=0, runtime_s=50_000, fifo_due_s=200.0)
    small = job("small", gpus=4, submitted_s=500, runtime_s=1000.0)
    policy = _policy(True)
    snap = snapshot(
        jobs=[first, second, small], clusters=[c], running_jobs=busy, now_s=1000, policy=policy
    )
    plan = plan_cycle(snap)
    holds = {h.job_key: h for h in plan.holds}
    assert holds["first"].reserved_start_s == 5000.0
    assert holds["second"].reserved_start_s == 6000.0
    [start] = [s for s in plan.starts if s.job_key == "small"]
    assert set(start.nodes) <= {"m-2", "m-3"}


@pytest.mark.parametrize(("freeze", "where"), [(True, {"s-0"}), (False, {"m-0", "m-1", "s-0"})])
def test_a_frozen_rooms_hedge_still_takes_backfill(freeze, where):
    """An overdue two-node gang reserves m-0 and m-1 from 5,000 and, hedged, claims the
    small node s-0 too (predicted to free at 3,000). Frozen, its own room takes no new job,
    but its hedge is backfilled as usual: a 2-GPU job ending at 2,000 starts on s-0 only.
    Not frozen, it may start on any of them."""
    c = cluster(
        "m",
        nodes("m", 2, gpus=8, free=[4.0, 4.0]),
        nodes("m", 1, gpus=4, free=[2.0], prefix="s"),
    )
    busy = _half_busy_until_5000()
    busy.append(
        running(job("two", gpus=2, runtime_s=2000.0), "m", A100, ("s-0",), start_s=1000, end_s=3000)
    )
    gang = job("gang", gpus=8, workers=2, submitted_s=0, runtime_s=50_000, fifo_due_s=100.0)
    small = job("small", gpus=2, submitted_s=500, runtime_s=1000.0)
    policy = _policy(freeze, hedge=1.0)
    snap = snapshot(jobs=[gang, small], clusters=[c], running_jobs=busy, now_s=1000, policy=policy)
    plan = plan_cycle(snap)
    [start] = [s for s in plan.starts if s.job_key == "small"]
    assert set(start.nodes) <= where
    hold = next(h for h in plan.holds if h.job_key == "gang")
    assert hold.reserved_start_s == 5000.0
