"""Which pending jobs a projected cycle needs (:class:`Focus`), so that projecting a deep
queue (:func:`cpn.core.eta.project`) costs about the same per cycle whatever its length.

Each projected cycle gives :func:`plan_cycle` only the jobs that can
act in it (see :class:`Focus`): the head of the queue, every job that may hold
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
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from cpn.core.capacity import Capacity, GroupKey, Shape, shape
from cpn.core.fifodue import ran_s
from cpn.core.model import CyclePlan, Job, Snapshot, WaitReason

#: Jobs at the head of the queue a focused cycle starts from (x4 each time that is not enough).
HEAD = 16

#: Queues shorter than this run whole (the focus costs more than it saves on them).
MIN_FOCUS = 256

#: Hold reasons meaning the job found no room (not its quota, not a choice to wait).
NO_ROOM = frozenset(
    {WaitReason.Capacity, WaitReason.Reservation, WaitReason.NodeLoad, WaitReason.Priority}
)

_Vector = npt.NDArray[np.float64]


class Focus:
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

    def __init__(
        self,
        state: Snapshot,
        jobs: Sequence[Job],
        capacity_of: Callable[[Snapshot], Capacity] = Capacity.from_snapshot,
    ) -> None:
        from cpn.core.candidates import candidates
        from cpn.core.fairshare import LOWEST, lowest_level, standing
        from cpn.core.queue import effective_priority, factor_columns, level_of

        policy = state.policy
        self.policy = policy
        # a projected cycle's capacity (it may be one object renewed: used before the next)
        self.capacity_of = capacity_of
        self.jobs = list(jobs)
        n = len(self.jobs)
        self.index = {job.key: i for i, job in enumerate(self.jobs)}
        capacity = capacity_of(state)
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
        self.calibrated = np.array(
            [
                inf if j.fifo_calibrated_due_s is None else j.fifo_calibrated_due_s
                for j in self.jobs
            ],
            dtype=np.float64,
        )
        self.gpus = np.array([j.gpus for j in self.jobs], dtype=np.float64)
        # Reservations.waited: time run in earlier attempts
        self.ran = np.array([ran_s(j) for j in self.jobs], dtype=np.float64)
        self.level = np.array(
            [
                level_of(j, policy.levels, effective_priority(j, policy)) if policy.levels else 0
                for j in self.jobs
            ],
            dtype=np.int64,
        )
        over = standing(state).over_budget if policy.quotas.over_budget == LOWEST else ()
        for i, job in enumerate(self.jobs):  # ranked below every level (cpn.core.fairshare)
            if job.group in over:
                self.level[i] = lowest_level(policy)
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
            [capacity.ever_fits_somewhere(job) for job in self.jobs], dtype=bool
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

    def _drain_order(self, rows: npt.NDArray[np.int64]) -> _Vector:
        """Reservations.drain_order of ``jobs[rows]``: under drain_fifo the due time (the
        submit time if none is stamped), else 0."""
        if not self.policy.reservation.drain_fifo:
            return np.zeros(len(rows), dtype=np.float64)
        due = self.due[rows]
        return np.where(np.isinf(due), self.submit[rows], due)

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
        if len(order) <= max(HEAD, MIN_FOCUS):
            return self._whole(run, base, alive)
        # Draining jobs (Reservations.draining: waited drain_after_s and drain_ratio x the
        # mean wait of the whole queue) claim room: they join the focus, whose own mean must
        # agree on them.
        after = res.drain_after_s
        old = np.zeros(len(self.jobs), dtype=bool)
        draining = old
        if res.enabled and after is not None:
            old = self.alive & (waited >= after)
            if old.any():
                draining = old & (waited >= res.drain_ratio * mean_wait(self.jobs, alive, now))
        # ... and with drain_fifo the jobs past their FIFO due time, whatever the mean.
        due = np.zeros_like(old)
        widest: list[int] = []
        if res.enabled and res.drain_fifo and res.fifo_share > 0:
            # Reservations.draining: waited a share of the widest FIFO budget of the
            # queue (small jobs: the widest calibrated one); the focus holds
            # the jobs with those budgets, so its plans agree
            small = (self.gpus < res.calibrate_below_gpus) & ~np.isinf(self.calibrated)
            bound = np.zeros(len(self.jobs))
            for dues, these in ((self.due, ~small), (self.calibrated, small)):
                if not these.any():
                    continue
                budget = np.where(np.isinf(dues), 0.0, dues - self.submit - self.ran)
                top = alive[np.argmax(budget[alive])]
                widest.append(top)
                bound[these] = res.fifo_share * max(0.0, budget[top])
            due = self.alive & ~np.isinf(self.due) & (now - self.submit - self.ran >= bound)
        elif res.enabled and res.drain_fifo:
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
        capacity = self.capacity_of(base)
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
                    np.where(drains[ranked], self._drain_order(ranked), 0.0),
                    ~drains[ranked],
                    self.level[ranked],
                )
            )
        ]
        head, first = HEAD, 2 * res.max_reservations
        while head < len(order):
            chosen = np.zeros(len(self.jobs), dtype=bool)
            chosen[ranked[:first]] = True
            chosen[order[:head]] = True
            chosen[widest] = True
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
            seen = waited >= ratio * mean_wait(self.jobs, np.flatnonzero(chosen), now)
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
        left = self.capacity_of(base)
        last_start = -1
        for start in plan.starts:
            i = self.index[start.job_key]
            last_start = max(last_start, int(position[i]))
            if position[i] < head:
                key = left.key_of(start.cluster, start.gpu_type, start.nodes)
                left.take(self.jobs[i], key, start.nodes)
        rest = np.flatnonzero(outside)
        fitting = self._fits(left, np.unique(self.class_of[rest]))
        if not fitting:
            return True
        if not self.dominance or last_start >= head:
            return False
        held = [
            i
            for h in plan.holds
            if h.reason in NO_ROOM and position[i := self.index[h.job_key]] > last_start
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


def mean_wait(jobs: Sequence[Job], rows: npt.NDArray[np.int64], now_s: float) -> float:
    """The mean wait Reservations.draining reads, over ``jobs[rows]`` summed in that order."""
    total: float = sum(max(0.0, now_s - jobs[i].submit_s) for i in rows)
    return total / len(rows)
