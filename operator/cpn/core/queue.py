"""Queue order: levels, the priority formula, aging, and the baseline orderings.

:func:`order_jobs` turns the pending jobs of a snapshot into one total, stable
order (level first, then score, then submit time, then key). Orderings are
registered by name; a policy picks one with ``ordering:``.

Starvation bound of the ``cpn`` ordering: the order itself does not bound waits under
the default policy (``aging.rate`` 0: smallest predicted GPU-time first); draining does
(:mod:`cpn.core.reservations`, ``reservation.drain_fifo``): a job past its FIFO due time
that has waited ``fifo_share`` of the longest FIFO wait of the queue claims its room.
With a rate above 0 and the default formula ``1000000*priority + aging*wait_s -
gpu_time_s``, a job of equal priority whose predicted GPU-time is ``G`` also ranks above
every job arriving after it once it has waited ``(G - G_min) / aging`` seconds
(``G_min``: the smallest GPU-time of a later arrival); and once it has waited
``aging.max_wait_s`` it becomes eligible for a reservation, which the oldest eligible
blocked jobs hold until they start (see :mod:`cpn.core.cycle`), so backfill cannot
bypass it forever.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cpn.core.fairshare import OVER_BUDGET_LEVEL, Standing, lowest_level, standing
from cpn.core.formula import compile_formula
from cpn.core.model import Job, Running, Snapshot
from cpn.core.policy import Level, QueuePolicy
from cpn.core.runtime_law import conditional_median_s, gittins_remaining_s, sigma_of

#: Orderings under which a job that does not fit blocks every job behind it.
STRICT_ORDERINGS = frozenset({"fifo"})

#: Tiresias-style discretised LAS: attained GPU-seconds thresholds between queues.
LAS_THRESHOLDS_GPU_S: tuple[float, ...] = (3600.0, 36000.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ranked:
    """A job with its place in the queue."""

    job: Job
    level: int  # index into the policy's levels (0 = first); 0 when no levels
    level_name: str
    score: float  # higher goes first within a level
    index: int  # row of this job in the factor columns (for explanations)


def effective_priority(job: Job, policy: QueuePolicy) -> int:
    """The job's priority bounded by its group's ``max_priority`` (users write the priority;
    the policy says how high a group may go). Used for levels, the formula and preemption."""
    quota = policy.quotas.groups.get(job.group)
    cap = quota.max_priority if quota is not None else None
    cap = cap if cap is not None else policy.quotas.max_priority
    return job.priority if cap is None else min(job.priority, cap)


def level_of(job: Job, levels: Sequence[Level], priority: int | None = None) -> int:
    """Index of the first level whose rules all match ``job`` (last level if none).

    ``priority`` is the job's effective priority (see :func:`effective_priority`);
    ``job.priority`` when not given."""
    priority = job.priority if priority is None else priority
    for index, level in enumerate(levels):
        if level.groups and job.group not in level.groups:
            continue
        if level.users and job.user not in level.users:
            continue
        if level.queues and job.queue not in level.queues:
            continue
        if level.min_priority is not None and priority < level.min_priority:
            continue
        if level.max_gpus is not None and job.gpus > level.max_gpus:
            continue
        if level.min_gpus is not None and job.gpus < level.min_gpus:
            continue
        return index
    return max(len(levels) - 1, 0)


def runtime_for_order(job: Job, gpu_types: frozenset[str], *, gittins: bool = False) -> float:
    """Predicted remaining runtime on the fastest GPU type the job may use and that exists.

    For a job that has run before (attained service from earlier attempts), the median of
    its runtime law given that it already ran that long (:mod:`cpn.core.runtime_law`),
    less that service if the job checkpoints: a job that outlives its estimate is no
    longer taken for a short one, so it cannot stay ahead of short jobs forever. All its
    service is taken off, not only what its checkpoints kept: the lost part works as the
    least-attained-service credit a preempted job earns back (subtracting only the kept
    part was measured worse: docs/results.md, "Why philly-nov-a's bad seeds"). With ``gittins``
    (``preemption.gittins``, preemption on) a job that checkpoints, and so may be
    stopped, is ranked by its law's inverse Gittins index at its attained service instead.
    """
    best: tuple[float, float | None] | None = None
    for gpu_type, runtime in job.estimate.runtime_s.items():
        usable = job.allows(gpu_type) and (not gpu_types or gpu_type in gpu_types)
        if usable and (best is None or runtime < best[0]):
            best = (runtime, job.estimate.high_s.get(gpu_type))
    if best is None:
        if job.user_estimate_s is not None:
            return job.user_estimate_s
        return job.estimate.best_s() if job.estimate.runtime_s else 0.0
    median, high = best
    if gittins and job.checkpoint and job.gpus > 0:
        return gittins_remaining_s(median, sigma_of(median, high), job.attained_gpu_s / job.gpus)
    if job.attained_gpu_s <= 0 or job.gpus <= 0:
        return median
    age = job.attained_gpu_s / job.gpus
    total = conditional_median_s(median, sigma_of(median, high), age)
    return max(0.0, total - age) if job.checkpoint else total


def group_usage(running: Sequence[Running]) -> dict[str, float]:
    """GPUs in use per group."""
    usage: dict[str, float] = {}
    for item in running:
        usage[item.job.group] = usage.get(item.job.group, 0.0) + item.job.gpus
    return usage


def factor_columns(
    jobs: Sequence[Job],
    snapshot: Snapshot,
    gpu_types: frozenset[str],
    fair: Standing | None = None,
) -> dict[str, npt.NDArray[np.float64]]:
    """The formula's named factors, one array entry per job (``fair``: the snapshot's
    :func:`cpn.core.fairshare.standing`, computed when not given)."""
    policy = snapshot.policy
    fair = standing(snapshot) if fair is None else fair
    if fair.group_factor:
        shares = np.asarray([fair.factors(job) for job in jobs], dtype=np.float64).reshape(-1, 3)
    else:  # no usage, or a policy that does not read it: every factor is 1
        shares = np.ones((len(jobs), 3), dtype=np.float64)
    usage = group_usage(snapshot.running)
    now = snapshot.now_s

    def column(values: Sequence[float]) -> npt.NDArray[np.float64]:
        return np.asarray(values, dtype=np.float64)

    gittins = policy.preemption.ranks_by_gittins
    runtimes = [runtime_for_order(job, gpu_types, gittins=gittins) for job in jobs]
    gpus = [job.gpus for job in jobs]
    quota_used = []
    for job in jobs:
        quota = policy.quotas.groups.get(job.group)
        limit = quota.limit.gpus if quota else None
        quota_used.append(usage.get(job.group, 0.0) / limit if limit else 0.0)
    return {
        "priority": column([float(effective_priority(job, policy)) for job in jobs]),
        "gpus": column(gpus),
        "size": column(gpus),
        "workers": column([float(job.workers) for job in jobs]),
        "runtime_s": column(runtimes),
        "gpu_time_s": column([g * r for g, r in zip(gpus, runtimes, strict=True)]),
        "wait_s": column([max(0.0, now - job.submit_s) for job in jobs]),
        "service_s": column([job.attained_gpu_s for job in jobs]),
        "quota_used": column(quota_used),
        "user_level": column([policy.user_levels.get(job.user, 0.0) for job in jobs]),
        "group_level": column([policy.group_levels.get(job.group, 0.0) for job in jobs]),
        "user_estimate_s": column([job.user_estimate_s or 0.0 for job in jobs]),
        "attempts": column([float(job.attempts) for job in jobs]),
        "unseen": column([1.0 if job.estimate.unseen else 0.0 for job in jobs]),
        "checkpoint": column([1.0 if job.checkpoint else 0.0 for job in jobs]),
        "aging": np.full(len(jobs), policy.aging.rate, dtype=np.float64),
        "fair_share": shares[:, 0].copy(),
        "group_fair_share": shares[:, 1].copy(),
        "user_fair_share": shares[:, 2].copy(),
    }


Columns = Mapping[str, npt.NDArray[np.float64]]
Scorer = Callable[[Sequence[Job], Columns, QueuePolicy], npt.NDArray[np.float64]]


def _formula_scores(
    jobs: Sequence[Job], columns: Columns, policy: QueuePolicy
) -> npt.NDArray[np.float64]:
    scores = compile_formula(policy.formula).evaluate(columns)
    overrides = [lv.formula for lv in policy.levels]
    weight = policy.fair_share.weight
    if any(overrides):
        levels = np.asarray(
            [level_of(job, policy.levels, effective_priority(job, policy)) for job in jobs]
        )
        for index, text in enumerate(overrides):
            if text and (levels == index).any():
                scores = np.where(levels == index, compile_formula(text).evaluate(columns), scores)
    if weight:
        scores = scores + weight * columns["fair_share"]
    return scores


def _by_column(name: str, sign: float) -> Scorer:
    def score(
        jobs: Sequence[Job], columns: Columns, policy: QueuePolicy
    ) -> npt.NDArray[np.float64]:
        return sign * columns[name]

    return score


def _las_scores(
    jobs: Sequence[Job], columns: Columns, policy: QueuePolicy
) -> npt.NDArray[np.float64]:
    """Discretised least-attained-service: fewer GPU-seconds received goes first."""
    queues = np.searchsorted(np.asarray(LAS_THRESHOLDS_GPU_S), columns["service_s"], side="right")
    return -queues.astype(np.float64)


def _fifo_scores(
    jobs: Sequence[Job], columns: Columns, policy: QueuePolicy
) -> npt.NDArray[np.float64]:
    return np.zeros(len(jobs), dtype=np.float64)  # ties fall back to submit time


#: ordering name -> scorer. ``oracle`` orders like ``sjf``; the simulator gives it true runtimes.
ORDERINGS: dict[str, Scorer] = {
    "cpn": _formula_scores,
    "fifo": _fifo_scores,
    "sjf": _by_column("runtime_s", -1.0),
    "oracle": _by_column("runtime_s", -1.0),
    "las": _las_scores,
    "gavel": _fifo_scores,
}


def order_jobs(
    jobs: Sequence[Job],
    snapshot: Snapshot,
    gpu_types: frozenset[str] = frozenset(),
    fair: Standing | None = None,
) -> list[Ranked]:
    """Rank ``jobs`` under the snapshot's policy: a total, stable order (``fair``: the
    snapshot's :func:`cpn.core.fairshare.standing`, computed when not given)."""
    if not jobs:
        return []
    policy: QueuePolicy = snapshot.policy
    fair = standing(snapshot) if fair is None else fair
    columns = factor_columns(jobs, snapshot, gpu_types, fair)
    scores = ORDERINGS[policy.ordering](jobs, columns, policy)
    scores = np.nan_to_num(scores, nan=0.0, posinf=1e300, neginf=-1e300)
    ranked = []
    lowest = policy.quotas.over_budget == "lowest" and fair.over_budget
    for index, job in enumerate(jobs):
        priority = effective_priority(job, policy)
        level = level_of(job, policy.levels, priority) if policy.levels else 0
        name = policy.levels[level].name if policy.levels else ""
        if lowest and job.group in fair.over_budget:  # below every level (cpn.core.fairshare)
            level, name = lowest_level(policy), OVER_BUDGET_LEVEL
        ranked.append(
            Ranked(job=job, level=level, level_name=name, score=float(scores[index]), index=index)
        )
    ranked.sort(key=lambda r: (r.level, -r.score, r.job.submit_s, r.job.key))
    return ranked
