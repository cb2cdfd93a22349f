"""FIFO due times: by when strict FIFO would have started a job, estimated once.

When a job is first seen its due time is the instant the fleet, working through the
backlog ahead of it at full width, would reach it::

    due = now + (sum over running jobs of gpus x max(predicted_end - now, 0)
                 + sum over jobs pending before it of gpus x estimated runtime)
                / total GPUs of the fleet

Jobs first seen in the same cycle are taken in submit order, each adding its own
work for the next. A pending job's estimated runtime is the median of its per-GPU-type
predictions, else the user's estimate, else 0. The due time is stamped once
(``Job.fifo_due_s``) and never recomputed; with ``reservation.drain_fifo`` a job past
it drains (:meth:`cpn.core.reservations.Reservations.draining`). The simulator and
the operator both stamp through :func:`due_times`.

The due time is a wait budget: FIFO would have let the job wait until then, then run it
to the end. A preempted job's due time moves later by the time it ran in the attempt
stopped (:func:`resumed_due_s`), so its waits in all stay within that budget: a job
started before its due time keeps the slack it had, one started after it has none left
and drains as soon as it is requeued, which is why preemption never picks it
(:func:`cpn.core.preemption.choose_preemptions`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

from cpn.core.model import Job, Snapshot


def estimated_runtime_s(job: Job) -> float:
    """Median predicted runtime over GPU types, else the user's estimate, else 0."""
    values = [v for v in job.estimate.runtime_s.values() if v > 0]
    if values:
        return float(statistics.median(values))
    return job.user_estimate_s or 0.0


def fleet_gpus(snapshot: Snapshot) -> float:
    """Total GPUs of the fleet's nodes."""
    return float(sum(node.gpus for cluster in snapshot.clusters for node in cluster.nodes))


def due_times(snapshot: Snapshot) -> Mapping[str, float]:
    """FIFO due times for the pending jobs of ``snapshot`` that have none, by key.

    Empty while the fleet has no GPUs: the backlog's pace is unknown, so the jobs are
    stamped in the first cycle that sees capacity.
    """
    new = [job for job in snapshot.pending if job.fifo_due_s is None]
    total = fleet_gpus(snapshot)
    if not new or total <= 0:
        return {}
    now = snapshot.now_s
    work = sum(r.job.gpus * max(r.predicted_end_s - now, 0.0) for r in snapshot.running)
    work += sum(
        job.gpus * estimated_runtime_s(job)
        for job in snapshot.pending
        if job.fifo_due_s is not None
    )
    due: dict[str, float] = {}
    for job in sorted(new, key=lambda j: (j.submit_s, j.key)):
        due[job.key] = now + work / total
        work += job.gpus * estimated_runtime_s(job)
    return due


def fifo_due(job: Job, now_s: float) -> bool:
    """True once ``now_s`` has reached ``job``'s FIFO due time."""
    return job.fifo_due_s is not None and now_s >= job.fifo_due_s


def ran_s(job: Job) -> float:
    """Seconds ``job`` ran in earlier attempts (its attained GPU-seconds per GPU)."""
    return job.attained_gpu_s / job.gpus if job.gpus > 0 else 0.0


def fifo_budget_s(job: Job) -> float | None:
    """How long FIFO would have let ``job`` wait: its due time less its submit time and
    less what it ran (a preemption moves the due time by what the job ran); None when
    it has no due time."""
    if job.fifo_due_s is None:
        return None
    return job.fifo_due_s - job.submit_s - ran_s(job)


def widest_fifo_wait(jobs: Iterable[Job]) -> float:
    """The longest FIFO wait budget (:func:`fifo_budget_s`) among ``jobs``, 0 if none has
    one: under ``reservation.fifo_share`` a job drains once it has waited that share of it."""
    budgets = (fifo_budget_s(j) for j in jobs)
    return max([0.0, *(b for b in budgets if b is not None)])


def resumed_due_s(due_s: float | None, ran_s: float) -> float | None:
    """The due time of a job preempted after running ``ran_s`` seconds in its attempt."""
    return None if due_s is None else due_s + max(ran_s, 0.0)
