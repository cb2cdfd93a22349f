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
   quota holds no reservation (when a start puts a holder over, the jobs that
   waited beside its room try again, in rank order, before the walk goes on).
   A big or long-waiting job that does not fit gets a reservation at the
   earliest instant and place it will fit as running jobs end (room free now
   first: a job past its predicted end frees its room "now" only on paper); a
   big one (``claim_big``) or one that has waited ``drain_after_s`` (draining:
   these go first, oldest first) keeps the room even when it is free now, so
   jobs ranked above it cannot take it the moment it frees.
4. For the head of the queue (the window), the MILP of
   :mod:`cpn.core.placement` may revise the greedy choice jointly, when the
   greedy one is not already optimal.
   Under ``placement.first_of_model_alone`` a job of a model never seen runs alone
   on its nodes (:mod:`cpn.core.alone`, applied by the capacity).
5. Optionally preempt lower-ranked running jobs for blocked higher-ranked ones, and
   (``preemption.for_overdue``, ``claim``) for a job past its wait bound or a
   reservation claiming its room (:mod:`cpn.core.preemption`).
6. Every job that does not start gets a :class:`~cpn.core.model.Hold` with a
   reason and a message a researcher can read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

from cpn.core import reasons
from cpn.core.candidates import candidates, in_order
from cpn.core.capacity import Capacity, GroupKey, worker_gpus
from cpn.core.fairshare import HOLD, lowest_level, standing
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
from cpn.core.preemption import choose_preemptions, claim_preemptions, requeued
from cpn.core.queue import (
    STRICT_ORDERINGS,
    Ranked,
    order_jobs,
)
from cpn.core.quota import QuotaLedger
from cpn.core.reservations import Reservations, Reserved, held_nodes
from cpn.core.siblings import censored_by_siblings
from cpn.core.transfer import staging

#: Waiting for a faster GPU type must save at least this share of completion time.
DEFER_MARGIN = 0.1


def _candidates_memo(
    memo: dict[str, list[Candidate]], capacity: Capacity, snapshot: Snapshot, job: Job
) -> list[Candidate]:
    """``job``'s candidates, computed once per cycle into ``memo``."""
    found = memo.get(job.key)
    if found is None:
        found = memo[job.key] = candidates(job, capacity, snapshot)
    return found


def plan_cycle(snapshot: Snapshot, *, capacity: Capacity | None = None) -> CyclePlan:
    """Decide what starts, what is preempted and why everything else waits.

    ``capacity``: the snapshot's, made by the caller (it must be in the state
    ``Capacity.from_snapshot(snapshot)`` makes; the cycle changes it), or None to make it
    here (the ETA projection passes one it renews: :mod:`cpn.core.capacity_renew`).
    """
    if snapshot.policy.running_siblings:
        snapshot = censored_by_siblings(snapshot)
    return _Cycle(snapshot, capacity).run()


class _Cycle:
    """State of one cycle. Private: use :func:`plan_cycle`."""

    def __init__(self, snapshot: Snapshot, capacity: Capacity | None = None) -> None:
        self.snapshot = snapshot
        self.policy: QueuePolicy = snapshot.policy
        self.now = snapshot.now_s
        self.capacity = Capacity.from_snapshot(snapshot) if capacity is None else capacity
        self.quota = QuotaLedger(self.policy, snapshot.running)
        self.fair = standing(snapshot)
        self.starts: list[Start] = []
        self.holds: list[Hold] = []
        self.stats = SolveStats()
        self.milp_held: set[str] = set()
        self.cands: dict[str, list[Candidate]] = {}
        self.walked: set[str] = set()  # jobs whose hold is written
        # Inputs this cycle's starts move, by (cluster, ident): seconds until complete.
        self.arriving: dict[tuple[str, str], float] = {}
        # Jobs held while a reservation could hold room they fit, in rank order.
        self.kept_out: list[tuple[Ranked, list[Candidate]]] = []
        self._unusable_memo: dict[
            tuple[float, tuple[GroupKey, ...]], tuple[tuple[str, str], ...]
        ] = {}
        # The memo is a partial over plain data, not a bound method: Reservations keeps it, and
        # a reference back to this object would make every cycle garbage only the cyclic
        # collector frees (several dead cycles' holds and candidates alive at once).
        cands_of = partial(_candidates_memo, self.cands, self.capacity, snapshot)
        self.reservations = Reservations(snapshot, self.capacity, self.quota, cands_of)
        if self.reservations.claim:  # preemption.claim: what reservations may stop
            self.capacity.claimable = {
                r.job.key: (r.job.gpus, r.start_s)
                for r in snapshot.running
                if self.reservations.claimable(requeued(r, snapshot.now_s))
            }
            self.capacity.claim_pending = self.reservations.claimable

    # -- 1. eligibility ---------------------------------------------------------------
    def _eligible(self) -> list[Job]:
        out = []
        largest: dict[tuple[str, str], int] | None = None  # for the infeasible ones' messages
        for job in sorted(self.snapshot.pending, key=lambda j: j.key):
            if job.suspended:
                self._hold(job, WaitReason.Suspended, reasons.SUSPENDED)
            elif job.not_before_s > self.now:
                wait = job.not_before_s - self.now
                self._hold(job, WaitReason.Backoff, reasons.backoff(job, wait))
            elif self.policy.quotas.over_budget == HOLD and job.group in self.fair.over_budget:
                self._hold(job, WaitReason.Budget, self._over_budget(job))
            elif not self.capacity.ever_fits_somewhere(job):
                largest = reasons.largest_nodes(self.snapshot) if largest is None else largest
                message = reasons.infeasible(job, self.snapshot, largest)
                self._hold(job, WaitReason.Infeasible, message)
            else:
                out.append(job)
        return out

    def _over_budget(self, job: Job) -> str:
        quota = self.policy.quotas.groups[job.group]
        used = self.fair.period_gpu_s.get(job.group, 0.0)
        period = self.policy.quotas.budget_period
        return reasons.over_budget(job.group, used, quota.gpu_hours or 0.0, period)

    def _hold(
        self,
        job: Job,
        reason: WaitReason,
        message: str,
        ranked: Ranked | None = None,
        position: int = 0,
        reserved: Reserved | None = None,
    ) -> None:
        self.walked.add(job.key)
        if ranked is not None and ranked.level == lowest_level(self.policy):
            message += reasons.at_lowest(job.group)
        self.holds.append(
            Hold(
                job_key=job.key,
                reason=reason,
                message=message,
                position=position,
                score=ranked.score if ranked else 0.0,
                level=ranked.level_name if ranked else "",
                reserved_start_s=reserved.start_s if reserved else None,
                reserved_end_s=reserved.end_s if reserved else None,
            )
        )

    # -- 3. the greedy walk -------------------------------------------------------------
    def _try_start(
        self, item: Ranked, cands: list[Candidate], *, borrowing: bool = False
    ) -> Start | None:
        job = item.job
        unfit = self.capacity.known_unfit(job)
        if unfit:  # (they would fit nowhere below: pass them before ordering)
            cands = [c for c in cands if c.key not in unfit]
        for cand in in_order(self.policy.placement.method, cands):
            # No room even on reserved nodes: none with them excluded, none beside them.
            anywhere = self.capacity.fit(job, cand.key)
            if anywhere is None:
                continue
            over = (
                self.quota.over_job_limit(job)
                if borrowing
                else self.quota.exceeds(job, cand.key[1])
            )
            if over:
                continue
            in_way = self.reservations.in_the_way(job, cand)
            excluded = held_nodes(in_way)
            nodes = self.capacity.fit(job, cand.key, excluded) if excluded else anywhere
            if nodes is None:
                nodes = self.reservations.fit_beside(job, cand, in_way)
            if nodes is not None:
                return self._start(item, cand, nodes)
        return None

    def _start(self, item: Ranked, cand: Candidate, nodes: tuple[str, ...]) -> Start:
        transfer, moves = self._staging(item.job, cand)
        until = self.now + transfer + cand.runtime_s
        self.capacity.take(item.job, cand.key, nodes, until_s=until)
        self.quota.take(item.job, cand.key[1])
        self.reservations.after_start(item.job, cand, nodes, self.walked)
        start = Start(
            job_key=item.job.key,
            cluster=cand.key[0],
            gpu_type=cand.key[1],
            nodes=nodes,
            predicted_runtime_s=cand.runtime_s,
            transfer_s=transfer,
            score=item.score,
            alone=self.capacity.alone(item.job),
            staged=moves,
        )
        self.starts.append(start)
        return start

    def _staging(self, job: Job, cand: Candidate) -> tuple[float, tuple[str, ...]]:
        """The start's transfer and the inputs it moves, sharing this cycle's stagings: an
        input an earlier start moves to the same cluster is not moved again (the job's data
        is ready when that staging is)."""
        if not job.inputs:
            return cand.transfer_s, ()
        cluster = cand.key[0]
        found = staging(job, cluster, self.snapshot, self.arriving)
        if found is None:  # not for a candidate: its data reached this cluster without them
            return cand.transfer_s, ()
        for ident in found.moves:
            self.arriving[(cluster, ident)] = found.seconds
        return found.seconds, found.moves

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
            if self.capacity.fit(job, cand.key, self.reservations.excluded(job, cand)) is not None:
                now_best = min(now_best, done)
                continue
            found = self.capacity.earliest_fit(job, cand.key, self.now)
            if found is not None:
                later.append((found[0] - self.now + done, cand))
        if not later or math.isinf(now_best) or not self._patient(job, now_best, cands):
            return None
        wait_done, cand = min(later, key=lambda t: (t[0], t[1].key))
        return cand if wait_done < now_best * (1 - DEFER_MARGIN) else None

    def _patient(self, job: Job, now_best: float, cands: list[Candidate]) -> bool:
        """Whether ``job`` may still wait for a faster GPU type: only while it has waited
        less than the fastest candidate would save it over the best that fits now
        (``now_best``, seconds to complete). So waiting never costs a job more than the
        faster GPU can give back, however often the GPU it waits for goes to others."""
        fastest = min(c.transfer_s + c.runtime_s for c in cands)
        return self.now - job.submit_s < now_best - fastest

    def run(self) -> CyclePlan:
        eligible = self._eligible()
        ranked = order_jobs(eligible, self.snapshot, self.capacity.gpu_types(), self.fair)
        window = self.policy.placement.window
        self.reservations.position = {item.job.key: i for i, item in enumerate(ranked)}
        cands = self.cands  # the memo the reservations read too: filled in place
        cands.clear()
        cands.update(
            (item.job.key, candidates(item.job, self.capacity, self.snapshot))
            for item in ranked[:window]
        )
        self.reservations.reserve_ahead(ranked)
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
                if self.policy.quotas.lending and not self.quota.over_job_limit(job):
                    lent.append((position, item))
                else:
                    self._hold(job, WaitReason.Quota, over, item, position)
                continue
            job_cands = cands.get(job.key)
            if job_cands is None:
                job_cands = candidates(job, self.capacity, self.snapshot)
            dropped = self.reservations.dropped
            started_now = self._place_one(item, job_cands, position)
            if started_now and self.reservations.dropped != dropped:
                self._retry_kept_out()
            if not started_now and self.policy.ordering in STRICT_ORDERINGS:
                blocked_by = item
        for position, item in lent:
            job_cands = cands.get(item.job.key) or candidates(
                item.job, self.capacity, self.snapshot
            )
            if self._try_start(item, job_cands, borrowing=True) is None:
                slots = self.quota.over_job_limit(item.job)  # lent jobs took the last slot
                self._hold(
                    item.job,
                    WaitReason.Quota,
                    slots or self.quota.exceeds(item.job) + reasons.NO_IDLE_TO_BORROW,
                    item,
                    position,
                )
        preemptions: tuple[Preempt, ...] = ()
        if self.policy.preemption.enabled:
            preemptions = choose_preemptions(
                self.snapshot,
                ranked,
                started={s.job_key for s in self.starts},
                milp_held=self.milp_held,
                capacity=self.capacity,
                quota=self.quota,
                reservations=self.reservations,
            )
            if self.reservations.claim:
                preemptions += claim_preemptions(
                    self.snapshot,
                    started={s.job_key for s in self.starts},
                    stopped={p.job_key for p in preemptions},
                    capacity=self.capacity,
                    reservations=self.reservations,
                )
        holds = tuple(
            sorted(
                map(self.reservations.final, self.holds),
                key=lambda h: (h.position or 1 << 30, h.job_key),
            )
        )
        return CyclePlan(
            starts=tuple(sorted(self.starts, key=lambda s: s.job_key)),
            preemptions=preemptions,
            holds=holds,
            stats=self.stats,
        )

    def _place_one(self, item: Ranked, cands: list[Candidate], position: int) -> bool:
        """Start the job or hold it with its reason; True if it started."""
        job = item.job
        held = self.reservations.of(job.key)
        if held is not None:
            if self._try_start(item, cands) is not None:
                return True
            self._hold(
                job,
                WaitReason.Capacity,
                reasons.reserved(held.key, held.start_s, self.now),
                item,
                position,
                reserved=held,
            )
            self.kept_out.append((item, cands))
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
        reason, message = self._why_not(item, cands)
        self._hold(job, reason, message, item, position)
        if reason is WaitReason.Reservation:
            self.kept_out.append((item, cands))
        return False

    def _retry_kept_out(self) -> None:
        """A start put a reservation's holder over its quota, so the room it held is free:
        the jobs held beside reserved room try again, in rank order (from the top again
        after each start that drops one more), before any job ranked below them."""
        while True:
            for entry in list(self.kept_out):
                item, cands = entry
                dropped = self.reservations.dropped
                if self._try_start(item, cands) is None:
                    continue
                key = item.job.key
                self.kept_out.remove(entry)
                self.walked.discard(key)
                self.holds = [h for h in self.holds if h.job_key != key]
                if self.reservations.dropped != dropped:
                    break
            else:
                return

    def _why_not(self, item: Ranked, cands: list[Candidate]) -> tuple[WaitReason, str]:
        job = item.job
        unfit = self.capacity.known_unfit(job)  # (fit is None there: pass them first)
        held = any(c.key not in unfit and self.capacity.fit(job, c.key) is not None for c in cands)
        if held:
            return WaitReason.Reservation, reasons.reserved_for(
                job, (r.job_key for r in self.reservations.held)
            )
        unusable = self._unusable_with_room(job, cands)
        if unusable:
            return WaitReason.NodeLoad, reasons.node_load(job, unusable)
        free = max((self.capacity.free_gpus(c.key) for c in cands), default=0.0)
        if any(self.capacity.fits_but_for_alone(job, c.key) for c in cands):
            if self.capacity.alone(job):
                return WaitReason.Capacity, reasons.no_empty_node(job, free)
            return WaitReason.Capacity, reasons.beside_alone(job)
        ahead = any(s for s in self.starts)
        reason = WaitReason.Priority if ahead else WaitReason.Capacity
        return reason, reasons.no_room(job, free)

    def _unusable_with_room(self, job: Job, cands: list[Candidate]) -> tuple[tuple[str, str], ...]:
        """(cluster/node, why) of the nodes of ``cands`` that take no new job and have room
        for one of ``job``'s workers; per worker size and groups, once a cycle (nothing starts
        on such a node, so what it has free does not change within the cycle)."""
        need = worker_gpus(job)
        key = (need, tuple(c.key for c in cands))
        found = self._unusable_memo.get(key)
        if found is None:
            found = self._unusable_memo[key] = tuple(
                (f"{s.cluster}/{s.name}", s.unusable_why)
                for c in cands
                for s in self.capacity.unusable[c.key]
                if s.free_gpus + 1e-9 >= need
            )
        return found

    def _why_deferred(self, item: Ranked, cands: list[Candidate]) -> tuple[WaitReason, str]:
        """Reason for a job the MILP chose not to start."""
        fits = [
            c
            for c in cands
            if self.capacity.fit(item.job, c.key, self.reservations.excluded(item.job, c))
        ]
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
                exclude = self.reservations.excluded(job, cand)
                if self.capacity.fit(job, cand.key, exclude) is None:
                    continue
                options.append(Choice(candidate=cand, exclude=exclude))
            choices[job.key] = options
        if sum(1 for opts in choices.values() if opts) < 2:
            return
        defer_cost: dict[str, float] = {}
        for item in eligible if self.policy.placement.wait_for_faster else ():
            now_best = min(
                (c.candidate.transfer_s + c.candidate.runtime_s for c in choices[item.job.key]),
                default=math.inf,
            )
            if math.isfinite(now_best) and not self._patient(
                item.job, now_best, cands[item.job.key]
            ):
                continue  # waited as long as a faster GPU could save it: no deferring
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
            nodes = self.capacity.fit(
                item.job, chosen.key, self.reservations.excluded(item.job, chosen)
            )
            if nodes is not None:
                self._start(item, chosen, nodes)
