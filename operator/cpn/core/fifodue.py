"""FIFO due times: by when strict FIFO would have started a job, estimated once.

When a job is first seen its due time is the instant the fleet, working through the
backlog ahead of it at full width, would reach it::

    due = now + (sum over running jobs of gpus x max(predicted_end - now, 0)
                 + sum over jobs pending before it of gpus x estimated runtime)
                / total GPUs of the fleet

Jobs first seen in the same cycle are taken in submit order, each adding its own
work for the next. A pending job's estimated runtime is the median of its per-GPU-type
predictions, else the user's estimate, else 0. The due time is stamped when first seen
(``Job.fifo_due_s``); each later cycle estimates it again for every waiting job that
never started (running work left and the jobs pending before it in submit order) and
keeps the earlier of the two, so it only moves earlier as predictions improve; with
``reservation.drain_fifo`` a job past
it drains (:meth:`cpn.core.reservations.Reservations._draining`). The simulator and
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
from collections.abc import Mapping

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
    """FIFO due times to set on pending jobs of ``snapshot``, by key: a first stamp for
    each job that has none, and a lower one for each waiting job never started whose
    backlog ahead, estimated again now, would make it due earlier.

    Empty while the fleet has no GPUs: the backlog's pace is unknown, so the jobs are
    stamped in the first cycle that sees capacity.
    """
    total = fleet_gpus(snapshot)
    if not snapshot.pending or total <= 0:
        return {}
    now = snapshot.now_s
    running = sum(r.job.gpus * max(r.predicted_end_s - now, 0.0) for r in snapshot.running)
    estimated = {job.key: job.gpus * estimated_runtime_s(job) for job in snapshot.pending}
    due: dict[str, float] = {}
    new = [job for job in snapshot.pending if job.fifo_due_s is None]
    stamped = (job for job in snapshot.pending if job.fifo_due_s is not None)
    work = running + sum(estimated[job.key] for job in stamped)
    for job in sorted(new, key=_submit_order):
        due[job.key] = now + work / total
        work += estimated[job.key]
    due.update(_lowered(snapshot, running, estimated, total))
    return due


def _submit_order(job: Job) -> tuple[float, str]:
    return (job.submit_s, job.key)


def _lowered(
    snapshot: Snapshot, running: float, estimated: Mapping[str, float], total: float
) -> dict[str, float]:
    """Lower due times of stamped jobs that never ran: now plus the running work left and
    the estimated work of the jobs pending before each in submit order, over the fleet's
    GPUs, where that is earlier than the due time it has (never later)."""
    now = snapshot.now_s
    work = running
    lowered: dict[str, float] = {}
    for job in sorted(snapshot.pending, key=_submit_order):
        due_s = job.fifo_due_s
        if due_s is not None and job.attained_gpu_s <= 0 and now + work / total < due_s:
            lowered[job.key] = now + work / total
        work += estimated[job.key]
    return lowered


def fifo_due(job: Job, now_s: float) -> bool:
    """True once ``now_s`` has reached ``job``'s FIFO due time."""
    return job.fifo_due_s is not None and now_s >= job.fifo_due_s


def resumed_due_s(due_s: float | None, ran_s: float) -> float | None:
    """The due time of a job preempted after running ``ran_s`` seconds in its attempt."""
    return None if due_s is None else due_s + max(ran_s, 0.0)
