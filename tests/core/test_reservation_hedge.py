"""An overdue job's reservation claims spare nodes beside its own (reservation.hedge_nodes,
issue 16).

A job draining past its FIFO due time reserves the room predicted to free first; when the
jobs there outlive their estimates its start keeps sliding while other nodes free and take
backfill. With ``hedge_nodes`` a gang (a room of two or more nodes) also claims that
many times its nodes again, those predicted to free next, up to half of the group's nodes
with its room, and starts on whichever room frees first.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cpn.core.candidates import candidates
from cpn.core.capacity import Capacity
from cpn.core.cycle import plan_cycle
from cpn.core.model import Cluster, Job, Running, frozen_map
from cpn.core.policy import QueuePolicy, Reservation
from cpn.core.quota import QuotaLedger
from cpn.core.reservations import Reservations, Reserved
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"


def _policy(hedge: float) -> QueuePolicy:
    return QueuePolicy(
        reservation=Reservation(
            drain_after_s=None, drain_fifo=True, fifo_share=0.0, hedge_nodes=hedge
        )
    )


def _ran(key: str, gpus: int, node: str, end: float, spread: float) -> Running:
    """A job started on ``node`` at t=1,000 (the tests' now), predicted to end at ``end``;
    its runtime law's p90 is ``spread`` times its median (1: an exact estimate), so it ends
    by 1,000 + spread x (end - 1,000) at its p90."""
    j = job(key, gpus=gpus, runtime_s=end - 1000.0)
    if spread > 1:
        high = frozen_map({A100: spread * (end - 1000.0)})
        j = replace(j, estimate=replace(j.estimate, high_s=high))
    return running(j, "m", A100, (node,), start_s=1000.0, end_s=end)


def _busy(ends: list[float], spread: float = 10.0) -> tuple[list[Running], Cluster]:
    """A cluster of 8-GPU nodes, node i busy with one 8-GPU job predicted to end at
    ``ends[i]``, its runtime law ``spread`` wide."""
    c = cluster("m", nodes("m", len(ends), gpus=8, free=[0.0] * len(ends)))
    return [_ran(f"run{i}", 8, f"m-{i}", end, spread) for i, end in enumerate(ends)], c


def _reserved(
    hedge: float, waiting: Job, ends: list[float], now: float = 1000.0, spread: float = 10.0
) -> Reserved | None:
    busy, c = _busy(ends, spread)
    snap = snapshot(
        jobs=[waiting], clusters=[c], running_jobs=busy, now_s=now, policy=_policy(hedge)
    )
    capacity = Capacity.from_snapshot(snap)
    reservations = Reservations(
        snap, capacity, QuotaLedger(snap.policy, ()), lambda j: candidates(j, capacity, snap)
    )
    return reservations.reserve(waiting, candidates(waiting, capacity, snap))


def _gang(key: str = "old", due: float = 100.0) -> Job:
    """A job on two whole 8-GPU nodes, past its FIFO due time unless ``due`` is later."""
    return job(key, gpus=8, workers=2, submitted_s=0, runtime_s=50_000, fifo_due_s=due)


@pytest.mark.parametrize(
    ("hedge", "claimed"),
    [
        (0.0, set()),
        (0.5, {"m-5"}),
        (1.0, {"m-5", "m-3"}),
        (3.0, {"m-5", "m-3"}),  # half of eight nodes: its two and two more
    ],
)
def test_an_overdue_gang_claims_the_nodes_predicted_to_free_next(hedge, claimed):
    """Its start is still its room's (t=2,500, when m-1 and m-4 have both freed); the spare
    nodes are the next to free, in order (m-5 at 2,600, then m-3 at 3,000, never m-0 at
    3,500: the room and its hedge hold at most four of the eight nodes)."""
    ends = [3500.0, 2000.0, 9000.0, 3000.0, 2500.0, 2600.0, 9500.0, 9900.0]
    res = _reserved(hedge, _gang(), ends)
    assert res is not None
    assert res.start_s == 2500.0
    assert res.nodes == frozenset({"m-1", "m-4"} | claimed)
    assert res.spare == frozenset(claimed)


def test_a_job_on_one_node_claims_only_its_own_room():
    """A one-node room starts when its node frees, whichever frees first: no hedge."""
    overdue = job("old", gpus=8, submitted_s=0, runtime_s=50_000, fifo_due_s=100.0)
    res = _reserved(3.0, overdue, [3000.0, 2000.0, 9000.0, 2500.0, 2600.0, 2700.0])
    assert res is not None and res.start_s == 2000.0
    assert res.nodes == frozenset({"m-1"}) and not res.spare


def test_a_gang_holding_half_the_group_claims_no_more():
    """Two of five nodes is already half the group (rounded down): nothing more."""
    res = _reserved(1.0, _gang(), [2000.0, 2500.0, 3000.0, 3500.0, 9000.0])
    assert res is not None and res.start_s == 2500.0
    assert res.nodes == frozenset({"m-0", "m-1"}) and not res.spare


def test_a_job_not_yet_due_claims_only_its_own_room():
    """Before its FIFO due time a job reserving for its size (16 GPUs) is not hedged."""
    res = _reserved(1.0, _gang("big", due=5000.0), [2000.0, 2500.0, 3000.0, 3500.0] * 2)
    assert res is not None and res.nodes == frozenset({"m-0", "m-4"})


@pytest.mark.parametrize(("hedge", "used"), [(0.0, "m-2"), (1.0, "m-3")])
def test_long_jobs_that_fit_elsewhere_keep_off_the_spare_node(hedge, used):
    """The overdue gang waits for m-0 and m-1 (free at 2,000); m-2 frees next (2,500),
    m-3 later (9,000), both with 4 GPUs free now; m-4 and m-5 are full until far later.
    Two long 2-GPU jobs start: without hedging on m-2, with it on m-3, so m-2 is clear if
    m-0's or m-1's job outlives its estimate. The reserved start is the same either way."""
    c = cluster("m", nodes("m", 6, gpus=8, free=[0.0, 0.0, 4.0, 4.0, 0.0, 0.0]))
    busy = [
        _ran("r0", 8, "m-0", 2000.0, 10.0),
        _ran("r1", 8, "m-1", 2000.0, 10.0),
        _ran("r2", 4, "m-2", 2500.0, 10.0),
        _ran("r3", 4, "m-3", 9000.0, 10.0),
        _ran("r4", 8, "m-4", 90_000.0, 10.0),
        _ran("r5", 8, "m-5", 90_000.0, 10.0),
    ]
    long = [job(f"long{i}", gpus=2, submitted_s=900, runtime_s=50_000) for i in range(2)]
    plan = plan_cycle(
        snapshot(
            jobs=[_gang(), *long],
            clusters=[c],
            running_jobs=busy,
            now_s=1000,
            policy=_policy(hedge),
        )
    )
    assert sorted((s.job_key, s.nodes) for s in plan.starts) == [
        ("long0", (used,)),
        ("long1", (used,)),
    ]
    assert [(h.job_key, h.reserved_start_s) for h in plan.holds] == [("old", 2000.0)]


def test_where_the_room_frees_surely_nothing_is_hedged():
    """Exact estimates (Gavel's labelled traces): the reserved room frees at its start, and
    every node predicted to free before it would have been reserved already."""
    ends = [3000.0, 2000.0, 9000.0, 2500.0, 2600.0, 9000.0, 9000.0, 9000.0]
    res = _reserved(3.0, _gang(), ends, spread=1.0)
    assert res is not None and res.nodes == frozenset({"m-1", "m-3"})


def test_a_node_freeing_after_the_rooms_p90_is_not_claimed():
    """With a narrow law (p90 1.6x the median) the room predicted to free at 2,000 frees by
    2,600 at its p90: m-2 (2,500) is claimed, m-3 (3,000) is not, though half the group
    would leave room for two more."""
    ends = [2000.0, 2000.0, 2500.0, 3000.0, 9000.0, 9000.0, 9000.0, 9000.0]
    res = _reserved(3.0, _gang(), ends, spread=1.6)
    assert res is not None and res.nodes == frozenset({"m-0", "m-1", "m-2"})


@settings(max_examples=60, deadline=None)
@example(ends=[1100.0, 1100.0000000000002], hedge=0.0, workers=2)  # one ulp apart
@given(
    ends=st.lists(st.floats(1100, 50_000), min_size=1, max_size=9),
    hedge=st.sampled_from([0.0, 0.5, 1.0, 3.0]),
    workers=st.sampled_from([1, 2, 3]),
)
def test_hedging_never_moves_the_start_and_claims_no_more_than_asked(ends, hedge, workers):
    """Whatever the running jobs' ends: the reservation starts when the room it needs first
    frees, with or without hedging; a gang claims its own nodes plus ceil(hedge x its
    nodes) more, or all the nodes predicted to free before its room's p90 if fewer, never
    past half the group with its room, a one-node job nothing more; and the spare ones
    free no later than any such node it left out."""
    overdue = job("old", gpus=8, workers=workers, submitted_s=0, runtime_s=50_000, fifo_due_s=100.0)
    if workers > len(ends):
        return  # fits nowhere, ever
    plain = _reserved(0.0, overdue, ends)
    hedged = _reserved(hedge, overdue, ends)
    assert plain is not None and hedged is not None
    assert hedged.start_s == plain.start_s
    # Ends closer than the capacity's tolerance (1e-9 s) are one instant: either may be it.
    assert math.isclose(plain.start_s, sorted(ends)[workers - 1], rel_tol=0.0, abs_tol=1e-6)
    assert plain.nodes <= hedged.nodes
    end_of = {f"m-{i}": end for i, end in enumerate(ends)}
    p90 = max(1000.0 + 10.0 * (end_of[n] - 1000.0) for n in plain.nodes)
    sooner = {n for n in end_of if n not in plain.nodes and end_of[n] < p90}
    spare = hedged.nodes - plain.nodes
    assert spare <= sooner
    cap = len(ends) // 2 - workers if workers > 1 else 0
    assert len(spare) == max(0, min(len(sooner), math.ceil(hedge * workers), cap))
    if spare and sooner - spare:
        assert max(end_of[n] for n in spare) <= min(end_of[n] for n in sooner - spare)
