"""Why a job waits, or why it went where it went, from one cycle's snapshot and plan.

Pure, like the cycle: :func:`explain` recomputes from the snapshot the terms of
the job's priority formula, the quotas that apply to it, and every candidate
(cluster, GPU type) the placement weighed: predicted runtime, transfer time,
earliest start as running jobs end, completion time, and whether it had room.
``cpn explain --log`` feeds it the last decision record that saw the job. The
operator uses :func:`choices` (where each started job went, and the runner-up) and
:func:`first_to_free` (which running job's end frees room for a waiting one) to write
the short explanations kept in AIJob status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cpn.core.capacity import Capacity, GroupKey, shape, worker_gpus
from cpn.core.domains import job_domain
from cpn.core.model import CyclePlan, Job, Running, Snapshot, Start
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


#: (shape, alone, group) -> (earliest fit, room now): what a group offers a job of that shape
Fits = dict[tuple[object, ...], tuple[tuple[float, tuple[str, ...]] | None, bool]]


def weighed(
    snapshot: Snapshot,
    capacity: Capacity,
    job: Job,
    start: Start | None = None,
    fits: Fits | None = None,
) -> list[CandidateView]:
    """Every (cluster, GPU type) of its domain ``job`` could use, soonest completion first.
    ``fits``: a memo shared by calls on the same ``capacity`` (jobs of one shape find the
    same room; a thousand starts over ten thousand nodes would otherwise search it again
    for each)."""
    fits = {} if fits is None else fits
    form = (shape(job), capacity.alone(job))
    candidates = []
    chosen = capacity.key_of(start.cluster, start.gpu_type, start.nodes) if start else None
    for key, gpu_type in capacity.groups_for(job_domain(snapshot.policy, job)):
        cluster = key[0]
        runtime = job.estimate.on(gpu_type)
        if not job.allows(gpu_type) or runtime is None:
            continue
        moving = transfer_s(job, cluster, snapshot)
        if moving is None:
            continue
        memo = (*form, key)
        if memo not in fits:
            fits[memo] = (
                capacity.earliest_fit(job, key, snapshot.now_s),
                capacity.fit(job, key) is not None,
            )
        found, room_now = fits[memo]
        wait = None if found is None else found[0] - snapshot.now_s
        candidates.append(
            CandidateView(
                cluster=cluster,
                gpu_type=gpu_type,
                runtime_s=runtime,
                transfer_s=moving,
                earliest_start_s=wait,
                completion_s=None if wait is None else wait + moving + runtime,
                room_now=room_now,
                chosen=chosen == key,
            )
        )
    candidates.sort(key=lambda c: (c.completion_s is None, c.completion_s or 0.0, c.cluster))
    return candidates


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    """Where a started job went and the best place it did not go."""

    chosen: CandidateView
    runner_up: CandidateView | None


def choices(snapshot: Snapshot, plan: CyclePlan) -> dict[str, Choice]:
    """For each of the plan's starts: the place chosen and the runner-up (the other
    candidate that would have completed soonest), as the snapshot stood."""
    capacity = Capacity.from_snapshot(snapshot)
    jobs = {j.key: j for j in snapshot.pending}
    out = {}
    fits: Fits = {}
    for start in plan.starts:
        job = jobs.get(start.job_key)
        if job is None:
            continue
        views = weighed(snapshot, capacity, job, start, fits)
        chosen = next((c for c in views if c.chosen), None)
        if chosen is None:
            continue
        others = [c for c in views if not c.chosen and c.completion_s is not None]
        out[start.job_key] = Choice(chosen=chosen, runner_up=others[0] if others else None)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Frees:
    """The running job whose end makes room for a waiting one, and when."""

    job_key: str
    cluster: str
    gpu_type: str
    at_s: float  # when the room comes (the end the placement expects, now if overdue)


def first_to_free(snapshot: Snapshot, keys: Iterable[str]) -> dict[str, Frees]:
    """For each waiting job of ``keys`` that has no room now: on the (cluster, GPU type)
    where it fits soonest as running jobs end, the job on the nodes it would take whose
    predicted end is nearest that moment. Jobs of one shape and one set of GPU types
    share the answer."""
    capacity = Capacity.from_snapshot(snapshot)
    jobs = {j.key: j for j in snapshot.pending}
    on_node: dict[tuple[str, str], list[Running]] = {}
    for item in snapshot.running:
        for node in set(item.nodes):
            on_node.setdefault((item.cluster, node), []).append(item)
    known: dict[tuple[object, ...], Frees | None] = {}
    out = {}
    for key in keys:
        job = jobs.get(key)
        if job is None:
            continue
        domain = job_domain(snapshot.policy, job)
        groups = tuple(
            g for g, gpu in capacity.groups_for(domain) if job.allows(gpu) and job.estimate.on(gpu)
        )
        memo = (shape(job), groups)
        if memo not in known:
            known[memo] = _frees(snapshot.now_s, capacity, job, groups, on_node)
        found = known[memo]
        if found is not None:
            out[key] = found
    return out


def _frees(
    now_s: float,
    capacity: Capacity,
    job: Job,
    groups: Iterable[GroupKey],
    on_node: Mapping[tuple[str, str], list[Running]],
) -> Frees | None:
    best: tuple[float, GroupKey, tuple[str, ...]] | None = None
    for group in groups:
        if capacity.fit(job, group) is not None:
            return None  # room now: nothing to wait for
        found = capacity.earliest_fit(job, group, now_s)
        if found is None:
            continue
        if best is None or (found[0], group) < best[:2]:
            best = (found[0], group, found[1])
    if best is None:
        return None
    at, group, nodes = best
    cluster, gpu_type = group[0], group[1]
    holders = {r.job.key: r for n in set(nodes) for r in on_node.get((cluster, n), ())}
    if not holders:
        return None
    ends = min(holders.values(), key=lambda r: (abs(max(r.predicted_end_s, now_s) - at), r.job.key))
    return Frees(job_key=ends.job.key, cluster=cluster, gpu_type=gpu_type, at_s=at)


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
        if limit.jobs is not None:
            quotas.append(f"{bucket.label}: {ledger.running(bucket)} of {limit.jobs} jobs running")
    candidates = weighed(snapshot, capacity, job, start)
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
