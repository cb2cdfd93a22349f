"""A job needing several whole nodes drains early enough for its room to clear
(reservation.drain_lead, issue 16).

Under ``fifo_share`` a job drains once it has waited that share of FIFO's longest wait.
A gang of whole nodes then still waits for every job on the nodes it reserves to end,
and on the Philly traces those ran past the bound (philly-nov-c's 16-GPU jobs, ee9e8c's
32-GPU jobs). With ``drain_lead`` a job needing more than the fleet's largest node drains
once its wait plus its lead reaches that share: how much later than by their medians the
nodes of its best group empty at the 90th percentile of their jobs' runtime laws given
their ages.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from cpn.core.candidates import candidates
from cpn.core.capacity import Capacity
from cpn.core.model import Job, Running, frozen_map
from cpn.core.policy import QueuePolicy, Reservation
from cpn.core.quota import QuotaLedger
from cpn.core.reservations import Reservations
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"
NOW = 1000.0


def _ran(key: str, node: str, end: float, spread: float) -> Running:
    """An 8-GPU job started on ``node`` now, predicted to end at ``end``; its law's p90 is
    ``spread`` times its median."""
    j = job(key, gpus=8, runtime_s=end - NOW)
    if spread > 1:
        high = frozen_map({A100: spread * (end - NOW)})
        j = replace(j, estimate=replace(j.estimate, high_s=high))
    return running(j, "m", A100, (node,), start_s=NOW, end_s=end)


def _draining(waiting: Job, ends: list[float], *, lead: bool, spread: float = 1.0) -> bool:
    """Whether ``waiting`` drains on a cluster of 8-GPU nodes, node i busy until ``ends[i]``
    (fifo_share 0.9 of the widest budget, 3,000 s: it drains at 2,700 s of waiting)."""
    c = cluster("m", nodes("m", len(ends), gpus=8, free=[0.0] * len(ends)))
    busy = [_ran(f"run{i}", f"m-{i}", end, spread) for i, end in enumerate(ends)]
    policy = QueuePolicy(reservation=Reservation(drain_after_s=None, drain_lead=lead))
    snap = snapshot(jobs=[waiting], clusters=[c], running_jobs=busy, now_s=NOW, policy=policy)
    capacity = Capacity.from_snapshot(snap)
    reservations = Reservations(
        snap, capacity, QuotaLedger(snap.policy, ()), lambda j: candidates(j, capacity, snap)
    )
    return reservations.draining(waiting)


GANG = job("gang", gpus=8, workers=2, submitted_s=0, runtime_s=50_000, fifo_due_s=3000.0)


@pytest.mark.parametrize(
    ("ends", "spread", "drains"),
    [
        # two nodes 400 s from empty by their medians, 2,000 s at a p90 five times that:
        # waited 1,000 + a lead of 1,600 < 2,700
        ([1400.0, 1400.0], 5.0, False),
        # at a p90 six times the median 2,400 s: 1,000 + a lead of 2,000 >= 2,700
        ([1400.0, 1400.0], 6.0, True),
        # the two nodes that empty first by their medians clear in 1,000 s, at a p90
        # twice that in 2,000 s: 1,000 + 1,000 < 2,700
        ([1500.0, 2000.0, 9000.0], 2.0, False),
        # the two that empty first at the p90 (3,000 and 5,100 s away; by their medians
        # 1,700 s): 1,000 + 3,400 >= 2,700
        ([2000.0, 9000.0, 2700.0], 3.0, True),
    ],
)
def test_a_gang_drains_once_its_wait_and_what_its_rooms_p90_adds_to_the_median_reach_the_share(
    ends, spread, drains
):
    """The lead is how much later than by their medians its room empties at the 90th
    percentile of the jobs' runtime laws given their ages: what the predictions may miss."""
    assert _draining(GANG, ends, lead=True, spread=spread) is drains
    assert _draining(GANG, ends, lead=False, spread=spread) is False  # waited 1,000 of 2,700


@pytest.mark.parametrize("ends", [[1400.0, 1400.0], [2000.0, 9000.0, 2700.0]])
def test_exact_runtimes_give_no_lead(ends):
    """Laws as narrow as their medians (labelled jobs): the room clears as predicted and
    the share's margin is left for it; counting the whole clearing time as a lead drained
    gangs early for nothing (labelled 6c71a0: average JCT 101.87 -> 108.92 h)."""
    assert _draining(GANG, ends, lead=True, spread=1.0) is False


@pytest.mark.parametrize("gpus", [4, 8])
def test_a_job_on_one_node_has_no_lead(gpus):
    """Four or eight GPUs on 8-GPU nodes: it drains on its wait alone (draining early,
    single-node jobs crowded the reservations on philly-nov-a)."""
    small = job("small", gpus=gpus, submitted_s=0, runtime_s=50_000, fifo_due_s=3000.0)
    assert _draining(small, [2000.0, 9000.0], lead=True) is False


def test_a_gang_that_fits_no_group_drains_on_its_wait_alone():
    """Three whole nodes on a two-node cluster: no room ever clears, no lead."""
    huge = job("huge", gpus=8, workers=3, submitted_s=0, runtime_s=50_000, fifo_due_s=3000.0)
    assert _draining(huge, [1100.0, 1100.0], lead=True) is False
