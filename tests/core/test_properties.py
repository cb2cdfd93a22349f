"""Invariants of plan_cycle for every policy, on generated snapshots (hypothesis)."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cpn.core.candidates import candidates
from cpn.core.capacity import Capacity, worker_gpus
from cpn.core.check import check_plan
from cpn.core.cycle import plan_cycle
from cpn.core.model import Cluster, Job, Node, Running, Snapshot, Start
from cpn.core.policy import GroupQuota, Limit, Quotas, Reservation
from cpn.core.presets import PRESETS
from cpn.core.quota import QuotaLedger
from tests.builders import job
from tests.core.test_reservation_overrun import quota_voids_a_reservation

TYPES = ("A100-80GB", "V100-32GB")


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    clusters: list[Cluster] = []
    running: list[Running] = []
    for c in range(draw(st.integers(1, 3))):
        name = f"c{c}"
        node_list = []
        for n in range(draw(st.integers(1, 4))):
            gpus = draw(st.sampled_from([1, 2, 4, 8]))
            used = draw(st.integers(0, gpus))
            node = Node(
                cluster=name,
                name=f"{name}-n{n}",
                gpu_type=draw(st.sampled_from(TYPES)),
                gpus=gpus,
                free_gpus=float(gpus - used),
                gpu_memory_gib=80,
                cpu=32,
                free_cpu=32,
                memory_gib=256,
                free_memory_gib=256,
                cpu_util=draw(st.none() | st.floats(0, 1)),
            )
            node_list.append(node)
            if used:
                holder = job(
                    f"run-{name}-{n}",
                    gpus=used,
                    group=draw(st.sampled_from("gh")),
                    user=draw(st.sampled_from(["u0", "u2"])),
                )
                running.append(
                    Running(
                        job=holder,
                        cluster=name,
                        gpu_type=node.gpu_type,
                        nodes=(node.name,),
                        start_s=0.0,
                        predicted_end_s=draw(st.floats(0, 5000)),
                    )
                )
        clusters.append(
            Cluster(name=name, nodes=tuple(node_list), ready=draw(st.booleans() | st.just(True)))
        )
    pending = []
    for i in range(draw(st.integers(0, 12))):
        runtimes = {
            t: draw(st.floats(10, 10000)) for t in TYPES if draw(st.booleans()) or t == TYPES[1]
        }
        pending.append(
            job(
                f"j{i}",
                gpus=draw(st.sampled_from([1, 2, 4, 8])),
                workers=draw(st.integers(1, 2)),
                submitted_s=draw(st.floats(0, 1000)),
                runtime_s=runtimes,
                group=draw(st.sampled_from("gh")),
                user=draw(st.sampled_from(["u1", "u2"])),
                priority=draw(st.integers(0, 2)),
                fifo_due_s=draw(st.none() | st.floats(0, 2000)),
            )
        )
    base = PRESETS[draw(st.sampled_from(sorted(PRESETS)))]
    quotas = Quotas(
        groups={
            "g": GroupQuota(
                limit=Limit(gpus=draw(st.sampled_from([4.0, 16.0]))),
                users={
                    "u1": Limit(gpus=4.0),
                    "u2": Limit(jobs=draw(st.sampled_from([None, 1, 2]))),
                },
            )
        }
    )
    reservation = Reservation(
        enabled=draw(st.booleans()),
        min_gpus=4,
        claim_big=draw(st.booleans()),
        drain_after_s=draw(st.sampled_from([None, 100.0, 600.0])),
        drain_ratio=draw(st.sampled_from([0.0, 1.5])),
        drain_fifo=draw(st.booleans()),
        fifo_share=draw(st.sampled_from([0.0, 0.9])),
    )
    policy = replace(base, quotas=quotas, reservation=reservation)
    return Snapshot(
        now_s=1000.0,
        policy=policy,
        pending=tuple(pending),
        running=tuple(running),
        clusters=tuple(clusters),
    )


PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(snapshots())
def test_every_pending_job_is_started_or_held_exactly_once(snap: Snapshot) -> None:
    """No job is placed twice, none is forgotten."""
    plan = plan_cycle(snap)
    keys = [s.job_key for s in plan.starts] + [h.job_key for h in plan.holds]
    assert sorted(keys) == sorted(j.key for j in snap.pending)


@PROPERTY
@given(snapshots())
def test_the_cycle_makes_only_valid_plans(snap: Snapshot) -> None:
    """No node over capacity, starts only on ready clusters with a GPU type the job allows,
    gangs whole, no job twice, quotas kept (cpn.core.check): plan_cycle breaks no rule."""
    assert check_plan(plan_cycle(snap), snap) == ()


@PROPERTY
@given(snapshots())
def test_equal_snapshots_give_equal_plans(snap: Snapshot) -> None:
    """The cycle is deterministic: equal input, equal output (also with the jobs reordered)."""
    again = replace(snap, pending=tuple(reversed(snap.pending)))
    assert plan_cycle(snap) == plan_cycle(again)


@PROPERTY
@given(snapshots())
def test_quotas_are_never_exceeded(snap: Snapshot) -> None:
    """Without lending, a group's and user's GPUs in use stay within quota after the plan."""
    plan = plan_cycle(snap)
    jobs = {j.key: j for j in snap.pending}
    quota = snap.policy.quotas.groups["g"]
    group_used = sum(r.job.gpus for r in snap.running if r.job.group == "g")
    started = [jobs[s.job_key] for s in plan.starts if jobs[s.job_key].group == "g"]
    assert not started or group_used + sum(j.gpus for j in started) <= quota.limit.gpus + 1e-9
    user_started = [j for j in started if j.user == "u1"]
    assert sum(j.gpus for j in user_started) <= 4.0 + 1e-9
    cap = quota.users["u2"].jobs
    if cap is not None:
        u2_running = sum(1 for r in snap.running if (r.job.group, r.job.user) == ("g", "u2"))
        u2_started = sum(1 for j in started if j.user == "u2")
        assert not u2_started or u2_running + u2_started <= cap


def _as_running(snap: Snapshot, plan_starts, jobs: dict[str, Job]) -> Snapshot:
    """The snapshot after the plan's starts: they run until their predicted end."""
    extra = []
    free: dict[tuple[str, str], float] = {}
    for s in plan_starts:
        j = jobs[s.job_key]
        extra.append(
            Running(
                job=j,
                cluster=s.cluster,
                gpu_type=s.gpu_type,
                nodes=s.nodes,
                start_s=snap.now_s,
                predicted_end_s=snap.now_s + s.transfer_s + s.predicted_runtime_s,
            )
        )
        for name in s.nodes:
            free[(s.cluster, name)] = free.get((s.cluster, name), 0.0) + worker_gpus(j)
    clusters = tuple(
        replace(
            c,
            nodes=tuple(
                replace(n, free_gpus=n.free_gpus - free.get((c.name, n.name), 0)) for n in c.nodes
            ),
        )
        for c in snap.clusters
    )
    return replace(snap, running=snap.running + tuple(extra), clusters=clusters)


def _earliest_start(snap: Snapshot, after: Capacity, j: Job) -> float:
    """When ``j`` could start at the earliest in ``after`` (any allowed cluster and type)."""
    times = [
        found[0]
        for key in after.groups
        if j.allows(key[1])
        and j.estimate.on(key[1]) is not None
        and (found := after.earliest_fit(j, key, snap.now_s)) is not None
    ]
    return min(times, default=math.inf)


def _fits_now(snap: Snapshot, after: Capacity, j: Job) -> bool:
    """True if ``j`` fits in room free now (not room of a job past its predicted end)."""
    return any(after.fit(j, c.key) is not None for c in candidates(j, after, snap))


def _all_keep_their_start(
    snap: Snapshot,
    before: Capacity,
    after: Capacity,
    reserved: dict[str, float],
    jobs: dict[str, Job],
) -> bool:
    """True if the reserved jobs, placed one after the other (earliest reserved start
    first) where they fit soonest in ``after``, all start by their reserved starts, and
    those that fit now in ``before`` still fit now. A reservation holds whole nodes
    (``Reservations.excluded``): no two are placed on one node."""
    held: dict[tuple[str, str], frozenset[str]] = {}
    for key, at in sorted(reserved.items(), key=lambda kv: (kv[1], kv[0])):
        j = jobs[key]
        must_now = at <= snap.now_s and _fits_now(snap, before, j)
        best: tuple[float, tuple[str, str], tuple[str, ...]] | None = None
        for cand in candidates(j, after, snap):
            exclude = held.get(cand.key, frozenset())
            if must_now:
                nodes = after.fit(j, cand.key, exclude)
                found = None if nodes is None else (snap.now_s, nodes)
            else:
                found = after.earliest_fit(j, cand.key, snap.now_s, exclude=exclude)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], cand.key, found[1])
        if best is None or best[0] > at + 1e-6:
            return False
        after.take(j, best[1], best[2])
        held[best[1]] = held.get(best[1], frozenset()) | frozenset(best[2])
    return True


@PROPERTY
@given(snapshots())
def test_backfill_never_delays_a_reservation(snap: Snapshot) -> None:
    """After the plan's starts, every reserved job can still start by its reserved time."""
    if snap.policy.preemption.enabled:
        return
    plan = plan_cycle(snap)
    jobs = {j.key: j for j in snap.pending}
    after = Capacity.from_snapshot(_as_running(snap, plan.starts, jobs))
    for hold in plan.holds:
        if hold.reserved_start_s is not None:
            j = jobs[hold.job_key]
            assert _earliest_start(snap, after, j) <= hold.reserved_start_s + 1e-6
            # and it finishes there after its transfer and predicted runtime on that group
            lasts = [c.transfer_s + c.runtime_s for c in candidates(j, after, snap)]
            assert hold.reserved_end_s is not None
            assert any(abs(hold.reserved_end_s - hold.reserved_start_s - d) < 1e-6 for d in lasts)


@PROPERTY
@given(snapshots())
@example(quota_voids_a_reservation("u1"))  # room it fits, but not its quota
@example(quota_voids_a_reservation("u2"))  # room a reservation held, then dropped
def test_a_reserved_job_never_waits_beside_room_it_fits(snap: Snapshot) -> None:
    """A job holding a reservation does not wait while room it fits is free, unless starting
    there would delay another reservation (or take room free now from one due now; one due
    later keeps its nodes, so its cluster and GPU type are not checked here) or break its
    quota (the plan's starts count: a job ranked below it may take the quota it waits with).

    Also when running jobs are past their predicted ends: their room counts as freeing
    now, but it is not free, and two reserved jobs must not each wait for the other's."""
    if snap.policy.preemption.enabled:
        return
    plan = plan_cycle(snap)
    jobs = {j.key: j for j in snap.pending}
    after_snap = _as_running(snap, plan.starts, jobs)
    after = Capacity.from_snapshot(after_snap)
    quota = QuotaLedger(snap.policy, after_snap.running)
    reserved = {h.job_key: h.reserved_start_s for h in plan.holds if h.reserved_start_s is not None}
    # A reservation due later keeps its nodes (not visible here): its cluster and GPU type.
    later = {
        (h.message.split()[3], h.message.split()[1])
        for h in plan.holds
        if h.reserved_start_s is not None and h.reserved_start_s > snap.now_s
    }
    for key in reserved:
        j = jobs[key]
        for cand in candidates(j, after, snap):
            nodes = after.fit(j, cand.key)
            if nodes is None or cand.key in later or quota.exceeds(j, cand.key[1]):
                continue
            start = Start(
                job_key=key,
                cluster=cand.key[0],
                gpu_type=cand.key[1],
                nodes=nodes,
                predicted_runtime_s=cand.runtime_s,
                transfer_s=cand.transfer_s,
            )
            with_j = Capacity.from_snapshot(_as_running(after_snap, (start,), jobs))
            others = {k: at for k, at in reserved.items() if k != key}
            assert not _all_keep_their_start(snap, after, with_j, others, jobs), (key, cand.key)
