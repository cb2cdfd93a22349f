"""A draining gang keeps the group it reserved on (reservation.sticky_gangs, issue 16).

A job needing several whole nodes reserves on the group where it would finish first, and
that is recomputed every cycle. On the Philly traces the running jobs' medians slid as
they outlived them, the best group flipped between GPU types and each move gave the nodes
already cleared back to backfill (philly-nov-c's and 6c71a0's 32-GPU jobs). With
``sticky_gangs`` such a job, once it drains, reserves again on last cycle's group
(``Job.reserved_key``) while that room's start holds (``Job.reserved_start_s``), unless
another group finishes it first even with its room clearing at its 90th percentile.
"""

from __future__ import annotations

import math
from dataclasses import replace

from cpn.core.candidates import candidates
from cpn.core.capacity import Capacity
from cpn.core.cycle import plan_cycle
from cpn.core.model import Cluster, Job, Running, frozen_map
from cpn.core.policy import QueuePolicy, Reservation
from cpn.core.quota import QuotaLedger
from cpn.core.reservations import Reservations
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"
NOW = 10_000.0


def _busy(name: str, ends: list[float], spread: float = 1.0) -> tuple[list[Running], Cluster]:
    """Cluster ``name`` of 8-GPU nodes, node i busy until ``ends[i]`` (``inf``: free now)
    with a job started at 0 whose runtime law's p90 is ``spread`` times its median."""
    frees = [8.0 if end == math.inf else 0.0 for end in ends]
    c = cluster(name, nodes(name, len(ends), gpus=8, free=frees))
    busy = []
    for i, end in enumerate(ends):
        if end == math.inf:
            continue
        j = job(f"{name}-run{i}", gpus=8, runtime_s=end)
        if spread > 1:
            j = replace(j, estimate=replace(j.estimate, high_s=frozen_map({A100: spread * end})))
        busy.append(running(j, name, A100, (f"{name}-{i}",), end_s=end))
    return busy, c


def _policy(sticky: bool) -> QueuePolicy:
    return QueuePolicy(reservation=Reservation(drain_after_s=None, sticky_gangs=sticky))


def _fleet(groups: dict[str, list[float]], spread: float) -> tuple[list[Running], list[Cluster]]:
    busy: list[Running] = []
    clusters = []
    for name, ends in groups.items():
        b, c = _busy(name, ends, spread)
        busy += b
        clusters.append(c)
    return busy, clusters


def _reserved_on(
    waiting: Job, groups: dict[str, list[float]], *, sticky: bool, spread: float = 3.0
) -> tuple[str, str] | None:
    """Where ``waiting`` reserves, alone in the queue, on the clusters ``groups``."""
    busy, clusters = _fleet(groups, spread)
    snap = snapshot(
        jobs=[waiting], clusters=clusters, running_jobs=busy, now_s=NOW, policy=_policy(sticky)
    )
    capacity = Capacity.from_snapshot(snap)
    reservations = Reservations(
        snap, capacity, QuotaLedger(snap.policy, ()), lambda j: candidates(j, capacity, snap)
    )
    res = reservations.reserve(waiting, candidates(waiting, capacity, snap))
    return None if res is None else res.key


# Two whole nodes, waiting since 0 with a FIFO budget of 1,000 s: drains (fifo_share 0.9).
GANG = job("gang", gpus=8, workers=2, submitted_s=0, runtime_s=5_000, fifo_due_s=1_000.0)
# Cluster "a"'s jobs are predicted to end by 14,000, "b"'s by 12,000: "b" finishes the gang
# first (by their medians given their ages, about 20,600 against 19,200). At the p90 of
# laws three times as wide as their medians "b" clears far later than "a"'s median room.
GROUPS = {"a": [11_000.0, 14_000.0], "b": [12_000.0, 12_000.0]}


def test_without_sticky_gangs_the_gang_reserves_where_it_finishes_first():
    assert _reserved_on(replace(GANG, reserved_key=("a", A100)), GROUPS, sticky=False) == (
        "b",
        A100,
    )


def test_with_sticky_gangs_a_draining_gang_keeps_last_cycles_group():
    assert _reserved_on(replace(GANG, reserved_key=("a", A100)), GROUPS, sticky=True) == (
        "a",
        A100,
    )


def test_a_kept_room_whose_start_holds_is_kept_and_one_that_recedes_is_left():
    """ "a"'s room starts at about 20,600 (its jobs' conditional medians). Due at 30,000 last
    cycle, it has come nearer: the gang keeps it. Due at 15,000, it is receding (6c71a0's
    32-GPU job kept a K80 room whose start slid from 27 h to 334 h away): it chooses afresh,
    "b"."""
    nearer = replace(GANG, reserved_key=("a", A100), reserved_start_s=30_000.0)
    assert _reserved_on(nearer, GROUPS, sticky=True) == ("a", A100)
    receding = replace(GANG, reserved_key=("a", A100), reserved_start_s=15_000.0)
    assert _reserved_on(receding, GROUPS, sticky=True) == ("b", A100)


def test_it_moves_where_it_finishes_first_even_if_that_room_clears_late():
    """With certain ends (no spread) "b" finishes it first at its p90 too: it moves."""
    kept = replace(GANG, reserved_key=("a", A100))
    assert _reserved_on(kept, GROUPS, sticky=True, spread=1.0) == ("b", A100)


def test_a_kept_room_far_later_than_the_others_p90_is_left():
    """philly-nov-c's 32-GPU job stuck to a K80 cluster predicted to clear 122 h out while
    another cleared in 20: a kept room is given up once another group beats it at its p90."""
    groups = {"a": [11_000.0, 200_000.0], "b": [12_000.0, 12_000.0]}
    kept = replace(GANG, reserved_key=("a", A100))
    assert _reserved_on(kept, groups, sticky=True) == ("b", A100)


def test_a_gang_that_reserved_nowhere_yet_takes_the_best_group():
    assert _reserved_on(GANG, GROUPS, sticky=True) == ("b", A100)


def test_a_gang_not_draining_yet_is_not_held_to_its_group():
    """Waited 10,000 of a budget of 100,000: it reserves (16 GPUs = min_gpus) but does not
    drain, so it moves to where it finishes first."""
    young = replace(GANG, fifo_due_s=100_000.0, reserved_key=("a", A100))
    assert _reserved_on(young, GROUPS, sticky=True) == ("b", A100)


def test_a_job_on_one_node_is_not_held_to_its_group():
    """One whole node clears in one step: nothing cleared is lost by moving."""
    single = job(
        "one", gpus=8, submitted_s=0, runtime_s=5_000, fifo_due_s=1_000.0, reserved_key=("a", A100)
    )
    groups = {"a": [14_000.0], "b": [12_000.0]}
    assert _reserved_on(single, groups, sticky=True) == ("b", A100)


def test_a_group_with_room_free_now_wins_over_the_kept_one():
    """Both of "b"'s nodes are free: the gang starts there rather than wait on "a"."""
    groups = {"a": [11_000.0, 14_000.0], "b": [math.inf, math.inf]}
    assert _reserved_on(replace(GANG, reserved_key=("a", A100)), groups, sticky=True) == (
        "b",
        A100,
    )


def test_the_kept_group_must_still_fit_the_gang():
    """Last cycle's group has one node left (the other was drained): it reserves elsewhere."""
    groups = {"a": [11_000.0], "b": [12_000.0, 12_000.0]}
    assert _reserved_on(replace(GANG, reserved_key=("a", A100)), groups, sticky=True) == (
        "b",
        A100,
    )


def test_the_plan_carries_the_reserved_group_on_the_hold():
    """plan_cycle's hold names the group its reservation is on, for the shell to stamp."""
    busy, clusters = _fleet(GROUPS, 3.0)
    snap = snapshot(
        jobs=[GANG], clusters=clusters, running_jobs=busy, now_s=NOW, policy=_policy(True)
    )
    (hold,) = plan_cycle(snap).holds
    assert hold.reserved_start_s is not None
    assert hold.reserved_key == ("b", A100)
    kept = replace(snap, pending=(replace(GANG, reserved_key=("a", A100)),))
    assert plan_cycle(kept).holds[0].reserved_key == ("a", A100)
