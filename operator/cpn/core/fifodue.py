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

Runtimes are not what they were predicted to be, and on traces without model labels
far longer on the whole: a budget summing predicted medians says a job waits hours
where FIFO made it wait weeks. So each job is stamped a second, *calibrated* due time
(``Job.fifo_calibrated_due_s``), the same backlog scaled by the fleet's runtime ratio
at that instant (:func:`runtime_ratio`: how much longer than their stamped estimate
(``Job.fifo_basis_s``) the jobs started so far have run, finished and running alike).
Under ``reservation.calibrate_below_gpus`` the small jobs drain on calibrated budgets
(:meth:`cpn.core.reservations.Reservations.draining`); the plain due time stays the
lead a job needing several GPUs of one node needs for its room to clear. A preemption
does not move the calibrated due time: what stopped attempts ran counts against the
calibrated budget, so a small job preempted again and again drains sooner.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from cpn.core.model import Job, Running, Snapshot


def estimated_runtime_s(job: Job) -> float:
    """Median predicted runtime over GPU types, else the user's estimate, else 0."""
    values = [v for v in job.estimate.runtime_s.values() if v > 0]
    if values:
        return float(statistics.median(values))
    return job.user_estimate_s or 0.0


def fleet_gpus(snapshot: Snapshot) -> float:
    """Total GPUs of the fleet's nodes."""
    return float(sum(node.gpus for cluster in snapshot.clusters for node in cluster.nodes))


class Stamp(NamedTuple):
    """What :func:`due_times` stamps on a job first seen: its FIFO due time, the same
    calibrated by the runtime ratio, and the estimated runtime both were summed with."""

    due_s: float
    calibrated_due_s: float
    basis_s: float


class Outcome(NamedTuple):
    """A finished job as :func:`runtime_ratio` reads it: its GPUs, the estimated runtime
    it was stamped with (``Job.fifo_basis_s``) and the work it needed, as FIFO would have
    run it (what it ran less what preemptions threw away: cpn.runtime.store.work_s)."""

    gpus: float
    basis_s: float
    actual_s: float


def due_times(snapshot: Snapshot, ratio: float = 1.0) -> Mapping[str, Stamp]:
    """FIFO due times for the pending jobs of ``snapshot`` that have none, by key;
    calibrated ones with the backlog ahead scaled by ``ratio`` (:func:`runtime_ratio`).

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
    due: dict[str, Stamp] = {}
    for job in sorted(new, key=lambda j: (j.submit_s, j.key)):
        basis = estimated_runtime_s(job)
        due[job.key] = Stamp(now + work / total, now + ratio * work / total, basis)
        work += job.gpus * basis
    return due


def stamped(job: Job, stamp: Stamp) -> Job:
    """``job`` with what :func:`due_times` stamped on it."""
    return replace(
        job,
        fifo_due_s=stamp.due_s,
        fifo_calibrated_due_s=stamp.calibrated_due_s,
        fifo_basis_s=stamp.basis_s,
    )


def runtime_ratio(finished: Iterable[Outcome], running: Iterable[Running], now_s: float) -> float:
    """How many times its stamped estimate a started job runs, over the fleet's history:
    the Kaplan-Meier restricted mean of actual / estimated runtime.

    Each started job with an estimate counts, weighted by GPUs x estimate (the work it
    stands for in a FIFO budget): a finished one at its ratio, a running one censored at
    its age so far (this attempt and the earlier ones) over its estimate. Finished jobs
    alone would say runtimes are short, because the short ones finish first. The
    survival curve is integrated up to the largest finished ratio. 1 until a job with
    an estimate has finished.
    """
    rows = [(o.actual_s / o.basis_s, o.gpus * o.basis_s, 1.0) for o in finished if o.basis_s > 0]
    if not rows:
        return 1.0
    for r in running:
        basis = r.job.fifo_basis_s
        if basis is not None and basis > 0:
            rows.append(((now_s - r.start_s + ran_s(r.job)) / basis, r.job.gpus * basis, 0.0))
    table = np.array(rows, dtype=np.float64)
    table = table[np.lexsort((-table[:, 2], table[:, 0]))]  # by ratio, events first at ties
    value, weight, event = table[:, 0], table[:, 1], table[:, 2] > 0
    at_risk = np.cumsum(weight[::-1])[::-1]
    survival = np.cumprod(1.0 - np.where(event, weight / at_risk, 0.0))
    tau = value[event].max()
    upto = value <= tau
    steps = np.diff(np.concatenate(([0.0], value[upto], [tau])))
    return float(np.sum(np.concatenate(([1.0], survival[upto])) * steps))


def fifo_due(job: Job, now_s: float) -> bool:
    """True once ``now_s`` has reached ``job``'s FIFO due time."""
    return job.fifo_due_s is not None and now_s >= job.fifo_due_s


def ran_s(job: Job) -> float:
    """Seconds ``job`` ran in earlier attempts (its attained GPU-seconds per GPU)."""
    return job.attained_gpu_s / job.gpus if job.gpus > 0 else 0.0


def fifo_budget_s(job: Job, calibrated: bool = False) -> float | None:
    """How long FIFO would have let ``job`` wait: its due time (``calibrated``: its
    calibrated one) less its submit time and less what it ran (a preemption moves the due
    times by what the job ran); None when it has no such due time."""
    due = job.fifo_calibrated_due_s if calibrated else job.fifo_due_s
    if due is None:
        return None
    return due - job.submit_s - ran_s(job)


def widest_fifo_wait(jobs: Iterable[Job], calibrated: bool = False) -> float:
    """The longest FIFO wait budget (:func:`fifo_budget_s`) among ``jobs``, 0 if none has
    one: under ``reservation.fifo_share`` a job drains once it has waited that share of it."""
    budgets = (fifo_budget_s(j, calibrated) for j in jobs)
    return max([0.0, *(b for b in budgets if b is not None)])


def resumed_due_s(due_s: float | None, ran_s: float) -> float | None:
    """The due time of a job preempted after running ``ran_s`` seconds in its attempt."""
    return None if due_s is None else due_s + max(ran_s, 0.0)
