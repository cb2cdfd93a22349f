"""FIFO due times (cpn.core.fifodue) and draining past them (reservation.drain_fifo)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cpn.core.capacity import Capacity
from cpn.core.cycle import plan_cycle
from cpn.core.fifodue import (
    Outcome,
    Stamp,
    due_times,
    estimated_runtime_s,
    resumed_due_s,
    runtime_ratio,
)
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
    (stamp,) = due_times(snap).values()
    assert stamp.due_s == pytest.approx(1000 + (4 * 1000 + 2 * 300) / 8)
    assert stamp.calibrated_due_s == stamp.due_s  # ratio 1: nothing learnt yet
    assert stamp.basis_s == estimated_runtime_s(new)


def test_calibrated_due_time_scales_the_backlog_by_the_ratio():
    """Ratio 3: the backlog ahead takes three times as long; the job adds its own basis."""
    c = cluster("m", nodes("m", 1, gpus=4))
    first = job("first", gpus=2, submitted_s=10, runtime_s=400)
    second = job("second", gpus=1, submitted_s=20, runtime_s=100)
    due = due_times(snapshot(jobs=[second, first], clusters=[c], now_s=100), ratio=3.0)
    assert due["first"] == Stamp(100.0, 100.0, 400.0)
    assert due["second"] == Stamp(100 + 2 * 400 / 4, 100 + 3 * 2 * 400 / 4, 100.0)


def test_jobs_first_seen_together_queue_in_submit_order():
    """The earlier submitted of two new jobs is due first; the later one waits for its work."""
    c = cluster("m", nodes("m", 1, gpus=4))
    first = job("z-first", gpus=2, submitted_s=10, runtime_s=400)
    second = job("a-second", gpus=1, submitted_s=20, runtime_s=100)
    due = due_times(snapshot(jobs=[second, first], clusters=[c], now_s=100))
    assert {key: stamp.due_s for key, stamp in due.items()} == {
        "z-first": 100.0,
        "a-second": pytest.approx(100 + 2 * 400 / 4),
    }


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


def _run(key: str, gpus: int, basis_s: float | None, age_s: float, now_s: float = 10_000.0):
    j = job(key, gpus=gpus, fifo_basis_s=basis_s)
    return running(j, "m", A100, ("m-0",), start_s=now_s - age_s, end_s=now_s + 1)


def test_ratio_is_one_until_a_job_with_an_estimate_finishes():
    assert runtime_ratio([], [_run("r", 1, 100.0, 5_000.0)], 10_000.0) == 1.0
    assert runtime_ratio([Outcome(1, 0.0, 500.0)], [], 10_000.0) == 1.0


def test_ratio_of_finished_jobs_alone_is_their_work_weighted_mean():
    """Weights are GPUs x estimate: 1 GPU x 100 s ran twice as long, 2 GPUs x 100 s half."""
    finished = [Outcome(1, 100.0, 200.0), Outcome(2, 100.0, 50.0)]
    assert runtime_ratio(finished, [], 0.0) == pytest.approx((2 * 100 + 0.5 * 200) / 300)


def test_a_running_job_counts_for_at_least_its_age():
    """Finished at ratios 1 and 3 (mean 2); a job still running at ratio 2 has outlived the
    first, so it counts towards the longer one: 1 + 2 x 2/3."""
    finished = [Outcome(1, 100.0, 100.0), Outcome(1, 100.0, 300.0)]
    assert runtime_ratio(finished, [], 10_000.0) == pytest.approx(2.0)
    survivor = _run("r", 1, 100.0, 200.0)
    assert runtime_ratio(finished, [survivor], 10_000.0) == pytest.approx(1 + 2 * 2 / 3)
    # what it ran in earlier attempts counts towards its age
    preempted = _run("p", 1, 100.0, 100.0)
    preempted = replace(preempted, job=replace(preempted.job, attained_gpu_s=100.0))
    assert runtime_ratio(finished, [preempted], 10_000.0) == pytest.approx(1 + 2 * 2 / 3)


@settings(max_examples=200, deadline=None)
@given(
    finished=st.lists(
        st.tuples(st.integers(1, 8), st.floats(1, 1e5), st.floats(0, 1e6)), min_size=1, max_size=8
    ),
    ages=st.lists(st.tuples(st.integers(1, 8), st.floats(1, 1e5), st.floats(0, 1e6)), max_size=8),
    extra=st.tuples(st.integers(1, 8), st.floats(1, 1e5), st.floats(0, 1e6)),
)
def test_ratio_never_falls_for_a_job_still_running(finished, ages, extra):
    """A running job is censored at its age: it can only say runtimes are longer than the
    finished jobs alone say, never shorter; the ratio stays within the finished ratios."""
    done = [Outcome(g, b, a) for g, b, a in finished]
    runs = [_run(f"r{i}", g, b, a) for i, (g, b, a) in enumerate(ages)]
    before = runtime_ratio(done, runs, 10_000.0)
    after = runtime_ratio(done, [*runs, _run("x", *extra)], 10_000.0)
    assert after >= before - 1e-9 * max(1.0, before)
    assert before <= max(o.actual_s / o.basis_s for o in done) * (1 + 1e-9)


@pytest.mark.parametrize(
    ("gpus", "ran_s", "drains"), [(1, 0.0, False), (4, 0.0, True), (1, 5.0, False)]
)
def test_small_jobs_drain_on_calibrated_budgets(gpus: int, ran_s: float, drains: bool):
    """Runtimes ran 10x their estimates: the widest calibrated budget is 10x the plain one,
    so a 1-GPU job that waited 90% of the plain widest budget does not drain yet; a 4-GPU
    job (at or above calibrate_below_gpus) still drains on the plain budgets. A 1-GPU job
    preempted after 5 s stays on the calibrated ones."""
    policy = QueuePolicy(reservation=Reservation(drain_after_s=None, fifo_share=0.9))
    widest = job("w", submitted_s=0, fifo_due_s=1000.0, fifo_calibrated_due_s=10_000.0)
    j = job("a", gpus=gpus, submitted_s=0, fifo_due_s=100.0, fifo_calibrated_due_s=1000.0)
    j = replace(j, attained_gpu_s=ran_s * gpus)
    snap = snapshot(
        jobs=[widest, j], clusters=[cluster("m", nodes("m", 1))], now_s=900 + ran_s, policy=policy
    )
    res = Reservations(snap, Capacity([]), QuotaLedger(snap.policy, ()), lambda _: [])
    assert res.draining(j) == drains
    off = replace(policy, reservation=replace(policy.reservation, calibrate_below_gpus=0))
    res = Reservations(replace(snap, policy=off), Capacity([]), QuotaLedger(off, ()), lambda _: [])
    assert res.draining(j)  # off: every job on the plain budgets
