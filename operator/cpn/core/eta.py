"""Estimated start and finish of every waiting job: the queue projected forward.

:func:`project` replays the same :func:`~cpn.core.cycle.plan_cycle` on a
sequence of future snapshots in which running jobs end at their predicted
times and started jobs run for their predicted runtimes. What it returns is
what cpn would do if every prediction came true and nothing new arrived:
the basis of the ETA a researcher sees. Pure, like the cycle itself.

The MILP is swapped for the greedy placement (the projection runs many
cycles; on Gavel's Philly traces keeping it changed no ETA and cost five times
more) and preemption is left out (a projection must not stop anything).

A running job is expected to end at the median of its runtime given that it
is still running, under the log-normal law its estimate states (median and
90th percentile on its GPU type): its predicted end early on, later as it
runs on. One with no stated spread ends at its predicted end, or a moment from
now once past it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from statistics import NormalDist

from cpn.core.capacity import worker_gpus
from cpn.core.model import CyclePlan, Job, Node, Running, Snapshot

#: How far projections go: this many future cycles at most.
MAX_CYCLES = 400

#: z-score of the 90th percentile (``Estimate.high_s``).
_Z90 = 1.2815515655446004
_NORMAL = NormalDist()


@dataclass(frozen=True, slots=True)
class Projection:
    """Predicted start and end of one job (instants, like ``snapshot.now_s``)."""

    start_s: float
    end_s: float
    cluster: str
    gpu_type: str


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


def _free_nodes(snapshot: Snapshot, delta: Delta) -> Snapshot:
    """The snapshot's clusters with ``delta`` applied; metrics dropped (the future has none)."""

    def node(cluster: str, n: Node) -> Node:
        gpus, cpu, mem = delta.get((cluster, n.name), (0.0, 0.0, 0.0))
        return replace(
            n,
            free_gpus=n.free_gpus + gpus,
            free_cpu=n.free_cpu + cpu,
            free_memory_gib=n.free_memory_gib + mem,
            cpu_util=None,
        )

    clusters = tuple(
        replace(c, nodes=tuple(node(c.name, n) for n in c.nodes)) for c in snapshot.clusters
    )
    return replace(snapshot, clusters=clusters)


def expected_end_s(item: Running, now_s: float) -> float:
    """When a job running at ``now_s`` is expected to end (see the module docstring).

    Its planned duration d = predicted end - start is taken as the median of a
    log-normal whose spread comes from the estimate's high/median ratio on its
    GPU type; the answer is the median of that law given it exceeded now - start.
    """
    fallback = now_s + 1.0
    median = item.job.estimate.on(item.gpu_type)
    high = item.job.estimate.high_s.get(item.gpu_type)
    planned = item.predicted_end_s - item.start_s
    elapsed = now_s - item.start_s
    if not median or not high or high <= median or planned <= 0 or elapsed <= 0:
        return max(item.predicted_end_s, fallback)
    sigma = math.log(high / median) / _Z90
    survived = _NORMAL.cdf(math.log(elapsed / planned) / sigma)
    q = min(survived + (1.0 - survived) / 2.0, 1.0 - 1e-12)
    end = item.start_s + planned * math.exp(sigma * _NORMAL.inv_cdf(q))
    return max(end, fallback)


def project(
    snapshot: Snapshot,
    *,
    max_cycles: int = MAX_CYCLES,
    plan: Callable[[Snapshot], CyclePlan] | None = None,
    until: Collection[str] | None = None,
) -> dict[str, Projection]:
    """Start and end of each pending job if predictions hold; jobs not reached are absent.

    With ``until`` (job keys) the projection stops as soon as every one of them
    that is pending has its start: their projections are the same as without it,
    other jobs may be absent (the simulator's first ETAs need only new jobs).
    """
    from cpn.core.cycle import plan_cycle  # local: cycle imports this module's users

    run = plan or plan_cycle
    policy = snapshot.policy
    placement = policy.placement
    if placement.method == "milp":
        placement = replace(placement, method="greedy")
    policy = replace(
        policy, placement=placement, preemption=replace(policy.preemption, enabled=False)
    )
    now = snapshot.now_s
    pending: dict[str, Job] = {j.key: j for j in snapshot.pending if not j.suspended}
    # Running jobs end at their median end given they still run (a moment from now at least).
    running = [replace(r, predicted_end_s=expected_end_s(r, now)) for r in snapshot.running]
    delta: Delta = {}
    state = replace(snapshot, policy=policy)
    out: dict[str, Projection] = {}
    wanted = None if until is None else {k for k in until if k in pending}
    for _ in range(max_cycles):
        if not pending or (wanted is not None and wanted.issubset(out)):
            break
        current = _free_nodes(
            replace(state, now_s=now, pending=tuple(pending.values()), running=tuple(running)),
            delta,
        )
        result = run(current)
        for start in result.starts:
            job = pending.pop(start.job_key)
            end = now + start.transfer_s + start.predicted_runtime_s
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
                )
            )
            _shift(delta, start.cluster, start.nodes, job, -1.0)
        upcoming = [r.predicted_end_s for r in running if r.predicted_end_s > now]
        upcoming += [j.not_before_s for j in pending.values() if j.not_before_s > now]
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
