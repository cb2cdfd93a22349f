"""FIFO due times (cpn.core.fifodue) and draining past them (reservation.drain_fifo)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cpn.core.capacity import Capacity
from cpn.core.cycle import plan_cycle
from cpn.core.fifodue import due_times, estimated_runtime_s, resumed_due_s
from cpn.core.policy import QueuePolicy, Reservation
from cpn.core.quota import QuotaLedger
from cpn.core.reservations import Reservations
from tests.builders import cluster, job, nodes, running, snapshot

A100, V100, K80 = "A100-80GB", "V100-32GB", "K80"


def test_due_time_is_the_backlog_ahead_over_the_fleet():
    """Running work left (nothing for a job past its predicted end) plus the estimated work
    of jobs pending before it, spread over every GPU of the fleet."""
    c = cluster("m", nodes("m", 2, gpus=4))  # 8 GPUs
    ahead = [
        running(job("r", gpus=4), "m", A100, ("m-0",), end_s=2000),  # 4 x 1000 left
        running(job("late", gpus=4), "m", A100, ("m-1",), end_s=500),  # past its end: 0
    ]
    old = job("old", gpus=2, runtime_s={A100: 100, V100: 300, K80: 500}, fifo_due_s=900.0)
    new = job("new", gpus=1, submitted_s=999)
    snap = snapshot(jobs=[old, new], clusters=[c], running_jobs=ahead, now_s=1000)
    assert due_times(snap) == {"new": pytest.approx(1000 + (4 * 1000 + 2 * 300) / 8)}


def test_jobs_first_seen_together_queue_in_submit_order():
    """The earlier submitted of two new jobs is due first; the later one waits for its work."""
    c = cluster("m", nodes("m", 1, gpus=4))
    first = job("z-first", gpus=2, submitted_s=10, runtime_s=400)
    second = job("a-second", gpus=1, submitted_s=20, runtime_s=100)
    due = due_times(snapshot(jobs=[second, first], clusters=[c], now_s=100))
    assert due == {"z-first": 100.0, "a-second": pytest.approx(100 + 2 * 400 / 4)}


def test_a_stamped_job_is_not_stamped_again():
    c = cluster("m", nodes("m", 1, gpus=4))
    snap = snapshot(jobs=[job("a", fifo_due_s=5.0)], clusters=[c], now_s=100)
    assert due_times(snap) == {}


def test_no_due_times_while_the_fleet_has_no_gpus():
    """With no GPUs the backlog's pace is unknown: nothing is stamped (no division by 0)."""
    assert due_times(snapshot(jobs=[job("a")], clusters=[], now_s=5)) == {}
    empty = cluster("m", nodes("m", 1, gpus=0))
    assert due_times(snapshot(jobs=[job("a")], clusters=[empty], now_s=5)) == {}


@pytest.mark.parametrize(
    ("runtimes", "user_s", "want"),
    [
        ({A100: 100.0, V100: 300.0, K80: 900.0}, 5.0, 300.0),  # median of the predictions
        ({A100: 100.0, V100: 300.0}, None, 200.0),
        ({}, 700.0, 700.0),  # no prediction: the user's estimate
        ({}, None, 0.0),
    ],
)
def test_estimated_runtime(runtimes, user_s, want):
    assert estimated_runtime_s(job("a", runtime_s=runtimes, user_estimate_s=user_s)) == want


@pytest.mark.parametrize(
    ("drain_fifo", "due_s", "want"),
    [(False, 7000.0, ["new"]), (True, 7300.0, ["new"]), (True, 7200.0, ["old"])],
)
def test_a_job_past_its_fifo_due_time_drains(drain_fifo, due_s, want):
    """With drain_fifo a job past its due time claims the room it fits, whatever its rank;
    before it, or without drain_fifo, a higher-ranked small job takes the room."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[4]))
    jobs = [
        job("old", gpus=4, submitted_s=0, runtime_s=100_000, fifo_due_s=due_s),
        job("new", gpus=1, submitted_s=7000, runtime_s=60),
    ]
    policy = QueuePolicy(
        reservation=Reservation(drain_after_s=None, drain_fifo=drain_fifo, fifo_share=0.0)
    )
    plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], now_s=7200, policy=policy))
    assert [s.job_key for s in plan.starts] == want


@settings(max_examples=200, deadline=None)
@given(
    due_s=st.none() | st.floats(0, 10_000),
    now_s=st.floats(0, 10_000),
    submitted_s=st.floats(0, 10_000),
    drain_fifo=st.booleans(),
)
def test_a_job_never_drains_before_its_due_time(due_s, now_s, submitted_s, drain_fifo):
    """Without the wait-based guard a job drains exactly when drain_fifo is on and the clock
    has reached its due time: never before it, never without one."""
    policy = QueuePolicy(
        reservation=Reservation(drain_after_s=None, drain_fifo=drain_fifo, fifo_share=0.0)
    )
    j = job("a", submitted_s=min(submitted_s, now_s), fifo_due_s=due_s)
    snap = snapshot(jobs=[j], clusters=[cluster("m", nodes("m", 1))], now_s=now_s, policy=policy)
    res = Reservations(snap, Capacity([]), QuotaLedger(snap.policy, ()), lambda _: [])
    assert res.draining(j) == (drain_fifo and due_s is not None and now_s >= due_s)


def test_draining_by_wait_still_works_with_drain_fifo():
    """drain_fifo adds a way to drain; a job past drain_after_s still drains without a due."""
    policy = QueuePolicy(
        reservation=Reservation(drain_after_s=100, drain_ratio=0, drain_fifo=True, fifo_share=0.0)
    )
    j = replace(job("a", submitted_s=0), fifo_due_s=None)
    snap = snapshot(jobs=[j], clusters=[cluster("m", nodes("m", 1))], now_s=500, policy=policy)
    res = Reservations(snap, Capacity([]), QuotaLedger(snap.policy, ()), lambda _: [])
    assert res.draining(j)


@pytest.mark.parametrize(
    ("started_s", "due_s", "preempted"),
    [
        (0.0, 500.0, True),  # started 500 s before FIFO would have: 500 s of slack left
        (0.0, None, True),  # never stamped: no budget to keep
        (600.0, 500.0, False),  # started after its due time: requeued, it drains at once
    ],
)
def test_only_a_victim_with_fifo_slack_left_is_preempted(
    started_s: float, due_s: float | None, preempted: bool
):
    """With drain_fifo a preempted job's due time moves later by what it ran, so a job
    that started before its due time may yield; one that started after it would drain as
    soon as it is requeued and claim its room straight back: it is not preempted."""
    from cpn.core.policy import Preemption

    c = cluster("m", nodes("m", 1, gpus=4, free=[0]))
    veteran = job("veteran", gpus=4, runtime_s=40_000.0, checkpoint=True, fifo_due_s=due_s)
    r = running(veteran, "m", A100, ("m-0",), start_s=started_s, end_s=started_s + 40_000)
    policy = QueuePolicy(
        name="p",
        preemption=Preemption(enabled=True, min_run_s=0),
        reservation=Reservation(drain_fifo=True, fifo_share=0.0),
    )
    snap = snapshot(
        jobs=[job("fresh", gpus=4, runtime_s=1_000.0, submitted_s=1000, fifo_due_s=9e9)],
        clusters=[c],
        running_jobs=[r],
        now_s=1000,
        policy=policy,
    )
    want = [("veteran", "fresh")] if preempted else []
    assert [(p.job_key, p.for_key) for p in plan_cycle(snap).preemptions] == want


def test_resumed_due_time_adds_what_the_attempt_ran():
    assert resumed_due_s(100.0, 40.0) == 140.0
    assert resumed_due_s(100.0, -5.0) == 100.0  # a clock step back adds nothing
    assert resumed_due_s(None, 40.0) is None
