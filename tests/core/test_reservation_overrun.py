"""Reservations beside running jobs past their predicted ends, and backfill by resource.

A running job past its predicted end still holds its GPUs, but reservations see its
room as freeing now. These snapshots pin what the cycle then does (see
docs/policy.md, ``reservation``).
"""

from __future__ import annotations

from dataclasses import replace

from cpn.core.cycle import plan_cycle
from cpn.core.model import CyclePlan, Job, Node, Running, Snapshot
from cpn.core.policy import GroupQuota, Limit, QueuePolicy, Quotas, Reservation
from cpn.core.presets import PRESETS
from tests.builders import cluster, job, nodes, running, snapshot

A100, V100 = "A100-80GB", "V100-32GB"
NOW = 1000.0


def _policy(**fields: object) -> QueuePolicy:
    """cpn's default policy; every job older than 100 s drains (so each gets a reservation)."""
    reservation = Reservation(min_gpus=16, claim_big=False, drain_after_s=100.0, drain_ratio=0.0)
    return replace(PRESETS["default"], reservation=reservation, **fields)  # type: ignore[arg-type]


def _holder(key: str, node: Node, gpus: int, end_s: float, group: str = "") -> Running:
    """A running job of ``gpus`` GPUs on ``node``, predicted to end at ``end_s``."""
    return running(
        job(key, gpus=gpus, group=group), node.cluster, node.gpu_type, (node.name,), end_s=end_s
    )


def _starts(plan: CyclePlan) -> dict[str, tuple[str, ...]]:
    return {s.job_key: s.nodes for s in plan.starts}


def _reserved(plan: CyclePlan) -> dict[str, float]:
    return {h.job_key: h.reserved_start_s for h in plan.holds if h.reserved_start_s is not None}


def _mutual(end_s: float, end1_s: float | None = None) -> Snapshot:
    """Node a0 has 1 GPU free and 1 held until ``end_s``, a1 has 2 held until ``end1_s``
    (default the same). ``big`` (2 GPUs, oldest) reserves a0, ``small`` (1 GPU, ranked
    first) then reserves a1."""
    a0, a1 = nodes("c", 2, gpus=2, free=[1.0, 0.0])
    return snapshot(
        now_s=NOW,
        policy=_policy(),
        clusters=[cluster("c", (a0, a1))],
        running_jobs=[_holder("r0", a0, 1, end_s), _holder("r1", a1, 2, end1_s or end_s)],
        jobs=[
            job("big", gpus=2, submitted_s=0.0, runtime_s=5000.0),
            job("small", gpus=1, submitted_s=10.0, runtime_s=5000.0),
        ],
    )


def test_two_reserved_jobs_do_not_wait_on_each_others_room_when_jobs_overrun() -> None:
    """Running jobs past their ends: the job that fits the free GPU starts, the other keeps a
    reservation due now (before: both waited, each on room the other could use)."""
    plan = plan_cycle(_mutual(end_s=500.0))
    assert _starts(plan) == {"small": ("c-0",)}
    assert _reserved(plan) == {"big": NOW}


def test_a_reservation_on_paper_room_leaves_gpus_free_now_to_others() -> None:
    """Every running job is past its predicted end. ``big`` (2 GPUs, oldest) finds paper
    room due now on a 4-GPU node with nothing free and on a 2-GPU node with 1 GPU free: it
    holds the first, so ``one`` (1 GPU) starts on the free GPU and ``pair`` (2 x 1 GPU) finds
    no room beside them (before: ``big`` held the node with the free GPU, ``pair`` the
    other, and ``one`` waited beside a GPU it fits that no start would have delayed)."""
    n4, n1, n2 = (
        *nodes("c", 1, gpu_type=V100, gpus=4, free=[0.0], prefix="four"),
        *nodes("c", 1, gpu_type=V100, gpus=1, free=[0.0], prefix="one"),
        *nodes("c", 1, gpu_type=V100, gpus=2, free=[1.0], prefix="two"),
    )
    snap = snapshot(
        now_s=NOW,
        policy=_policy(),
        clusters=[cluster("c", (n4, n1, n2))],
        running_jobs=[
            _holder("r4", n4, 4, 0.0),
            _holder("r1", n1, 1, 0.0),
            _holder("r2", n2, 1, 0.0),
        ],
        jobs=[
            job("big", gpus=2, submitted_s=0.0, runtime_s={V100: 10.0}),
            job("one", gpus=1, submitted_s=1.0, runtime_s={V100: 10.0}),
            job("pair", gpus=1, workers=2, submitted_s=2.0, runtime_s={V100: 10.0}),
        ],
    )
    plan = plan_cycle(snap)
    assert _starts(plan) == {"one": ("two-0",)}
    assert _reserved(plan) == {"big": NOW}


def test_a_reservation_due_later_keeps_its_nodes() -> None:
    """Predictions ahead: the small job would delay the big one's start on a0, and the big
    reservation does not move to a1 even though a1 frees as soon, so both wait."""
    plan = plan_cycle(_mutual(end_s=2000.0))
    assert _starts(plan) == {}
    assert _reserved(plan) == {"big": 2000.0, "small": 2000.0}


def test_a_job_starts_beside_a_reservation_on_the_room_it_leaves() -> None:
    """A reservation holds what its job needs, not the whole node: a 1-GPU job starts on the
    3 GPUs free beside a reservation for 1 of them (before: the whole node was held)."""
    (a0,) = nodes("c", 1, gpus=1, free=[0.0], prefix="a")
    (v0,) = nodes("c", 1, gpu_type=V100, gpus=4, free=[3.0], prefix="v")
    snap = snapshot(
        now_s=NOW,
        policy=_policy(),
        clusters=[cluster("c", (a0,), (v0,))],
        running_jobs=[_holder("ra", a0, 1, 2000.0), _holder("rv", v0, 1, 2000.0)],
        jobs=[
            job("a-v100", runtime_s={V100: 10.0}),
            job("b-any", runtime_s={A100: 10.0, V100: 10.0}, priority=1),
        ],
    )
    plan = plan_cycle(snap)
    assert _starts(plan) == {"a-v100": ("v-0",), "b-any": ("v-0",)}


def test_room_free_now_is_not_traded_for_room_held_past_its_end() -> None:
    """A job may not push a reservation that can start now on free room onto a node a job
    past its predicted end still holds: the reserved job starts, the other waits."""
    free, late = nodes("c", 2, gpus=2, free=[2.0, 0.0])
    snap = snapshot(
        now_s=NOW,
        policy=_policy(),
        clusters=[cluster("c", (free, late))],
        running_jobs=[_holder("r", late, 2, 500.0)],
        jobs=[
            job("old-big", gpus=2, submitted_s=0.0, runtime_s=5000.0),
            job("short", gpus=1, submitted_s=900.0, runtime_s=10.0, priority=1),
        ],
    )
    plan = plan_cycle(snap)
    assert _starts(plan) == {"old-big": ("c-0",)}


def test_a_holder_over_its_quota_leaves_its_room_to_others() -> None:
    """A reservation whose job the cycle's earlier starts put over its group's quota is
    dropped: the room goes to a job that can start (before: it stayed idle)."""
    both: dict[str, float] = {A100: 10.0, V100: 10.0}
    a = nodes("c", 3, gpus=1, free=[0.0, 1.0, 1.0], prefix="a")
    (v0,) = nodes("c", 1, gpu_type=V100, gpus=2, prefix="v")
    quotas = Quotas(groups={"g": GroupQuota(limit=Limit(gpus=4.0))})
    specs: list[tuple[str, int, dict[str, float]]] = [
        ("j0", 1, both),
        ("j1", 2, {V100: 10.0}),
        ("j2", 1, both),
        ("j3", 1, {V100: 10.0}),
    ]
    pending: list[Job] = [
        job(k, workers=w, runtime_s=rt, group="g", submitted_s=0.0) for k, w, rt in specs
    ]
    snap = snapshot(
        now_s=NOW,
        policy=_policy(quotas=quotas),
        clusters=[cluster("c", a, (v0,))],
        running_jobs=[_holder("r", a[0], 1, 0.0, group="g")],
        jobs=pending,
    )
    plan = plan_cycle(snap)
    assert _starts(plan)["j3"] == ("v-0",)
    assert "j1" not in _reserved(plan)


def quota_voids_a_reservation(big_user: str) -> Snapshot:
    """Node a (A100) has 3 GPUs free and 1 held until NOW + 1, node v (V100) 7 free and 1
    held by a job past its predicted end. ``big`` (2 x 2 GPUs, ranked first) reserves a,
    where it completes soonest; ``wide`` (2 x 2 GPUs of user u1, ranked last) claims v,
    due now, so ``big`` may not start there. User u1 may use 4 GPUs: ``small`` (u1,
    ranked second) starts beside ``wide`` and puts it over its quota, so ``wide`` loses
    its reservation. (A property test's example: tests/core/test_properties.py.)"""
    a = nodes("c", 1, gpus=4, free=[3.0], prefix="a")
    v = nodes("c", 1, gpu_type=V100, gpus=8, free=[7.0], prefix="v")
    quotas = Quotas(groups={"g": GroupQuota(limit=Limit(gpus=16.0), users={"u1": Limit(gpus=4.0)})})
    reservation = Reservation(min_gpus=4, claim_big=True, drain_after_s=None)
    policy = replace(PRESETS["gavel"], quotas=quotas, reservation=reservation)
    fast_a100: dict[str, float] = {A100: 10.0, V100: 12.0}
    return snapshot(
        now_s=NOW,
        policy=policy,
        clusters=[cluster("c", a, v)],
        running_jobs=[_holder("ra", a[0], 1, NOW + 1.0), _holder("rv", v[0], 1, 0.0)],
        jobs=[
            job("big", gpus=2, workers=2, runtime_s=fast_a100, user=big_user, group="g"),
            job("small", runtime_s={V100: 10.0}, user="u1", group="g"),
            job("wide", gpus=2, workers=2, runtime_s={V100: 10.0}, user="u1", group="g"),
        ],
    )


def test_a_reserved_job_waits_when_one_ranked_below_takes_its_quota() -> None:
    """``big`` is of user u1 too: once ``small`` started, the room ``wide`` held would fit
    ``big`` but its quota does not (4 GPUs, 1 in use, it needs 4), so it keeps its
    reservation and waits."""
    plan = plan_cycle(quota_voids_a_reservation("u1"))
    assert _starts(plan) == {"small": ("v-0",)}
    assert _reserved(plan) == {"big": NOW + 1.0}


def test_room_a_reservation_no_longer_holds_goes_to_the_job_that_waited_for_it() -> None:
    """``big`` (another user) waited to keep ``wide``'s room; ``small`` then put ``wide``
    over its quota and the room is no reservation's: ``big`` starts there (before: it
    waited beside room it fits that no reservation held)."""
    plan = plan_cycle(quota_voids_a_reservation("u2"))
    assert _starts(plan) == {"small": ("v-0",), "big": ("v-0", "v-0")}
    assert _reserved(plan) == {}


def test_a_reservation_over_its_users_whole_quota_may_move_for_a_job_that_fits() -> None:
    """Every running job is past its predicted end, so all their room frees "now" on paper.
    User u1 may use 4 GPUs; the jobs rank in key order. ``1-wide`` (2 x 2 GPUs) reserves
    that room, due now; ``2-one`` (1 GPU) starts, and ``1-wide`` (1 of 4 in use, needs 4)
    waits for quota wherever it goes. ``3-pair`` (2 x 1 GPU; 3 of 4 with it) fits now on
    nodes n2 and n3 and ``1-wide`` still finds paper room due now on n0: ``3-pair`` starts
    (before, a reservation over its user's whole quota might not move, so ``3-pair`` waited
    beside room it fits; a property test's example, tests/core/test_properties.py)."""
    n0 = nodes("c", 1, gpus=8, free=[1.0], prefix="n0")
    n1 = nodes("c", 1, gpus=1, free=[0.0], prefix="n1")
    n2 = nodes("c", 1, gpus=4, free=[3.0], prefix="n2")
    n3 = nodes("c", 1, gpus=1, free=[1.0], prefix="n3")
    quotas = Quotas(groups={"g": GroupQuota(limit=Limit(gpus=16.0), users={"u1": Limit(gpus=4.0)})})
    reservation = Reservation(
        min_gpus=4, claim_big=False, drain_after_s=100.0, drain_ratio=0.0, drain_fifo=False
    )
    policy = replace(PRESETS["gavel"], quotas=quotas, reservation=reservation)
    both: dict[str, float] = {A100: 10.0, V100: 10.0}
    snap = snapshot(
        now_s=NOW,
        policy=policy,
        clusters=[cluster("c", n0, n1, n2, n3)],
        running_jobs=[
            _holder("r0", n0[0], 7, 0.0, group="g"),
            _holder("r1", n1[0], 1, 0.0, group="g"),
            _holder("r2", n2[0], 1, 0.0, group="g"),
        ],
        jobs=[
            job(key, gpus=g, workers=w, runtime_s=both, user="u1", group="g")
            for key, g, w in (("1-wide", 2, 2), ("2-one", 1, 1), ("3-pair", 1, 2))
        ],
    )
    plan = plan_cycle(snap)
    assert set(_starts(plan)) == {"2-one", "3-pair"}
    assert _reserved(plan) == {"1-wide": NOW}
