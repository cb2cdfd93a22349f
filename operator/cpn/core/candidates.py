"""Where a job could run: every (cluster, GPU type) it may use, with what it would cost.

The cycle (:mod:`cpn.core.cycle`), the ETA projection (:mod:`cpn.core.eta`) and the
MILP (:mod:`cpn.core.placement`) weigh the same candidates: a group of the capacity
in the job's domain (:mod:`cpn.core.domains`), whose GPU type the job allows, that has a
runtime estimate for it and that its data can reach, costed as
``transfer_weight x transfer + runtime_weight x runtime``. The domain is filtered here
once: reservations, preemption and the MILP only ever see these groups.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter

from cpn.core.capacity import Capacity
from cpn.core.domains import job_domain
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
    """Every (cluster, GPU type) of its domain the job may use, with its cost parts."""
    groups = capacity.groups_for(job_domain(snapshot.policy, job))
    policy = snapshot.policy.placement
    transfer_weight, runtime_weight = policy.transfer_weight, policy.runtime_weight
    if not snapshot.policy.data.locality:
        transfer_weight = 0.0  # locality-blind: where data is does not decide where jobs go
    new = tuple.__new__  # Candidate(...) without its __new__'s Python frame
    if not job.inputs and (not job.data_cluster or job.data_gb + job.image_gb <= 0):
        # No data to move (most jobs): every cluster is 0.0 away (see transfer_s), so a
        # candidate's parts depend on its GPU type alone.
        parts: dict[str, tuple[float, float, float]] = {}
        for gpu_type in capacity.types:
            runtime = runtime_on(job, gpu_type) if job.allows(gpu_type) else None
            if runtime is not None:
                cost = transfer_weight * 0.0 + runtime_weight * runtime
                parts[gpu_type] = (runtime, 0.0, cost)
        return [
            new(Candidate, (key, *parts[gpu_type])) for key, gpu_type in groups if gpu_type in parts
        ]
    out = []
    runtimes: dict[str, float | None] = {}  # per GPU type, and transfers per cluster
    transfers: dict[str, float | None] = {}
    for key, gpu_type in groups:
        cluster = key[0]
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
        cost = transfer_weight * transfer + runtime_weight * runtime
        out.append(new(Candidate, (key, runtime, transfer, cost)))
    return out


#: Sort keys of :func:`in_order` (C-level: no Python call per candidate).
_BY_KEY = itemgetter(0)
_BY_RUNTIME = itemgetter(1, 0)
_BY_COST = itemgetter(3, 0)


def in_order(method: str, cands: list[Candidate]) -> Iterator[Candidate]:
    """``cands`` in the order placement ``method`` tries them (cheapest first by
    default), lazily: the first (the one that most often fits) without sorting the rest."""
    if not cands:
        return
    key = _BY_KEY if method == "first-fit" else _BY_RUNTIME if method == "fastest" else _BY_COST
    first = min(cands, key=key)  # sort keys are unique (they end with the group)
    yield first
    rest = sorted(cands, key=key)
    yield from rest[1:]
