"""Where a job could run: every (cluster, GPU type) it may use, with what it would cost.

The cycle (:mod:`cpn.core.cycle`), the ETA projection (:mod:`cpn.core.eta`) and the
MILP (:mod:`cpn.core.placement`) weigh the same candidates: a group of the capacity
whose GPU type the job allows, that has a runtime estimate for it and that its data
can reach, costed as ``transfer_weight x transfer + runtime_weight x runtime``.
"""

from __future__ import annotations

from cpn.core.capacity import Capacity
from cpn.core.model import Job, Snapshot
from cpn.core.placement import Candidate
from cpn.core.transfer import transfer_s


def runtime_on(job: Job, gpu_type: str) -> float | None:
    """Predicted runtime of ``job`` on ``gpu_type``, else the user's estimate, else None."""
    value = job.estimate.on(gpu_type)
    if value is None and job.user_estimate_s is not None:
        return job.user_estimate_s
    return value


def candidates(job: Job, capacity: Capacity, snapshot: Snapshot) -> list[Candidate]:
    """Every (cluster, GPU type) the job may use, with its cost parts."""
    policy = snapshot.policy.placement
    runtimes: dict[str, float | None] = {}  # per GPU type, and transfers per cluster
    transfers: dict[str, float | None] = {}
    out = []
    for key in capacity.groups:
        cluster, gpu_type = key
        if gpu_type not in runtimes:
            runtimes[gpu_type] = runtime_on(job, gpu_type) if job.allows(gpu_type) else None
        runtime = runtimes[gpu_type]
        if runtime is None:
            continue
        if cluster not in transfers:
            transfers[cluster] = transfer_s(job, cluster, snapshot)
        transfer = transfers[cluster]
        if transfer is None:
            continue
        cost = policy.transfer_weight * transfer + policy.runtime_weight * runtime
        out.append(Candidate(key, runtime, transfer, cost))  # (positional: faster)
    return out


def order_candidates(method: str, cands: list[Candidate]) -> list[Candidate]:
    """``cands`` in the order placement ``method`` tries them (cheapest first by default)."""
    if method == "first-fit":
        return sorted(cands, key=lambda c: c.key)
    if method == "fastest":
        return sorted(cands, key=lambda c: (c.runtime_s, c.key))
    return sorted(cands, key=lambda c: (c.cost, c.key))
