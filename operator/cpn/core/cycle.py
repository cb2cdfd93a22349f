"""The scheduling cycle: one pure function from a snapshot to a plan.

:func:`plan_cycle` is the only place cpn decides anything. The live operator
and the simulator both call it; it performs no I/O, reads no clock (time is
``snapshot.now_s``) and returns an equal plan for an equal snapshot.

One cycle, in order:

1. Hold suspended jobs, jobs backing off after a failure, and jobs no cluster
   could ever hold (``Infeasible``, refused with the numbers).
2. Rank the rest under the policy (levels, formula, aging: :mod:`cpn.core.queue`).
3. Walk the ranking. Each job is checked against its group's and user's quota,
   then placed where it completes soonest (transfer + predicted runtime), on
   nodes not held by a reservation unless it ends before the reservation starts
   (backfill), or on what a reservation's nodes have to spare when the
   reservation keeps its start there or on other room (backfill by resource;
   one that could start now on free room keeps free room). A job over its
   quota holds no reservation. A big or long-waiting job that does not fit
   gets a reservation at the earliest instant and place it will fit as running
   jobs end (room free now first: a job past its predicted end frees its room
   "now" only on paper); a big one
   (``claim_big``) or one that has waited ``drain_after_s`` (draining: these go
   first, oldest first) keeps the room even when it is free now, so jobs ranked
   above it cannot take it the moment it frees.
4. For the head of the queue (the window), the MILP of
   :mod:`cpn.core.placement` may revise the greedy choice jointly, when the
   greedy one is not already optimal.
5. Optionally preempt lower-ranked running jobs for blocked higher-ranked ones.
6. Every job that does not start gets a :class:`~cpn.core.model.Hold` with a
   reason and a message a researcher can read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from cpn.core import reasons
from cpn.core.candidates import candidates, order_candidates
from cpn.core.capacity import Capacity, GroupKey, Shape, shape, worker_gpus
from cpn.core.model import (
    CyclePlan,
    Hold,
    Job,
    Preempt,
    Snapshot,
    SolveStats,
    Start,
    WaitReason,
)
from cpn.core.placement import Candidate, Choice, solve_window
from cpn.core.policy import QueuePolicy
from cpn.core.preemption import preemption_cost_gpu_s
from cpn.core.queue import Ranked, effective_priority, order_jobs, runtime_for_order
from cpn.core.quota import QuotaLedger

#: Orderings under which a job that does not fit blocks every job behind it.
STRICT_ORDERINGS = frozenset({"fifo"})

#: Waiting for a faster GPU type must save at least this share of completion time.
DEFER_MARGIN = 0.1


@dataclass(frozen=True, slots=True)
class Reserved:
    """Room held for a blocked job from ``start_s`` on ``nodes`` of ``key``."""

    job: Job
    key: GroupKey
    nodes: frozenset[str]
    start_s: float

    @property
    def job_key(self) -> str:
        return self.job.key


def plan_cycle(snapshot: Snapshot) -> CyclePlan:
    """Decide what starts, what is preempted and why everything else waits."""
    return _Cycle(snapshot).run()


class _Cycle:
    """State of one cycle. Private: use :func:`plan_cycle`."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.policy: QueuePolicy = snapshot.policy
        self.now = snapshot.now_s
        self.capacity = Capacity.from_snapshot(snapshot)
        self.quota = QuotaLedger(self.policy, snapshot.running)
        self.starts: list[Start] = []
        self.holds: list[Hold] = []
        self.reserved: list[Reserved] = []
        self.stats = SolveStats()
        self.milp_held: set[str] = set()
        self.position: dict[str, int] = {}
        self.cands: dict[str, list[Candidate]] = {}
        self.walked: set[str] = set()  # jobs whose hold is written
        self.beside_failed: dict[tuple[Shape, GroupKey], list[frozenset[str]]] = {}

    # -- 1. eligibility ---------------------------------------------------------------
    def _eligible(self) -> list[Job]:
        out = []
        for job in sorted(self.snapshot.pending, key=lambda j: j.key):
            if job.suspended:
                self._hold(job, WaitReason.Suspended, reasons.SUSPENDED)
            elif job.not_before_s > self.now:
                wait = job.not_before_s - self.now
                self._hold(job, WaitReason.Backoff, reasons.backoff(job, wait))
            elif not any(
                job.allows(key[1]) and self.capacity.ever_fits(job, key)
                for key in self.capacity.groups
            ):
                self._hold(job, WaitReason.Infeasible, reasons.infeasible(job, self.snapshot))
            else:
                out.append(job)
        return out

    def _hold(
        self,
        job: Job,
        reason: WaitReason,
        message: str,
        ranked: Ranked | None = None,
        position: int = 0,
        reserved_start_s: float | None = None,
    ) -> None:
        self.walked.add(job.key)
        self.holds.append(
            Hold(
                job_key=job.key,
                reason=reason,
                message=message,
                position=position,
                score=ranked.score if ranked else 0.0,
                level=ranked.level_name if ranked else "",
                reserved_start_s=reserved_start_s,
            )
        )

    # -- 3. the greedy walk -------------------------------------------------------------
    def _in_the_way(self, job: Job, cand: Candidate) -> list[Reserved]:
        """Reservations of ``cand``'s group that a start of ``job`` there could delay.

        Under a strict order a reservation does not hold room against jobs ranked
        above its holder: they block it anyway, so holding it would only idle it.
        """
        # Backfill must end before the reservation starts even if it runs long: judged
        # on the estimate's high quantile, not its median (conservative backfilling).
        high = job.estimate.high_s.get(cand.key[1], cand.runtime_s)
        end = self.now + cand.transfer_s + max(cand.runtime_s, high)
        strict = self.policy.ordering in STRICT_ORDERINGS
        mine = self.position.get(job.key, 0)
        return [
            res
            for res in self.reserved
            if res.key == cand.key
            and res.job_key != job.key
            and (end > res.start_s or not self.policy.reservation.backfill)
            and not (strict and mine < self.position.get(res.job_key, 0))
        ]

    def _excluded(self, job: Job, cand: Candidate) -> frozenset[str]:
        """Nodes of ``cand`` this job may not use because a reservation holds them."""
        return frozenset().union(*(res.nodes for res in self._in_the_way(job, cand)))

    def _moved(
        self, res: Reserved, others: Sequence[Reserved], *, free_now: bool = False
    ) -> Reserved | None:
        """Room for ``res``'s job by its reserved start: ``res`` itself while its nodes
        still do, else (due now) other room no reservation in ``others`` holds; else None.

        With ``free_now`` only room free now counts.
        """
        job = res.job
        own = frozenset(s.name for s in self.capacity.groups[res.key]) - res.nodes
        options = [(res.key, own)]
        # Only a reservation due now moves (its room is held past a predicted end, and so
        # may any room it could move to); one due later keeps its nodes, so no later
        # cycle finds them taken until after its start.
        for cand in self._cands_of(job) if res.start_s <= self.now else ():
            if not self.quota.exceeds(job, cand.key[1]):
                taken = frozenset().union(*(r.nodes for r in others if r.key == cand.key))
                options.append((cand.key, taken))
        for index, (key, exclude) in enumerate(options):
            if free_now:
                nodes = self.capacity.fit(job, key, exclude)
                found = None if nodes is None else (self.now, nodes)
            else:
                found = self.capacity.earliest_fit(job, key, self.now, exclude=exclude)
            if found is not None and found[0] <= res.start_s + 1e-9:
                if index == 0:
                    return res
                return Reserved(job=job, key=key, nodes=frozenset(found[1]), start_s=found[0])
        return None

    def _fit_beside(self, job: Job, cand: Candidate) -> tuple[str, ...] | None:
        """Room on reserved nodes that their reservations can do without (backfill by resource).

        A reservation holds whole nodes against :meth:`_excluded`; here ``job`` may
        still start there if every reservation it touches keeps its start, on its
        nodes or moved to other room (a reservation that could start now on room free
        now must still find room free now: room of a job past its predicted end
        frees "now" only on paper). Tried on one reserved node at a time, then on all.
        """
        in_way = self._in_the_way(job, cand)
        if not in_way or not self.policy.reservation.backfill:
            return None
        # Capacity only shrinks in the walk: a shape that found no room beside some
        # reservations finds none later beside them or more, until reservations move.
        failed = self.beside_failed.setdefault((shape(job), cand.key), [])
        ways = frozenset(r.job_key for r in in_way)
        if any(f <= ways for f in failed):
            return None
        if self.capacity.fit(job, cand.key) is None:
            return None
        held = frozenset().union(*(r.nodes for r in in_way))
        tried: set[tuple[str, ...]] = set()
        for allowed in [*sorted(held), ""]:
            nodes = self.capacity.fit(job, cand.key, held - {allowed} if allowed else frozenset())
            if nodes is None or nodes in tried:
                continue
            tried.add(nodes)
            kept = self._kept_beside(job, cand, nodes, in_way)
            if kept is not None:
                self.reserved = kept
                self.beside_failed.clear()  # reservations moved
                return nodes
        failed.append(ways)
        return None

    def _kept_beside(
        self, job: Job, cand: Candidate, nodes: tuple[str, ...], in_way: list[Reserved]
    ) -> list[Reserved] | None:
        """The reservations once ``job`` starts on ``nodes``, the ones it touches kept or
        moved; None if one of them would have to start later."""
        touched = [r for r in in_way if r.nodes.intersection(nodes)]
        free_now = {
            r.job_key
            for r in touched
            if r.start_s <= self.now and self.capacity.fit(r.job, r.key, self._all_but(r))
        }
        self.capacity.take(job, cand.key, nodes)
        # This job's own reservation goes once it starts: its room may take another's.
        current: list[Reserved] | None = [r for r in self.reserved if r.job_key != job.key]
        for res in touched:
            assert current is not None
            others = [r for r in current if r.job_key != res.job_key]
            new = self._moved(res, others, free_now=res.job_key in free_now)
            current = None if new is None else [new if r is res else r for r in current]
            if current is None:
                break
        self.capacity.release(cand.key[0], nodes, job)
        return current

    def _all_but(self, res: Reserved) -> frozenset[str]:
        return frozenset(s.name for s in self.capacity.groups[res.key]) - res.nodes

    def _try_start(
        self, item: Ranked, cands: list[Candidate], *, borrowing: bool = False
    ) -> Start | None:
        job = item.job
        for cand in order_candidates(self.policy.placement.method, cands):
            if not borrowing and self.quota.exceeds(job, cand.key[1]):
                continue
            nodes = self.capacity.fit(job, cand.key, self._excluded(job, cand))
            if nodes is None:
                nodes = self._fit_beside(job, cand)
            if nodes is not None:
                return self._start(item, cand, nodes)
        return None

    def _start(self, item: Ranked, cand: Candidate, nodes: tuple[str, ...]) -> Start:
        until = self.now + cand.transfer_s + cand.runtime_s
        self.capacity.take(item.job, cand.key, nodes, until_s=until)
        self.quota.take(item.job, cand.key[1])
        self.reserved = [r for r in self.reserved if r.job_key != item.job.key]
        for res in list(self.reserved):
            if res.job_key not in self.walked and self.quota.exceeds(res.job, res.key[1]):
                # Over its quota now, the holder cannot start in this cycle: its room is
                # free for others (it reserves again once its quota allows).
                self.reserved.remove(res)
            elif res.key == cand.key and res.nodes.intersection(nodes):
                # A job ranked above the holder under a strict order may take its room.
                others = [r for r in self.reserved if r is not res]
                moved = self._moved(res, others)
                if moved is not res:
                    self.beside_failed.clear()
                    self.reserved.remove(res)
                    if moved is not None:
                        self.reserved.append(moved)
                    else:
                        self._reserve(res.job, self._cands_of(res.job))
        start = Start(
            job_key=item.job.key,
            cluster=cand.key[0],
            gpu_type=cand.key[1],
            nodes=nodes,
            predicted_runtime_s=cand.runtime_s,
            transfer_s=cand.transfer_s,
            score=item.score,
        )
        self.starts.append(start)
        return start

    def _defer_for_faster(self, item: Ranked, cands: list[Candidate]) -> Candidate | None:
        """A candidate worth waiting for: it completes sooner than any that fits now."""
        method = self.policy.placement.method
        if method in {"first-fit", "fastest"} or not self.policy.placement.wait_for_faster:
            return None
        job = item.job
        now_best = math.inf
        later: list[tuple[float, Candidate]] = []
        for cand in cands:
            done = cand.transfer_s + cand.runtime_s
            if self.capacity.fit(job, cand.key, self._excluded(job, cand)) is not None:
                now_best = min(now_best, done)
                continue
            found = self.capacity.earliest_fit(job, cand.key, self.now)
            if found is not None:
                later.append((found[0] - self.now + done, cand))
        if not later or math.isinf(now_best):
            return None
        wait_done, cand = min(later, key=lambda t: (t[0], t[1].key))
        return cand if wait_done < now_best * (1 - DEFER_MARGIN) else None

    def _cands_of(self, job: Job) -> list[Candidate]:
        found = self.cands.get(job.key)
        if found is None:
            found = self.cands[job.key] = candidates(job, self.capacity, self.snapshot)
        return found

    def _reserve(self, job: Job, cands: list[Candidate]) -> Reserved | None:
        res_policy = self.policy.reservation
        if not res_policy.enabled or len(self.reserved) >= res_policy.max_reservations:
            return None
        if not self._reserves(job):
            return None
        best: tuple[bool, float, bool, str, str, Reserved] | None = None
        for cand in cands:
            taken = frozenset().union(*(r.nodes for r in self.reserved if r.key == cand.key))
            found = self.capacity.earliest_fit(job, cand.key, self.now, exclude=taken)
            if found is None:
                continue
            when, nodes = found
            done = when + cand.transfer_s + cand.runtime_s
            res = Reserved(
                job=job,
                key=cand.key,
                nodes=frozenset(nodes),
                start_s=when,
            )
            # Room a job past its predicted end still holds frees "now" only on paper: it
            # comes after any other room (a job that can start now reserves where it can,
            # so no later holder reserves that room away from it); at equal completion,
            # room free now beats room predicted to free.
            late = when <= self.now and self.capacity.fit(job, cand.key, taken) is None
            waits = self.capacity.fit(job, cand.key) is None
            if best is None or (late, done, waits, *cand.key) < best[:5]:
                best = (late, done, waits, cand.key[0], cand.key[1], res)
        if best is None:
            return None
        self.reserved.append(best[5])
        return best[5]

    def run(self) -> CyclePlan:
        eligible = self._eligible()
        ranked = order_jobs(eligible, self.snapshot, self.capacity.gpu_types())
        window = self.policy.placement.window
        self.position = {item.job.key: i for i, item in enumerate(ranked)}
        self.cands = cands = {
            item.job.key: candidates(item.job, self.capacity, self.snapshot)
            for item in ranked[:window]
        }
        self._reserve_ahead(ranked, cands)
        if self.policy.placement.method == "milp":
            self._milp_window(ranked[:window], cands)
        blocked_by: Ranked | None = None
        lent: list[tuple[int, Ranked]] = []
        started = {s.job_key for s in self.starts}
        for position, item in enumerate(ranked, start=1):
            job = item.job
            if job.key in started:
                continue
            if job.key in self.milp_held and not self.quota.exceeds(job):
                self._hold(job, *self._why_deferred(item, cands[job.key]), item, position)
                continue
            if blocked_by is not None:
                self._hold(
                    job,
                    WaitReason.Priority,
                    reasons.behind(blocked_by.job.key, self.policy.ordering),
                    item,
                    position,
                )
                continue
            over = self.quota.exceeds(job)
            if over:
                if self.policy.quotas.lending:
                    lent.append((position, item))
                else:
                    self._hold(job, WaitReason.Quota, over, item, position)
                continue
            job_cands = cands.get(job.key)
            if job_cands is None:
                job_cands = candidates(job, self.capacity, self.snapshot)
            started_now = self._place_one(item, job_cands, position)
            if not started_now and self.policy.ordering in STRICT_ORDERINGS:
                blocked_by = item
        for position, item in lent:
            job_cands = cands.get(item.job.key) or candidates(
                item.job, self.capacity, self.snapshot
            )
            if self._try_start(item, job_cands, borrowing=True) is None:
                self._hold(
                    item.job,
                    WaitReason.Quota,
                    self.quota.exceeds(item.job) + reasons.NO_IDLE_TO_BORROW,
                    item,
                    position,
                )
        preemptions = self._preempt(ranked) if self.policy.preemption.enabled else ()
        holds = tuple(
            sorted(map(self._final, self.holds), key=lambda h: (h.position or 1 << 30, h.job_key))
        )
        return CyclePlan(
            starts=tuple(sorted(self.starts, key=lambda s: s.job_key)),
            preemptions=preemptions,
            holds=holds,
            stats=self.stats,
        )

    def _final(self, hold: Hold) -> Hold:
        """``hold`` with its reservation as it stands at the end of the cycle (a later
        start may have moved it to other room, never to a later start)."""
        res = self._reservation_of(hold.job_key)
        if hold.reserved_start_s is None or res is None:
            return hold
        return replace(
            hold,
            message=reasons.reserved(res.key, res.start_s, self.now),
            reserved_start_s=res.start_s,
        )

    def _reserve_ahead(self, ranked: Sequence[Ranked], cands: dict[str, list[Candidate]]) -> None:
        """Reserve, before anything starts, for the oldest blocked big or long-waiting jobs.

        Holders are chosen by level, then size (jobs of at least ``min_gpus``
        first), then submit time, not by score: the oldest
        blocked job stays the oldest until it starts, so its reservation holds
        from cycle to cycle instead of passing between jobs whose scores cross
        (which would let backfill eat the room each time). Every start of the
        cycle, whatever its rank, then keeps clear of the reserved nodes unless
        it ends before the reservation begins.
        """
        res_policy = self.policy.reservation
        if not res_policy.enabled or res_policy.max_reservations <= 0:
            return
        worthy = [item for item in ranked if self._reserves(item.job)]
        # Draining jobs first, oldest first; then big jobs (they cannot backfill; small
        # ones soon find room), then by age.
        worthy.sort(
            key=lambda r: (
                r.level,
                not self._draining(r.job),
                r.job.gpus < res_policy.min_gpus,
                r.job.submit_s,
                r.job.key,
            )
        )
        for item in worthy:
            if len(self.reserved) >= res_policy.max_reservations:
                return
            job = item.job
            job_cands = self._cands_of(job)
            if self.quota.exceeds(job) or not job_cands:
                continue
            # A job that fits at the start of the cycle may still lose the room to
            # higher-ranked jobs in the walk; a claiming job reserves it anyway.
            claims = self._draining(job) or (
                res_policy.claim_big and job.gpus >= res_policy.min_gpus
            )
            if not claims and any(self.capacity.fit(job, c.key) is not None for c in job_cands):
                continue
            self._reserve(job, job_cands)

    def _waited(self, job: Job) -> float:
        """Time ``job`` has spent waiting: since it was submitted, less what it ran before
        (a preempted job's running time is not waiting; nor is a running job's)."""
        ran = job.attained_gpu_s / job.gpus if job.gpus > 0 else 0.0
        return self.now - job.submit_s - ran

    def _reserves(self, job: Job) -> bool:
        """True if ``job``, when blocked, may hold a reservation: it is big, has waited
        ``aging.max_wait_s`` or drains (:meth:`_reserve_ahead`, :meth:`_reserve`)."""
        res_policy = self.policy.reservation
        if not res_policy.enabled:
            return False
        max_wait = self.policy.aging.max_wait_s
        return (
            job.gpus >= res_policy.min_gpus
            or (max_wait is not None and self._waited(job) >= max_wait)
            or self._draining(job)
        )

    def _draining(self, job: Job) -> bool:
        """True once ``job`` has waited ``reservation.drain_after_s`` and ``drain_ratio``
        times the mean wait of the pending jobs (the starvation guard)."""
        res_policy = self.policy.reservation
        after = res_policy.drain_after_s
        waited = self._waited(job)
        if after is None or waited < after:
            return False
        return waited >= res_policy.drain_ratio * self._mean_wait

    @cached_property
    def _mean_wait(self) -> float:
        pending = self.snapshot.pending
        if not pending:
            return 0.0
        return sum(max(0.0, self._waited(j)) for j in pending) / len(pending)

    def _reservation_of(self, key: str) -> Reserved | None:
        return next((r for r in self.reserved if r.job_key == key), None)

    def _place_one(self, item: Ranked, cands: list[Candidate], position: int) -> bool:
        """Start the job or hold it with its reason; True if it started."""
        job = item.job
        held = self._reservation_of(job.key)
        if held is not None:
            if self._try_start(item, cands) is not None:
                return True
            self._hold(
                job,
                WaitReason.Capacity,
                reasons.reserved(held.key, held.start_s, self.now),
                item,
                position,
                reserved_start_s=held.start_s,
            )
            return False
        if not cands:
            self._hold(
                job,
                WaitReason.Infeasible,
                reasons.NO_CANDIDATE,
                item,
                position,
            )
            return False
        faster = self._defer_for_faster(item, cands)
        if faster is not None:
            self._hold(
                job,
                WaitReason.Waiting,
                reasons.waiting_for(faster.key),
                item,
                position,
            )
            return False
        if self._try_start(item, cands) is not None:
            return True
        self._hold(job, *self._why_not(item, cands), item, position)
        return False

    def _why_not(self, item: Ranked, cands: list[Candidate]) -> tuple[WaitReason, str]:
        job = item.job
        held = any(self.capacity.fit(job, c.key) is not None for c in cands)
        if held:
            return WaitReason.Reservation, reasons.reserved_for(
                job, (r.job_key for r in self.reserved)
            )
        unusable = any(
            not s.usable and s.free_gpus + 1e-9 >= worker_gpus(job)
            for c in cands
            for s in self.capacity.groups[c.key]
        )
        free = max((self.capacity.free_gpus(c.key) for c in cands), default=0.0)
        if unusable:
            return WaitReason.NodeLoad, reasons.node_load(job)
        ahead = any(s for s in self.starts)
        reason = WaitReason.Priority if ahead else WaitReason.Capacity
        return reason, reasons.no_room(job, free)

    def _why_deferred(self, item: Ranked, cands: list[Candidate]) -> tuple[WaitReason, str]:
        """Reason for a job the MILP chose not to start."""
        fits = [c for c in cands if self.capacity.fit(item.job, c.key, self._excluded(item.job, c))]
        if fits:
            return WaitReason.Waiting, reasons.deferred(c.key for c in fits)
        return self._why_not(item, cands)

    # -- 4. the MILP over the window ------------------------------------------------------
    def _milp_window(self, window: Sequence[Ranked], cands: dict[str, list[Candidate]]) -> None:
        self.milp_held = set()
        eligible = [
            item for item in window if not self.quota.exceeds(item.job) and cands[item.job.key]
        ]
        if len(eligible) < 2:
            return
        choices: dict[str, list[Choice]] = {}
        for item in eligible:
            job = item.job
            options = []
            for cand in cands[job.key]:
                exclude = self._excluded(job, cand)
                if self.capacity.fit(job, cand.key, exclude) is None:
                    continue
                options.append(Choice(candidate=cand, exclude=exclude))
            choices[job.key] = options
        if sum(1 for opts in choices.values() if opts) < 2:
            return
        defer_cost: dict[str, float] = {}
        for item in eligible if self.policy.placement.wait_for_faster else ():
            best = math.inf
            for cand in cands[item.job.key]:
                found = self.capacity.earliest_fit(item.job, cand.key, self.now, from_empty=True)
                if found is not None:
                    wait = found[0] - self.now
                    best = min(best, self.policy.placement.wait_weight * wait + cand.cost)
            defer_cost[item.job.key] = best
        result = solve_window(eligible, choices, defer_cost, self.capacity, self.quota, self.policy)
        self.stats = result.stats
        if result.assignment is None:
            return
        for item in eligible:
            chosen = result.assignment.get(item.job.key)
            if chosen is None:
                if choices[item.job.key]:
                    self.milp_held.add(item.job.key)
                continue
            nodes = self.capacity.fit(item.job, chosen.key, self._excluded(item.job, chosen))
            if nodes is not None:
                self._start(item, chosen, nodes)

    # -- 5. preemption --------------------------------------------------------------------
    def _preempt(self, ranked: Sequence[Ranked]) -> tuple[Preempt, ...]:
        started = {s.job_key for s in self.starts}
        blocked = [r for r in ranked[: self.policy.placement.window] if r.job.key not in started]
        if not blocked or not self.snapshot.running:
            return ()
        now = self.now
        running_jobs = [
            replace(r.job, attained_gpu_s=r.job.attained_gpu_s + r.job.gpus * (now - r.start_s))
            for r in self.snapshot.running
        ]
        types = self.capacity.gpu_types()
        combined = order_jobs([*running_jobs, *(r.job for r in blocked)], self.snapshot, types)
        rank_of = {r.job.key: (r.level, -r.score) for r in combined}
        remaining = {r.job.key: runtime_for_order(r.job, types) for r in combined}
        prio = {r.job.key: effective_priority(r.job, self.policy) for r in combined}
        rules = self.policy.preemption
        gap = rules.min_priority_gap
        # Under the formula, scores are GPU-seconds: a victim must rank below by more
        # than the GPU-seconds its preemption wastes (see cpn.core.preemption).
        priced = self.policy.ordering == "cpn"
        cost = {
            r.job.key: preemption_cost_gpu_s(r, now, rules) if priced else 0.0
            for r in self.snapshot.running
        }
        # A victim that would hold a reservation once requeued (big, long-waiting or
        # draining) would claim its room straight back: never preempted.
        movable = {
            r.job.key
            for r, served in zip(self.snapshot.running, running_jobs, strict=True)
            if r.job.checkpoint
            and now - r.start_s >= rules.min_run_s
            and not self._reserves(served)
        }
        victims_taken: set[str] = set()
        out: list[Preempt] = []
        by_key = {r.job.key: r for r in self.snapshot.running}
        above: list[Ranked] = []  # blocked jobs ranked above, no preemption made for them
        for item in blocked:
            if self.quota.exceeds(item.job) or item.job.key in self.milp_held:
                continue  # it would not start on freed room either: a preemption for nothing
            above.append(item)
            mine = rank_of[item.job.key]
            pool = sorted(
                (
                    r
                    for r in self.snapshot.running
                    if r.job.key in movable
                    and r.job.key not in victims_taken
                    and rank_of[r.job.key][0] >= mine[0]
                    and rank_of[r.job.key][1] - mine[1] >= gap + cost[r.job.key]
                    and (
                        not priced
                        or rank_of[r.job.key][0] > mine[0]  # a lower level: rank decides
                        or prio[r.job.key] < prio[item.job.key]  # lower priority: rank decides
                        or remaining[r.job.key] >= rules.shorter_by * remaining[item.job.key]
                    )
                ),
                key=lambda r: (rank_of[r.job.key], r.job.key),
                reverse=True,
            )
            cands = {c.key: c for c in self._cands_of(item.job)}
            for key in sorted({(r.cluster, r.gpu_type) for r in pool}):
                if key not in cands or self.quota.exceeds(item.job, key[1]):
                    continue
                # Where another job holds a reservation, freed room goes to that job in the
                # next cycle (a reservation due now moves to room free now): no preemption.
                if any(r.key == key and r.job_key != item.job.key for r in self.reserved):
                    continue
                held = self._excluded(item.job, cands[key])
                chosen: list[str] = []
                for victim in (r for r in pool if (r.cluster, r.gpu_type) == key):
                    if held.intersection(victim.nodes):
                        continue
                    self.capacity.release(victim.cluster, victim.nodes, victim.job)
                    chosen.append(victim.job.key)
                    if self.capacity.fit(item.job, key, held) is not None:
                        break
                if (
                    chosen
                    and self.capacity.fit(item.job, key, held) is not None
                    and not self._taken_from_above(above[:-1], key)
                ):
                    nodes = self.capacity.fit(item.job, key, held)
                    assert nodes is not None
                    self.capacity.take(item.job, key, nodes)
                    above.pop()
                    for victim_key in chosen:
                        victims_taken.add(victim_key)
                        out.append(
                            Preempt(
                                job_key=victim_key,
                                for_key=item.job.key,
                                reason=reasons.preempted_for(item.job.key),
                            )
                        )
                    break
                for victim_key in chosen:
                    victim = by_key[victim_key]
                    self.capacity.take(victim.job, (victim.cluster, victim.gpu_type), victim.nodes)
        return tuple(out)

    def _taken_from_above(self, above: Sequence[Ranked], key: GroupKey) -> bool:
        """True if a blocked job ranked above would take room freed in ``key`` first: the
        next cycle gives it the room, so a preemption made for a lower job would serve a
        job that could not justify it (and be repeated, cycle after cycle)."""
        for item in above:
            cand = next((c for c in self._cands_of(item.job) if c.key == key), None)
            if cand is not None and self.capacity.fit(
                item.job, key, self._excluded(item.job, cand)
            ):
                return True
        return False
