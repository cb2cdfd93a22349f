"""Why a job waits, or why it went where it went, from one cycle's snapshot and plan.

Pure, like the cycle: :func:`explain` recomputes from the snapshot the terms of
the job's priority formula, the quotas that apply to it, and every candidate
(cluster, GPU type) the placement weighed: predicted runtime, transfer time,
earliest start as running jobs end, completion time, and whether it had room.
``cpn explain`` feeds it the last decision record that saw the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cpn.core.capacity import Capacity, worker_gpus
from cpn.core.model import CyclePlan, Snapshot
from cpn.core.queue import factor_columns
from cpn.core.quota import QuotaLedger
from cpn.core.transfer import transfer_s


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateView:
    """One place the job could have gone."""

    cluster: str
    gpu_type: str
    runtime_s: float
    transfer_s: float
    earliest_start_s: float | None  # seconds from now; None: never, as things stand
    completion_s: float | None  # seconds from now
    room_now: bool
    chosen: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Explanation:
    """Everything the cycle weighed for one job."""

    job_key: str
    outcome: str  # started | waiting | preempted
    reason: str
    message: str
    position: int = 0
    level: str = ""
    score: float = 0.0
    formula: str = ""
    terms: Mapping[str, float] = field(default_factory=dict)
    quotas: tuple[str, ...] = ()
    candidates: tuple[CandidateView, ...] = ()


def explain(snapshot: Snapshot, plan: CyclePlan, job_key: str) -> Explanation:
    """Explain the cycle's decision about ``job_key`` (which must be pending in the snapshot)."""
    jobs = list(snapshot.pending)
    index = next(i for i, j in enumerate(jobs) if j.key == job_key)
    job = jobs[index]
    capacity = Capacity.from_snapshot(snapshot)
    columns = factor_columns(jobs, snapshot, capacity.gpu_types())
    formula = snapshot.policy.formula if snapshot.policy.ordering == "cpn" else ""
    terms = {name: float(values[index]) for name, values in sorted(columns.items())}
    start = next((s for s in plan.starts if s.job_key == job_key), None)
    hold = next((h for h in plan.holds if h.job_key == job_key), None)
    ledger = QuotaLedger(snapshot.policy, snapshot.running)
    quotas = []
    for bucket in ledger.buckets(job):
        limit = bucket.limit
        if limit.gpus is not None:
            quotas.append(f"{bucket.label}: {ledger.used(bucket):g} of {limit.gpus:g} GPUs in use")
        for gpu_type, cap in sorted(limit.per_type.items()):
            quotas.append(
                f"{bucket.label} on {gpu_type}: {ledger.used(bucket, gpu_type):g} of {cap:g} in use"
            )
    candidates = []
    for key in sorted(capacity.groups):
        cluster, gpu_type = key
        runtime = job.estimate.on(gpu_type)
        if not job.allows(gpu_type) or runtime is None:
            continue
        moving = transfer_s(job, cluster, snapshot)
        if moving is None:
            continue
        found = capacity.earliest_fit(job, key, snapshot.now_s)
        wait = None if found is None else found[0] - snapshot.now_s
        candidates.append(
            CandidateView(
                cluster=cluster,
                gpu_type=gpu_type,
                runtime_s=runtime,
                transfer_s=moving,
                earliest_start_s=wait,
                completion_s=None if wait is None else wait + moving + runtime,
                room_now=capacity.fit(job, key) is not None,
                chosen=start is not None and (start.cluster, start.gpu_type) == key,
            )
        )
    candidates.sort(key=lambda c: (c.completion_s is None, c.completion_s or 0.0, c.cluster))
    if start is not None:
        outcome, reason = "started", "Started"
        message = (
            f"started on {start.cluster} ({start.gpu_type}), {len(start.nodes)} worker(s) "
            f"x {worker_gpus(job):g} GPU(s)"
        )
    else:
        outcome = "waiting"
        reason = str(hold.reason) if hold else "Unknown"
        message = hold.message if hold else ""
    return Explanation(
        job_key=job_key,
        outcome=outcome,
        reason=reason,
        message=message,
        position=hold.position if hold else 0,
        level=hold.level if hold else "",
        score=(hold.score if hold else start.score if start else 0.0),
        formula=formula,
        terms=terms,
        quotas=tuple(quotas),
        candidates=tuple(candidates),
    )
