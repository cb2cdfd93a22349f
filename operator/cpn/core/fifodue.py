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

A budget is an estimate made once, at arrival. With ``reservation.fifo_replay`` the
limit is instead re-derived from what has happened since: :func:`fifo_replay_s` replays
strict FIFO over every job seen so far on the fleet's nodes, each job with the work it
needed once it finished, else the larger of its stamped estimate and what it has run,
bounded by the finished jobs that outlived it (:func:`replay_runtime_s`), to the end of
the jobs known; the longest wait it imposes is the limit every job measures its wait
against.
"""

from __future__ import annotations

import bisect
import heapq
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
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


REPLAY_EVERY_S = 3600.0
"""How often the simulator and the operator replay FIFO (:func:`fifo_replay_s`)."""


class ReplayJob(NamedTuple):
    """A job as :func:`fifo_replay_s` replays it."""

    submit_s: float
    gpus: float
    runtime_s: float


class ReplayFacts(NamedTuple):
    """What the simulator or the operator knows of a job for the replay: the work it
    needed once finished (None before), its stamped estimate and what it has run."""

    submit_s: float
    gpus: float
    work_s: float | None
    basis_s: float
    ran_s: float


def replay_runtime_s(
    work_s: float | None, basis_s: float, ran_s: float, finished: Sequence[float] = ()
) -> float:
    """A job's runtime in the FIFO replay: the work it needed once it finished
    (``work_s``), else the larger of its estimate and what it has run so far, but no
    more than the median runtime of the ``finished`` jobs (sorted) that ran longer than
    it has: without a model a job's estimate is often the long tail of its group's
    runtimes, and a replay that runs every unfinished job that long passes FIFO's
    real longest wait (philly-nov-c: 80 h projected against 69 h)."""
    if work_s is not None:
        return work_s
    runtime = max(basis_s, ran_s)
    first_longer = bisect.bisect_right(finished, ran_s)
    if first_longer < len(finished):  # the median of finished[first_longer:]
        runtime = min(runtime, finished[(first_longer + len(finished)) // 2])
    return runtime


def replay_jobs(facts: Iterable[ReplayFacts]) -> list[ReplayJob]:
    """``facts`` as the replay runs them (:func:`replay_runtime_s`, each unfinished job
    bounded by the finished ones among them)."""
    rows = list(facts)
    finished = sorted(f.work_s for f in rows if f.work_s is not None)
    return [
        ReplayJob(f.submit_s, f.gpus, replay_runtime_s(f.work_s, f.basis_s, f.ran_s, finished))
        for f in rows
    ]


class ReplayNode(NamedTuple):
    """A node as :func:`fifo_replay_s` fills it: its GPUs and its group (the cluster and
    GPU type it belongs to: a job bigger than one node takes whole nodes of one group)."""

    gpus: float
    group: str = ""


def replay_nodes(snapshot: Snapshot) -> list[ReplayNode]:
    """The fleet's nodes in the order FIFO's first-fit placement tries them: by cluster
    name, then GPU type, then as listed."""
    return [
        ReplayNode(float(node.gpus), f"{cluster.name}/{node.gpu_type}")
        for cluster in sorted(snapshot.clusters, key=lambda c: c.name)
        for node in sorted(cluster.nodes, key=lambda n: n.gpu_type)
    ]


class Replayer:
    """FIFO's longest wait (:func:`fifo_replay_s`) over the jobs ``rows()`` gives, on the
    snapshot's nodes, replayed again once :data:`REPLAY_EVERY_S` has passed: what the
    simulator and the operator put in ``Snapshot.fifo_replay_s``."""

    def __init__(self) -> None:
        self._at: float | None = None
        self._value = 0.0

    def longest_wait_s(
        self, snapshot: Snapshot, facts: Callable[[], Iterable[ReplayFacts]]
    ) -> float:
        if self._at is None or snapshot.now_s >= self._at + REPLAY_EVERY_S:
            jobs = replay_jobs(facts())
            self._at, self._value = snapshot.now_s, fifo_replay_s(jobs, replay_nodes(snapshot))
        return self._value


def fifo_replay_s(jobs: Iterable[ReplayJob], fleet: Sequence[ReplayNode]) -> float:
    """The longest wait strict FIFO imposes on ``jobs``, replayed on the nodes of
    ``fleet`` (in first-fit order) until every one of them has started.

    In submit order (ties in the given order), each job starts at the first instant, no
    earlier than its submit time nor than the job before it started (no job passes
    another), where it fits: a job of at most one node's GPUs on the first node with
    that many free, a bigger one on whole free nodes of the first group with enough,
    largest first. A job that fits nowhere even on an empty fleet is left out. 0 with no
    job or no node.
    """
    if not fleet:
        return 0.0
    free = [n.gpus for n in fleet]
    biggest = max(free)
    group_gpus: dict[str, float] = {}
    for n in fleet:
        group_gpus[n.group] = group_gpus.get(n.group, 0.0) + n.gpus
    widest_group = max(group_gpus.values())  # at least the biggest node
    ends: list[tuple[float, int, tuple[tuple[int, float], ...]]] = []
    clock = widest = 0.0
    for seq, (submit_s, gpus, runtime_s) in enumerate(sorted(jobs, key=lambda j: j.submit_s)):
        if gpus > widest_group:
            continue  # no group of whole nodes could ever hold it
        clock = max(clock, submit_s)
        while True:
            while ends and ends[0][0] <= clock:
                for node, held in heapq.heappop(ends)[2]:
                    free[node] += held
            alloc = _first_fit(free, fleet, biggest, gpus)
            if alloc is not None or not ends:
                break
            clock = ends[0][0]
        if alloc is None:
            continue
        widest = max(widest, clock - submit_s)
        for node, held in alloc:
            free[node] -= held
        heapq.heappush(ends, (clock + runtime_s, seq, alloc))
    return widest


def _first_fit(
    free: list[float], fleet: Sequence[ReplayNode], biggest: float, gpus: float
) -> tuple[tuple[int, float], ...] | None:
    """Where :func:`fifo_replay_s` places a job of ``gpus`` GPUs now, None if nowhere."""
    if gpus <= biggest:
        for node, room in enumerate(free):
            if room >= gpus - 1e-9:
                return ((node, gpus),)
        return None
    whole_by_group: dict[str, list[int]] = {}  # in first-fit order (dicts keep it)
    for node, room in enumerate(free):
        if room >= fleet[node].gpus - 1e-9:
            whole_by_group.setdefault(fleet[node].group, []).append(node)
    for whole in whole_by_group.values():
        whole.sort(key=lambda n: -fleet[n].gpus)
        alloc, need = [], gpus
        for node in whole:
            if need <= 1e-9:
                break
            alloc.append((node, fleet[node].gpus))
            need -= fleet[node].gpus
        if need <= 1e-9:
            return tuple(alloc)
    return None
