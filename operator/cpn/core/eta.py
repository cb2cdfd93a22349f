"""Estimated start and finish of every waiting job: the queue projected forward.

:func:`project` replays the same :func:`~cpn.core.cycle.plan_cycle` on a
sequence of future snapshots in which running jobs end at their predicted
times and started jobs run for their predicted runtimes. What it returns is
what cpn would do if every prediction came true and nothing new arrived:
the basis of the ETA a researcher sees. Pure, like the cycle itself.

The projection places with the policy's own method, the MILP included: the
MILP weighs jobs by rank, not by GPUs, so four 1-GPU jobs ranked just after a
4-GPU job win its room; the greedy placement starts the 4-GPU job instead, and
on Philly trace b436b2 (default policy, oracle runtimes) that told 1-GPU jobs
of the hour-740 burst twice their real wait. Preemption is left out (a
projection must not stop anything).

A running job is expected to end at the median of its runtime given that it
is still running, under the log-normal law its estimate states (median and
90th percentile on its GPU type): its predicted end early on, later as it
runs on. One with no stated spread ends at its predicted end, or a moment from
now once past it.

Speed: see :mod:`cpn.core.eta_focus` (which jobs a projected cycle plans over) and
:mod:`cpn.core.capacity_renew` (one capacity carried from each projected cycle to the
next, so a cycle does not remake every node of the fleet).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from cpn.core.capacity import Capacity, worker_gpus
from cpn.core.eta_focus import Focus
from cpn.core.model import CyclePlan, Job, Node, Running, Snapshot
from cpn.core.runtime_law import (
    expected_end_s,
    mean_level,
    quantile_end_s,
    quantile_s,
    sigma_of,
)

#: How far projections go: this many future cycles at most.
MAX_CYCLES = 400


@dataclass(frozen=True, slots=True)
class Projection:
    """Predicted start and end of one job (instants, like ``snapshot.now_s``).

    ``start_low_s`` and ``start_high_s`` bound the start with the runtimes' uncertainty
    (the 20th and 80th percentiles of the start); None when not computed.
    """

    start_s: float
    end_s: float
    cluster: str
    gpu_type: str
    start_low_s: float | None = None
    start_high_s: float | None = None


Delta = dict[tuple[str, str], tuple[float, float, float]]


def _shift(delta: Delta, cluster: str, nodes: tuple[str, ...], job: Job, sign: float) -> None:
    """Add (sign=+1) or take (-1) what ``job`` holds on ``nodes``."""
    for name in nodes:
        gpus, cpu, mem = delta.get((cluster, name), (0.0, 0.0, 0.0))
        delta[(cluster, name)] = (
            gpus + sign * worker_gpus(job),
            cpu + sign * job.cpu,
            mem + sign * job.memory_gib,
        )


def _without_metrics(snapshot: Snapshot) -> Snapshot:
    """The snapshot with its nodes' measured utilisation dropped (the future has none)."""
    return replace(
        snapshot,
        clusters=tuple(
            replace(c, nodes=tuple(replace(n, cpu_util=None) for n in c.nodes))
            for c in snapshot.clusters
        ),
    )


Made = dict[tuple[str, str], tuple[tuple[float, float, float], Node]]


def _free_nodes(snapshot: Snapshot, delta: Delta, made: Made | None = None) -> Snapshot:
    """The snapshot's clusters with ``delta`` applied: only the nodes it names are made
    anew (ten thousand nodes, a few hundred projected cycles). ``made`` keeps each node
    made with its change: a node whose change is the same as last time is that same
    object (a renewed capacity passes over nodes that are the same object)."""
    touched: dict[str, dict[str, tuple[float, float, float]]] = {}
    for (cluster, name), change in delta.items():
        touched.setdefault(cluster, {})[name] = change
    if not touched:
        return snapshot
    clusters = []
    for c in snapshot.clusters:
        changes = touched.get(c.name)
        if changes:
            nodes = tuple(
                n if n.name not in changes else _changed(n, changes[n.name], made) for n in c.nodes
            )
            c = replace(c, nodes=nodes)
        clusters.append(c)
    return replace(snapshot, clusters=tuple(clusters))


def _changed(node: Node, change: tuple[float, float, float], made: Made | None) -> Node:
    """``node`` with ``change`` added to its free resources (the one made before for the
    same change, if ``made`` holds it)."""
    key = (node.cluster, node.name)
    found = made.get(key) if made is not None else None
    if found is not None and found[0] == change:
        return found[1]
    out = replace(
        node,
        free_gpus=node.free_gpus + change[0],
        free_cpu=node.free_cpu + change[1],
        free_memory_gib=node.free_memory_gib + change[2],
    )
    if made is not None:
        made[key] = (change, out)
    return out


def _plan_with(capacity_of: Callable[[Snapshot], Capacity], snapshot: Snapshot) -> CyclePlan:
    """:func:`~cpn.core.cycle.plan_cycle` on the capacity ``capacity_of`` gives."""
    from cpn.core.cycle import plan_cycle

    return plan_cycle(snapshot, capacity=capacity_of(snapshot))


def _sigma(job: Job, gpu_type: str) -> float:
    """The log-space spread of ``job``'s runtime law on ``gpu_type`` (0: exact)."""
    return sigma_of(job.estimate.on(gpu_type) or 0.0, job.estimate.high_s.get(gpu_type))


def _level(job: Job, gpu_type: str, q: float) -> float:
    """The runtime quantile a range projection runs ``job`` at: ``q``; above one half, at
    least the level of the law's mean (see :func:`project_range`)."""
    return max(q, mean_level(_sigma(job, gpu_type))) if q > 0.5 else q


def project(
    snapshot: Snapshot,
    *,
    max_cycles: int = MAX_CYCLES,
    plan: Callable[[Snapshot], CyclePlan] | None = None,
    until: Collection[str] | None = None,
    focus: bool = True,
    arrivals: Sequence[Job] = (),
    runtime_q: float | None = None,
    renew: bool = True,
) -> dict[str, Projection]:
    """Start and end of each pending job if predictions hold; jobs not reached are absent.

    With ``until`` (job keys) the projection stops as soon as every one of them
    that is pending has its start: their projections are the same as without it,
    other jobs may be absent (the simulator's first ETAs need only new jobs).
    ``focus`` (with :func:`plan_cycle` as the planner and greedy placement) gives
    each projected cycle only the jobs that can act in it (see :class:`Focus`);
    ``focus=False`` is the plain replay over the whole queue, with the same result.
    ``arrivals`` are jobs expected to be submitted later: each joins the queue at
    its ``submit_s`` (they may overtake the pending jobs, and get projections too);
    with arrivals the projection stops once the snapshot's pending jobs (or the
    ``until`` ones) have their starts. With ``runtime_q`` every job runs for the ``q``
    quantile of its runtime law instead of its median (running jobs: given their age,
    :func:`~cpn.core.runtime_law.quantile_end_s`); the queue's order and placement read
    the same estimates as without it (see :func:`project_range`).
    ``renew`` (with :func:`plan_cycle` as the planner) carries one capacity from each
    projected cycle to the next, changing only what changed
    (:class:`~cpn.core.capacity_renew.Renewing`); ``renew=False`` makes it anew each
    time, with the same result.
    """
    from cpn.core.capacity_renew import Renewing
    from cpn.core.cycle import plan_cycle
    from cpn.core.queue import STRICT_ORDERINGS

    run = plan or plan_cycle
    policy = snapshot.policy
    # Same placement as the live cycle (see the module docstring); no preemption.
    policy = replace(policy, preemption=replace(policy.preemption, enabled=False))
    now = snapshot.now_s
    pending: dict[str, Job] = {j.key: j for j in snapshot.pending if not j.suspended}
    # Running jobs end at their median end given they still run (a moment from now at least).
    if runtime_q is None:
        running = [replace(r, predicted_end_s=expected_end_s(r, now)) for r in snapshot.running]
    else:
        running = [
            replace(r, predicted_end_s=quantile_end_s(r, now, _level(r.job, r.gpu_type, runtime_q)))
            for r in snapshot.running
        ]
    delta: Delta = {}
    made: Made = {}
    state = replace(_without_metrics(snapshot), policy=policy, pending=tuple(pending.values()))
    future = sorted(
        (j for j in arrivals if not j.suspended and j.key not in pending),
        key=lambda j: (j.submit_s, j.key),
    )
    focused = None
    use_focus = (
        focus
        and runtime_q is None  # the focus's proofs compare median runtimes
        and run is plan_cycle
        and policy.placement.method == "greedy"
        and policy.ordering not in STRICT_ORDERINGS
        and pending
    )
    capacity_of: Callable[[Snapshot], Capacity] = Capacity.from_snapshot
    if renew and run is plan_cycle:
        capacity_of = Renewing()
        run = partial(_plan_with, capacity_of)
    if use_focus:
        focused = Focus(state, (*state.pending, *future), capacity_of)
        for j in future:
            focused.started(j.key)  # not in the queue until it arrives
    out: dict[str, Projection] = {}
    wanted = None if until is None else {k for k in until if k in pending}
    if wanted is None and future:
        wanted = set(pending)
    arrived = 0
    for _ in range(max_cycles):
        while arrived < len(future) and future[arrived].submit_s <= now:
            pending[future[arrived].key] = future[arrived]
            if focused is not None:
                focused.arrived(future[arrived].key)
            arrived += 1
        if not pending or (wanted is not None and wanted.issubset(out)):
            break
        if focused is None:
            current = replace(state, now_s=now, pending=tuple(pending.values()))
            result = run(_free_nodes(replace(current, running=tuple(running)), delta, made))
        else:
            base = replace(state, now_s=now, pending=(), running=tuple(running))
            result = focused.plan(run, _free_nodes(base, delta, made))
        for start in result.starts:
            job = pending.pop(start.job_key)
            if focused is not None:
                focused.started(job.key)
            runtime = start.predicted_runtime_s
            if runtime_q is not None:
                sigma = _sigma(job, start.gpu_type)
                runtime *= quantile_s(1.0, sigma, _level(job, start.gpu_type, runtime_q))
            end = now + start.transfer_s + runtime
            out[job.key] = Projection(
                start_s=now, end_s=end, cluster=start.cluster, gpu_type=start.gpu_type
            )
            running.append(
                Running(
                    job=job,
                    cluster=start.cluster,
                    gpu_type=start.gpu_type,
                    nodes=start.nodes,
                    start_s=now,
                    predicted_end_s=end,
                    alone=start.alone,
                )
            )
            _shift(delta, start.cluster, start.nodes, job, -1.0)
        upcoming = [r.predicted_end_s for r in running if r.predicted_end_s > now]
        upcoming += [j.not_before_s for j in pending.values() if j.not_before_s > now]
        if arrived < len(future):
            upcoming.append(future[arrived].submit_s)
        if not upcoming:
            break
        now = min(upcoming)
        still = []
        for item in running:
            if item.predicted_end_s <= now:
                _shift(delta, item.cluster, item.nodes, item.job, 1.0)
            else:
                still.append(item)
        running = still
    return out


#: The runtime quantiles :func:`project_range` projects the start's range with.
RANGE_QS = (0.2, 0.8)


def project_range(
    snapshot: Snapshot, *, qs: tuple[float, float] = RANGE_QS, **kwargs: Any
) -> dict[str, Projection]:
    """:func:`project`, each start given a range from the runtimes' uncertainty.

    Two more projections run every job (running and projected to start) for the ``qs``
    quantiles of its runtime law instead of its median (the high one at least at the level
    of the law's mean: a start waits for the sum of the runtimes ahead, and a sum of many
    right-skewed runtimes tends to the sum of their means, far above their medians when the
    law is wide), in the same order: the starts they give bound the start (``start_low_s``
    the earlier of the low one and the point, ``start_high_s`` the later of the high one
    and the point). A job either misses has no range. It propagates the runtime
    distributions to the start: a queue of jobs whose laws are wide (a history with runtimes
    from minutes to days) states a wide range, a queue of well-known jobs a narrow one.
    Costs three projections.
    """
    point = project(snapshot, **kwargs)
    if not point:
        return point
    # Only the start instants of the two bounding projections are kept (10,000 waiting jobs:
    # two fewer sets of Projection objects alive at once).
    low = {key: p.start_s for key, p in project(snapshot, runtime_q=qs[0], **kwargs).items()}
    high = {key: p.start_s for key, p in project(snapshot, runtime_q=qs[1], **kwargs).items()}
    for key, found in point.items():
        a, b = low.get(key), high.get(key)
        if a is not None and b is not None:
            point[key] = replace(
                found,
                start_low_s=min(a, b, found.start_s),
                start_high_s=max(a, b, found.start_s),
            )
    return point
