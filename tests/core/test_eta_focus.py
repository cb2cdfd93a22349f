"""The focused projection (each cycle over the jobs that can act) equals the plain replay."""

from __future__ import annotations

import random
from dataclasses import replace
from types import MappingProxyType

import pytest

from cpn.core import cycle, eta, eta_focus
from cpn.core.eta import project
from cpn.core.model import Cluster, Job, Node, Running, Snapshot
from cpn.core.policy import (
    Aging,
    GroupQuota,
    Level,
    Limit,
    Placement,
    QueuePolicy,
    Quotas,
    Reservation,
)
from tests.builders import job

TYPES = ("K80", "P100", "V100-16GB")

POLICIES = {
    "default": QueuePolicy(),
    "big4": QueuePolicy(reservation=Reservation(min_gpus=4, max_reservations=3)),
    "no-claim-no-backfill": QueuePolicy(
        reservation=Reservation(min_gpus=4, claim_big=False, backfill=False)
    ),
    "draining": QueuePolicy(
        aging=Aging(rate=1.0, max_wait_s=None),
        reservation=Reservation(min_gpus=8, drain_after_s=20 * 3600.0, drain_ratio=1.2),
    ),
    "drain-fifo": QueuePolicy(
        aging=Aging(rate=1.0, max_wait_s=None),
        reservation=Reservation(min_gpus=8, drain_after_s=None, drain_fifo=True),
    ),
    "drain-fifo-share": QueuePolicy(
        aging=Aging(rate=0.0, max_wait_s=None),
        reservation=Reservation(min_gpus=8, drain_after_s=None, drain_fifo=True, fifo_share=0.9),
    ),
    "drain-fifo-and-wait": QueuePolicy(
        aging=Aging(rate=1.0, max_wait_s=None),
        reservation=Reservation(
            min_gpus=8, drain_after_s=20 * 3600.0, drain_ratio=1.2, drain_fifo=True
        ),
    ),
    "wait-for-faster": QueuePolicy(placement=Placement(wait_for_faster=True)),
    "first-of-model-alone": QueuePolicy(placement=Placement(first_of_model_alone=True)),
    "quotas": QueuePolicy(
        quotas=Quotas(
            groups=MappingProxyType(
                {"a": GroupQuota(limit=Limit(gpus=6)), "b": GroupQuota(limit=Limit(gpus=10))}
            )
        )
    ),
    "levels-sjf": QueuePolicy(
        ordering="sjf", levels=(Level(name="big", min_gpus=4), Level(name="rest"))
    ),
    "no-reservation": QueuePolicy(reservation=Reservation(enabled=False)),
    "head": QueuePolicy(reservation=Reservation(head=True)),
    "head-quotas-levels": QueuePolicy(
        reservation=Reservation(head=True, min_gpus=8),
        levels=(Level(name="big", min_gpus=4), Level(name="rest")),
        quotas=Quotas(groups=MappingProxyType({"a": GroupQuota(limit=Limit(gpus=6))})),
    ),
}


def random_snapshot(seed: int, policy: QueuePolicy, pending: int) -> Snapshot:
    """A cluster set partly busy, running jobs ending at various times, a mixed queue."""
    rng = random.Random(seed)
    now = 1_000_000.0
    clusters: list[Cluster] = []
    running: list[Running] = []
    serial = 0
    for c, gpu_type in enumerate(TYPES[: rng.randint(2, 3)]):
        name = f"c{c}"
        nodes = []
        for n in range(rng.randint(2, 4)):
            size = rng.choice((4, 8))
            used = 0
            while used < size and rng.random() < 0.7:
                gpus = rng.choice((1, 1, 2, 4))
                if used + gpus > size:
                    break
                used += gpus
                serial += 1
                end = now + rng.choice((-600.0, 1.0, 1.0)) * rng.uniform(60, 40_000)
                running.append(
                    Running(
                        job=job(f"r{serial}", gpus=gpus, runtime_s=3600.0),
                        cluster=name,
                        gpu_type=gpu_type,
                        nodes=(f"{name}-{n}",),
                        start_s=now - rng.uniform(0, 20_000),
                        predicted_end_s=end,
                    )
                )
            nodes.append(
                Node(
                    cluster=name,
                    name=f"{name}-{n}",
                    gpu_type=gpu_type,
                    gpus=size,
                    free_gpus=float(size - used),
                    gpu_memory_gib=16,
                    cpu=64,
                    free_cpu=64,
                    memory_gib=512,
                    free_memory_gib=512,
                )
            )
        clusters.append(Cluster(name=name, nodes=tuple(nodes)))
    jobs: list[Job] = []
    for i in range(pending):
        gpus = rng.choice((1, 1, 1, 1, 2, 4, 4, 8))
        workers = 2 if gpus >= 4 and rng.random() < 0.3 else 1
        base = rng.lognormvariate(8.0, 1.2)
        runtimes = {t: base * f for t, f in zip(TYPES, (3.0, 1.5, 1.0), strict=True)}
        if rng.random() < 0.2:
            del runtimes[rng.choice(TYPES)]
        fields: dict[str, object] = {"group": rng.choice(("a", "b", "c"))}
        if rng.random() < 0.1:
            fields["gpu_types"] = frozenset({rng.choice(TYPES)})
        if rng.random() < 0.05:
            fields["not_before_s"] = now + rng.uniform(0, 5000)
        if policy.reservation.drain_fifo and rng.random() < 0.7:  # due before, now or later
            fields["fifo_due_s"] = due = now + rng.uniform(-20_000, 40_000)
            if rng.random() < 0.8:  # calibrated: the backlog scaled by a ratio (1-GPU drains)
                fields["fifo_calibrated_due_s"] = now + (due - now) * rng.uniform(0.5, 8.0)
            if rng.random() < 0.2:  # preempted before: its budgets less what it ran
                fields["attained_gpu_s"] = rng.uniform(1.0, 5000.0)
        new = policy.placement.first_of_model_alone and rng.random() < 0.3
        if new:  # a job of a model never seen: it runs alone (cpn.core.alone)
            fields["model"] = f"m{rng.randint(0, 3)}"
        made = job(
            f"j{i:03d}",
            gpus=gpus,
            workers=workers,
            submitted_s=now - rng.choice((0.3, 1.0, 1.0, 3.0)) * rng.uniform(0, 30 * 3600),
            runtime_s=runtimes,
            **fields,
        )
        jobs.append(replace(made, estimate=replace(made.estimate, new_model=True)) if new else made)
    return Snapshot(
        now_s=now,
        # The focus serves greedy placement (under the MILP every projected cycle runs whole).
        policy=replace(policy, placement=replace(policy.placement, method="greedy")),
        pending=tuple(jobs),
        running=tuple(running),
        clusters=tuple(clusters),
    )


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[eta_focus.Focus]:
    """Every focus the projections make, focusing allowed however short the queue."""
    monkeypatch.setattr(eta_focus, "MIN_FOCUS", 0)
    focuses: list[eta_focus.Focus] = []

    class Recording(eta_focus.Focus):
        def __init__(self, *args):
            super().__init__(*args)
            focuses.append(self)

    monkeypatch.setattr(eta, "Focus", Recording)
    return focuses


@pytest.mark.parametrize("head", [2, 5, 16])
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_focused_projection_equals_the_plain_replay(name, head, monkeypatch, made):
    """On random snapshots, every projected start and end is the same with and without focus,
    and some projected cycles did run over a part of the queue only."""
    monkeypatch.setattr(eta_focus, "HEAD", head)
    for seed in range(5):
        snap = random_snapshot(seed * 31 + len(name), POLICIES[name], pending=24 + 6 * seed)
        expected = project(snap, focus=False, max_cycles=200)
        assert expected, "the snapshot projects some job"
        assert project(snap, max_cycles=200) == expected, f"seed {seed}"
    assert made and all(f.cycles > 0 for f in made)
    if head < 16:
        assert sum(f.cycles - f.whole for f in made) > 0


def test_focus_keeps_until_semantics():
    """With ``until`` the focused projection gives the wanted jobs the plain replay's starts."""
    snap = random_snapshot(7, QueuePolicy(), pending=60)
    full = project(snap, focus=False, max_cycles=400)
    wanted = sorted(full)[-3:]
    part = project(snap, until=wanted, max_cycles=400)
    assert {k: part[k] for k in wanted} == {k: full[k] for k in wanted}


def test_a_custom_planner_replays_without_focus():
    """A planner other than plan_cycle sees the whole queue at every cycle."""
    snap = random_snapshot(3, QueuePolicy(), pending=30)
    seen: list[int] = []

    def planner(s: Snapshot):
        seen.append(len(s.pending))
        return cycle.plan_cycle(s)

    out = project(snap, plan=planner, max_cycles=50)
    first = len([j for j in snap.pending if not j.suspended])
    assert seen[0] == first and out == project(replace(snap), focus=False, max_cycles=50)


def test_expected_arrivals_join_at_their_instant_and_may_overtake():
    """A short job expected later starts before a long one waiting now, so the long one's ETA
    moves back; the projection stops once the snapshot's pending jobs are placed."""
    from tests.builders import cluster, nodes, running

    c = cluster("m", nodes("m", 1, gpus=8, gpu_type="V100-16GB", free=[0]))
    r = running(job("r", gpus=8), "m", "V100-16GB", ("m-0",), start_s=0, end_s=1000)
    waiting = job("long", gpus=8, runtime_s=50_000.0, submitted_s=0)
    snap = Snapshot(
        now_s=10.0, policy=QueuePolicy(), pending=(waiting,), running=(r,), clusters=(c,)
    )
    soon = job("short", gpus=8, runtime_s=100.0, submitted_s=500.0)
    late = job("later", gpus=8, runtime_s=100.0, submitted_s=10**7)
    alone = project(snap)
    expected = project(snap, arrivals=[soon, late])
    assert alone["long"].start_s == 1000
    assert expected["short"].start_s == 1000 and expected["long"].start_s == 1100
    assert "later" not in expected
    assert project(snap, arrivals=[soon, late], focus=False) == expected


@pytest.mark.parametrize("seed", range(4))
def test_focus_with_arrivals_equals_the_plain_replay(seed, monkeypatch):
    """Random snapshots and random expected arrivals: focused and plain projections agree."""
    monkeypatch.setattr(eta_focus, "HEAD", 3)
    monkeypatch.setattr(eta_focus, "MIN_FOCUS", 0)
    snap = random_snapshot(100 + seed, POLICIES[sorted(POLICIES)[seed]], pending=30)
    more = random_snapshot(200 + seed, snap.policy, pending=20).pending
    arrivals = [
        replace(j, key=f"new-{j.key}", submit_s=snap.now_s + 3000.0 * i) for i, j in enumerate(more)
    ]
    plain = project(snap, arrivals=arrivals, focus=False, max_cycles=300)
    assert any(k.startswith("new-") for k in plain)
    assert project(snap, arrivals=arrivals, max_cycles=300) == plain


def test_milp_placement_projects_without_focus(made):
    """Under the MILP no focused cycle runs, and the projection is the plain replay."""
    snap = random_snapshot(5, QueuePolicy(), pending=30)
    snap = replace(snap, policy=replace(snap.policy, placement=Placement(method="milp")))
    assert project(snap, max_cycles=100) == project(snap, focus=False, max_cycles=100)
    assert made == []
