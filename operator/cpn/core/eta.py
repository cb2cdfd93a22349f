"""Estimated start and finish of every waiting job: the queue projected forward.

:func:`project` replays the same :func:`~cpn.core.cycle.plan_cycle` on a
sequence of future snapshots in which running jobs end at their predicted
times and started jobs run for their predicted runtimes. What it returns is
what cpn would do if every prediction came true and nothing new arrived:
the basis of the ETA a researcher sees. Pure, like the cycle itself.

The projection places with the policy's own method, the MILP included: the
MILP weighs jobs by rank, not by GPUs, so four 1-GPU jobs ranked just after a
4-GPU job win its room; the greedy placement starts the 4-GPU job instead, and
on Philly trace b436b2 (default policy, oracle runtimes) that told 1-GPU jobs
of the hour-740 burst twice their real wait. Preemption is left out (a
projection must not stop anything).

A running job is expected to end at the median of its runtime given that it
is still running, under the log-normal law its estimate states (median and
90th percentile on its GPU type): its predicted end early on, later as it
runs on. One with no stated spread ends at its predicted end, or a moment from
now once past it.

Speed: each projected cycle gives :func:`plan_cycle` only the jobs that can
act in it (see :class:`_Focus`): the head of the queue, every job that may hold
a reservation, and no job that provably cannot start. A cycle over that subset
decides the same starts as over the whole queue; when that cannot be shown
(another job could fit what is left, a job may be draining, strict order) the
subset grows, up to the whole queue. On a deep queue this makes a projected
cycle cost about the same whatever the queue's length. Its proofs hold for the
greedy placement only: under the MILP every projected cycle runs whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from cpn.core.capacity import Capacity, GroupKey, Shape, shape, worker_gpus
from cpn.core.model import CyclePlan, Job, Node, Running, Snapshot, WaitReason
from cpn.core.runtime_law import (
    expected_end_s,
    mean_level,
    quantile_end_s,
    quantile_s,
    sigma_of,
)

#: How far projections go: this many future cycles at most.
MAX_CYCLES = 400


@dataclass(frozen=True, slots=True)
class Projection:
    """Predicted start and end of one job (instants, like ``snapshot.now_s``).

    ``start_low_s`` and ``start_high_s`` bound the start with the runtimes' uncertainty
    (the 20th and 80th percentiles of the start); None when not computed.
    """

    start_s: float
    end_s: float
    cluster: str
    gpu_type: str
    start_low_s: float | None = None
    start_high_s: float | None = None


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


#: Jobs at the head of the queue a focused cycle starts from (x4 each time that is not enough).
_HEAD = 16

#: Queues shorter than this run whole (the focus costs more than it saves on them).
_MIN_FOCUS = 256

#: Hold reasons meaning the job found no room (not its quota, not a choice to wait).
_NO_ROOM = frozenset(
    {WaitReason.Capacity, WaitReason.Reservation, WaitReason.NodeLoad, WaitReason.Priority}
)

_Vector = npt.NDArray[np.float64]


class _Focus:
    """Per projected cycle, the pending jobs that decide its starts (see :func:`project`).

    A cycle over a subset S of the eligible jobs starts the same jobs as over all
    of them when S holds the head of the ranking (scores are per job, so S ranks
    the same), every job that may hold a reservation (worthy by size or wait, and
    claiming or not fitting now; draining jobs too, and S's own mean wait must
    drain the same jobs) and no job outside S could start. A job outside S cannot
    start when it fits in none of its candidate groups of what the head's starts
    leave free (a cycle only takes capacity, and fitting is monotone in it), or,
    with no quotas, when every start of S is in the head and a held job of S,
    ranked after the last start (so both see the same free room and
    reservations), of the same shape, with at least its groups and no later end
    in any of them (so no fewer reserved nodes in its way), found no room. S also
    holds a few such probes per shape that could fit: the outside jobs that end
    soonest in each group. Strict orderings do not use a focus.
    """

    def __init__(self, state: Snapshot, jobs: Sequence[Job]) -> None:
        from cpn.core.candidates import candidates
        from cpn.core.queue import effective_priority, factor_columns, level_of

        policy = state.policy
        self.policy = policy
        self.jobs = list(jobs)
        n = len(self.jobs)
        self.index = {job.key: i for i, job in enumerate(self.jobs)}
        capacity = Capacity.from_snapshot(state)
        gpu_types = capacity.gpu_types()
        self.columns: dict[str, _Vector] = {
            k: np.array(v, dtype=np.float64)
            for k, v in factor_columns(self.jobs, state, gpu_types).items()
        }
        self.submit = np.array([j.submit_s for j in self.jobs], dtype=np.float64)
        self.not_before = np.array([j.not_before_s for j in self.jobs], dtype=np.float64)
        inf = float("inf")
        self.due = np.array(
            [inf if j.fifo_due_s is None else j.fifo_due_s for j in self.jobs], dtype=np.float64
        )
        self.gpus = np.array([j.gpus for j in self.jobs], dtype=np.float64)
        self.level = np.array(
            [
                level_of(j, policy.levels, effective_priority(j, policy)) if policy.levels else 0
                for j in self.jobs
            ],
            dtype=np.int64,
        )
        by_key = sorted(range(n), key=lambda i: self.jobs[i].key)
        self.key_rank = np.empty(n, dtype=np.int64)
        self.key_rank[by_key] = np.arange(n)
        self.by_submit = np.argsort(self.submit, kind="stable")
        groups = {key: g for g, key in enumerate(capacity.groups)}
        # Per job and group: transfer and runtime (inf where the group is no candidate).
        self.transfer = np.full((n, len(groups)), math.inf)
        self.runtime = np.full((n, len(groups)), math.inf)
        # a job that must run alone (cpn.core.alone) fits elsewhere than one of its shape
        shapes: dict[tuple[Shape, bool], int] = {}
        classes: dict[tuple[tuple[Shape, bool], tuple[GroupKey, ...]], int] = {}
        self.shape_of = np.empty(n, dtype=np.int64)
        self.class_of = np.empty(n, dtype=np.int64)
        self.class_rep: list[Job] = []
        self.class_keys: list[tuple[GroupKey, ...]] = []
        for i, job in enumerate(self.jobs):
            cands = candidates(job, capacity, state)
            for cand in cands:
                self.transfer[i, groups[cand.key]] = cand.transfer_s
                self.runtime[i, groups[cand.key]] = cand.runtime_s
            keys = tuple(sorted(c.key for c in cands))
            kind = (shape(job), capacity.alone(job))
            self.shape_of[i] = shapes.setdefault(kind, len(shapes))
            cls = classes.setdefault((kind, keys), len(classes))
            if cls == len(self.class_rep):
                self.class_rep.append(job)
                self.class_keys.append(keys)
            self.class_of[i] = cls
        self.class_shape = np.array(
            [shapes[(shape(j), capacity.alone(j))] for j in self.class_rep], dtype=np.int64
        )
        self.alive = np.ones(n, dtype=bool)
        self.dominance = not policy.quotas.groups
        # Whom Reservations._heads passes over: a job the cycle holds as infeasible, one with
        # no candidate, and (with quotas, per level, group and user) one over its quota. The
        # first blocked job of each such key is a possible head; the real one is among them.
        self.has_keys = np.array([bool(keys) for keys in self.class_keys], dtype=bool)
        self.feasible = np.array(
            [
                any(job.allows(k[1]) and capacity.ever_fits(job, k) for k in capacity.groups)
                for job in self.jobs
            ],
            dtype=bool,
        )
        who = [(j.group, j.user) if policy.quotas.groups else () for j in self.jobs]
        codes: dict[tuple[int, tuple[str, ...]], int] = {}
        self.head_key = np.array(
            [
                codes.setdefault((int(lv), w), len(codes))
                for lv, w in zip(self.level, who, strict=True)
            ],
            dtype=np.int64,
        )
        self.cycles = 0  # plan calls, for tests and benchmarks
        self.whole = 0  # of which over the whole queue

    def started(self, key: str) -> None:
        """``key`` left the queue."""
        self.alive[self.index[key]] = False

    def arrived(self, key: str) -> None:
        """``key`` joined the queue."""
        self.alive[self.index[key]] = True

    def _scores(self, base: Snapshot) -> _Vector:
        from cpn.core.queue import ORDERINGS, group_usage

        policy = self.policy
        self.columns["wait_s"] = np.maximum(0.0, base.now_s - self.submit)
        if policy.quotas.groups:
            usage = group_usage(base.running)
            used = []
            for job in self.jobs:
                quota = policy.quotas.groups.get(job.group)
                limit = quota.limit.gpus if quota else None
                used.append(usage.get(job.group, 0.0) / limit if limit else 0.0)
            self.columns["quota_used"] = np.array(used, dtype=np.float64)
        scores = ORDERINGS[policy.ordering](self.jobs, self.columns, policy)
        return np.nan_to_num(scores, nan=0.0, posinf=1e300, neginf=-1e300)

    def _fits(self, capacity: Capacity, classes: Collection[int]) -> set[int]:
        """The classes among ``classes`` that fit ``capacity`` in one of their groups."""
        return {
            int(c)
            for c in classes
            if any(capacity.fit(self.class_rep[c], key) is not None for key in self.class_keys[c])
        }

    def plan(self, run: Callable[[Snapshot], CyclePlan], base: Snapshot) -> CyclePlan:
        """The plan of ``base`` (its clusters, running jobs, instant) with the alive jobs."""
        now = base.now_s
        self.cycles += 1
        alive = np.flatnonzero(self.alive)
        res = self.policy.reservation
        waited = now - self.submit
        eligible = self.alive & (self.not_before <= now)
        order = np.flatnonzero(eligible)
        if len(order) <= max(_HEAD, _MIN_FOCUS):
            return self._whole(run, base, alive)
        # Draining jobs (Reservations._draining: waited drain_after_s and drain_ratio x the
        # mean wait of the whole queue) claim room: they join the focus, whose own mean must
        # agree on them.
        after = res.drain_after_s
        old = np.zeros(len(self.jobs), dtype=bool)
        draining = old
        if res.enabled and after is not None:
            old = self.alive & (waited >= after)
            if old.any():
                draining = old & (waited >= res.drain_ratio * _mean_wait(self.jobs, alive, now))
        # ... and with drain_fifo the jobs past their FIFO due time, whatever the mean.
        due = np.zeros_like(old)
        if res.enabled and res.drain_fifo:
            due = self.alive & (self.due <= now)
        drains = draining | due
        scores = self._scores(base)
        order = order[
            np.lexsort(
                (self.key_rank[order], self.submit[order], -scores[order], self.level[order])
            )
        ]
        position = np.full(len(self.jobs), -1, dtype=np.int64)
        position[order] = np.arange(len(order))
        capacity = Capacity.from_snapshot(base)
        present = np.unique(self.class_of[order])
        fit_now = self._fits(capacity, present)
        holders = np.zeros(len(self.jobs), dtype=bool)
        heads = np.zeros(len(self.jobs), dtype=bool)
        if res.enabled and res.max_reservations > 0:
            fits = np.zeros(len(self.class_rep), dtype=bool)
            fits[list(fit_now)] = True
            if res.head:
                # Reservations._heads: per level, the first-ranked job that fits nowhere now
                cls = self.class_of[order]
                blocked = order[~fits[cls] & self.has_keys[cls] & self.feasible[order]]
                heads[blocked[np.unique(self.head_key[blocked], return_index=True)[1]]] = True
            worthy = self.gpus >= res.min_gpus
            max_wait = self.policy.aging.max_wait_s
            if max_wait is not None:
                worthy |= waited >= max_wait
            claims = (self.gpus >= res.min_gpus) if res.claim_big else np.zeros_like(worthy)
            holders = eligible & (drains | heads | worthy & (claims | ~fits[self.class_of]))
        # Possible holders in the order Reservations.reserve_ahead tries them; it stops at
        # max_reservations, so those after the first few matter only when these reserve less.
        ranked = np.flatnonzero(holders)
        ranked = ranked[
            np.lexsort(
                (
                    self.key_rank[ranked],
                    self.submit[ranked],
                    ~heads[ranked],
                    self.gpus[ranked] < res.min_gpus,
                    ~drains[ranked],
                    self.level[ranked],
                )
            )
        ]
        head, first = _HEAD, 2 * res.max_reservations
        while head < len(order):
            chosen = np.zeros(len(self.jobs), dtype=bool)
            chosen[ranked[:first]] = True
            chosen[order[:head]] = True
            if self.dominance:
                chosen[self._probes(eligible & ~chosen, fit_now)] = True
            if old.any():
                balanced = self._balance(chosen, eligible, old & ~due, draining, waited, now)
                if balanced is None:
                    break
                chosen = balanced
            rows = np.flatnonzero(chosen)
            plan = run(replace(base, pending=tuple(self.jobs[i] for i in rows)))
            if first < len(ranked):
                tried = {self.jobs[i].key for i in ranked[:first]}
                reserved = sum(
                    1 for h in plan.holds if h.reserved_start_s is not None and h.job_key in tried
                )
                if reserved < res.max_reservations:
                    first *= 4
                    continue
            if self._settled(plan, base, position, head, eligible & ~chosen):
                return plan
            head *= 4
        return self._whole(run, base, alive)

    def _probes(self, outside: npt.NDArray[np.bool_], fit_now: set[int]) -> list[int]:
        """Per class that fits now, its outside jobs that end soonest in each group."""
        out: list[int] = []
        for cls in fit_now:
            members = np.flatnonzero(outside & (self.class_of == cls))
            if len(members):
                ends = self.transfer[members] + self.runtime[members]
                out.extend(int(members[k]) for k in set(np.argmin(ends, axis=0).tolist()))
        return out

    def _balance(
        self,
        chosen: npt.NDArray[np.bool_],
        eligible: npt.NDArray[np.bool_],
        old: npt.NDArray[np.bool_],
        draining: npt.NDArray[np.bool_],
        waited: _Vector,
        now: float,
    ) -> npt.NDArray[np.bool_] | None:
        """``chosen`` plus enough recent (or old) jobs that its own mean wait drains the same
        jobs as the whole queue's; None when no subset was found."""
        ratio = self.policy.reservation.drain_ratio
        extra = 4
        while True:
            seen = waited >= ratio * _mean_wait(self.jobs, np.flatnonzero(chosen), now)
            wrong = (seen != draining) & old & chosen
            if not wrong.any():
                return chosen
            pool = self.by_submit[eligible[self.by_submit] & ~chosen[self.by_submit]]
            if not len(pool):
                return None
            # Its mean is too high (a draining job would not drain): add the newest jobs.
            take = pool[-extra:] if (wrong & draining).any() else pool[:extra]
            chosen = chosen.copy()
            chosen[take] = True
            extra *= 2

    def _whole(
        self, run: Callable[[Snapshot], CyclePlan], base: Snapshot, alive: npt.NDArray[np.int64]
    ) -> CyclePlan:
        self.whole += 1
        return run(replace(base, pending=tuple(self.jobs[i] for i in alive)))

    def _settled(
        self,
        plan: CyclePlan,
        base: Snapshot,
        position: npt.NDArray[np.int64],
        head: int,
        outside: npt.NDArray[np.bool_],
    ) -> bool:
        """True when no job outside the focus could have started in the whole cycle."""
        if not outside.any():
            return True
        left = Capacity.from_snapshot(base)
        last_start = -1
        for start in plan.starts:
            i = self.index[start.job_key]
            last_start = max(last_start, int(position[i]))
            if position[i] < head:
                left.take(self.jobs[i], (start.cluster, start.gpu_type), start.nodes)
        rest = np.flatnonzero(outside)
        fitting = self._fits(left, np.unique(self.class_of[rest]))
        if not fitting:
            return True
        if not self.dominance or last_start >= head:
            return False
        held = [
            i
            for h in plan.holds
            if h.reason in _NO_ROOM and position[i := self.index[h.job_key]] > last_start
        ]
        for cls in fitting:
            members = rest[self.class_of[rest] == cls]
            covered = np.zeros(len(members), dtype=bool)
            for i in held:
                if self.shape_of[i] != self.class_shape[cls]:
                    continue
                covered |= (
                    (self.transfer[i] <= self.transfer[members])
                    & (self.runtime[i] <= self.runtime[members])
                ).all(axis=1)
            if not covered.all():
                return False
        return True


def _sigma(job: Job, gpu_type: str) -> float:
    """The log-space spread of ``job``'s runtime law on ``gpu_type`` (0: exact)."""
    return sigma_of(job.estimate.on(gpu_type) or 0.0, job.estimate.high_s.get(gpu_type))


def _level(job: Job, gpu_type: str, q: float) -> float:
    """The runtime quantile a range projection runs ``job`` at: ``q``; above one half, at
    least the level of the law's mean (see :func:`project_range`)."""
    return max(q, mean_level(_sigma(job, gpu_type))) if q > 0.5 else q


def _mean_wait(jobs: Sequence[Job], rows: npt.NDArray[np.int64], now_s: float) -> float:
    """The mean wait Reservations._draining reads, over ``jobs[rows]`` summed in that order."""
    total: float = sum(max(0.0, now_s - jobs[i].submit_s) for i in rows)
    return total / len(rows)


def project(
    snapshot: Snapshot,
    *,
    max_cycles: int = MAX_CYCLES,
    plan: Callable[[Snapshot], CyclePlan] | None = None,
    until: Collection[str] | None = None,
    focus: bool = True,
    arrivals: Sequence[Job] = (),
    runtime_q: float | None = None,
) -> dict[str, Projection]:
    """Start and end of each pending job if predictions hold; jobs not reached are absent.

    With ``until`` (job keys) the projection stops as soon as every one of them
    that is pending has its start: their projections are the same as without it,
    other jobs may be absent (the simulator's first ETAs need only new jobs).
    ``focus`` (with :func:`plan_cycle` as the planner and greedy placement) gives
    each projected cycle only the jobs that can act in it (see :class:`_Focus`);
    ``focus=False`` is the plain replay over the whole queue, with the same result.
    ``arrivals`` are jobs expected to be submitted later: each joins the queue at
    its ``submit_s`` (they may overtake the pending jobs, and get projections too);
    with arrivals the projection stops once the snapshot's pending jobs (or the
    ``until`` ones) have their starts. With ``runtime_q`` every job runs for the ``q``
    quantile of its runtime law instead of its median (running jobs: given their age,
    :func:`~cpn.core.runtime_law.quantile_end_s`); the queue's order and placement read
    the same estimates as without it (see :func:`project_range`).
    """
    from cpn.core.cycle import plan_cycle
    from cpn.core.queue import STRICT_ORDERINGS

    run = plan or plan_cycle
    policy = snapshot.policy
    # Same placement as the live cycle (see the module docstring); no preemption.
    policy = replace(policy, preemption=replace(policy.preemption, enabled=False))
    now = snapshot.now_s
    pending: dict[str, Job] = {j.key: j for j in snapshot.pending if not j.suspended}
    # Running jobs end at their median end given they still run (a moment from now at least).
    if runtime_q is None:
        running = [replace(r, predicted_end_s=expected_end_s(r, now)) for r in snapshot.running]
    else:
        running = [
            replace(r, predicted_end_s=quantile_end_s(r, now, _level(r.job, r.gpu_type, runtime_q)))
            for r in snapshot.running
        ]
    delta: Delta = {}
    state = replace(snapshot, policy=policy, pending=tuple(pending.values()))
    future = sorted(
        (j for j in arrivals if not j.suspended and j.key not in pending),
        key=lambda j: (j.submit_s, j.key),
    )
    focused = None
    if (
        focus
        and runtime_q is None  # the focus's proofs compare median runtimes
        and run is plan_cycle
        and policy.placement.method == "greedy"
        and policy.ordering not in STRICT_ORDERINGS
        and pending
    ):
        focused = _Focus(state, (*state.pending, *future))
        for j in future:
            focused.started(j.key)  # not in the queue until it arrives
    out: dict[str, Projection] = {}
    wanted = None if until is None else {k for k in until if k in pending}
    if wanted is None and future:
        wanted = set(pending)
    arrived = 0
    for _ in range(max_cycles):
        while arrived < len(future) and future[arrived].submit_s <= now:
            pending[future[arrived].key] = future[arrived]
            if focused is not None:
                focused.arrived(future[arrived].key)
            arrived += 1
        if not pending or (wanted is not None and wanted.issubset(out)):
            break
        if focused is None:
            current = replace(state, now_s=now, pending=tuple(pending.values()))
            result = run(_free_nodes(replace(current, running=tuple(running)), delta))
        else:
            base = replace(state, now_s=now, pending=(), running=tuple(running))
            result = focused.plan(run, _free_nodes(base, delta))
        for start in result.starts:
            job = pending.pop(start.job_key)
            if focused is not None:
                focused.started(job.key)
            runtime = start.predicted_runtime_s
            if runtime_q is not None:
                sigma = _sigma(job, start.gpu_type)
                runtime *= quantile_s(1.0, sigma, _level(job, start.gpu_type, runtime_q))
            end = now + start.transfer_s + runtime
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
                    alone=start.alone,
                )
            )
            _shift(delta, start.cluster, start.nodes, job, -1.0)
        upcoming = [r.predicted_end_s for r in running if r.predicted_end_s > now]
        upcoming += [j.not_before_s for j in pending.values() if j.not_before_s > now]
        if arrived < len(future):
            upcoming.append(future[arrived].submit_s)
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


#: The runtime quantiles :func:`project_range` projects the start's range with.
RANGE_QS = (0.2, 0.8)


def project_range(
    snapshot: Snapshot, *, qs: tuple[float, float] = RANGE_QS, **kwargs: Any
) -> dict[str, Projection]:
    """:func:`project`, each start given a range from the runtimes' uncertainty.

    Two more projections run every job (running and projected to start) for the ``qs``
    quantiles of its runtime law instead of its median (the high one at least at the level
    of the law's mean: a start waits for the sum of the runtimes ahead, and a sum of many
    right-skewed runtimes tends to the sum of their means, far above their medians when the
    law is wide), in the same order: the starts they give bound the start (``start_low_s``
    the earlier of the low one and the point, ``start_high_s`` the later of the high one
    and the point). A job either misses has no range. It propagates the runtime
    distributions to the start: a queue of jobs whose laws are wide (a history with runtimes
    from minutes to days) states a wide range, a queue of well-known jobs a narrow one.
    Costs three projections.
    """
    point = project(snapshot, **kwargs)
    if not point:
        return point
    low = project(snapshot, runtime_q=qs[0], **kwargs)
    high = project(snapshot, runtime_q=qs[1], **kwargs)
    out = {}
    for key, found in point.items():
        a, b = low.get(key), high.get(key)
        if a is None or b is None:
            out[key] = found
            continue
        out[key] = replace(
            found,
            start_low_s=min(a.start_s, b.start_s, found.start_s),
            start_high_s=max(a.start_s, b.start_s, found.start_s),
        )
    return out
