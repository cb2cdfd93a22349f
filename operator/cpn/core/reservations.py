"""Reservations: room held for blocked big or long-waiting jobs, and backfill around it.

A blocked job that is big (``reservation.min_gpus``), heads its level (``head``: the
first-ranked job that fits nowhere), has waited ``aging.max_wait_s``
or drains (waited ``drain_after_s`` and ``drain_ratio`` times the mean wait of the
pending jobs) may reserve the earliest instant and place it fits as running jobs end
(:meth:`Reservations.reserve`, :meth:`Reservations.reserve_ahead`). Other jobs of the
cycle keep clear of reserved nodes unless they end before the reservation starts
(backfill, :meth:`Reservations.excluded`), or take what reserved nodes can spare while
every reservation they touch keeps its start, there or moved to other room (backfill by
resource, :meth:`Reservations.fit_beside`). Under ``preemption.claim`` a job that
checkpoints may also start on reserved room it would still hold at the reservation's
start, and the reservation counts the room of such jobs free from now: it stops them
when it starts (:meth:`Reservations.claim_since`, :func:`cpn.core.preemption.claim_preemptions`).

One :class:`Reservations` lives for one cycle of :mod:`cpn.core.cycle`, which shares its
capacity and quota ledgers with it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from cpn.core import reasons
from cpn.core.capacity import Capacity, GroupKey, Shape, shape
from cpn.core.fifodue import fifo_due, ran_s, widest_fifo_wait
from cpn.core.model import Hold, Job, Snapshot
from cpn.core.placement import Candidate
from cpn.core.queue import STRICT_ORDERINGS, Ranked
from cpn.core.quota import QuotaLedger


@dataclass(frozen=True, slots=True)
class Reserved:
    """Room held for a blocked job from ``start_s`` on ``nodes`` of ``key``; it would
    finish there at ``end_s`` (start, transfer and predicted runtime on that group)."""

    job: Job
    key: GroupKey
    nodes: frozenset[str]
    start_s: float
    end_s: float

    @property
    def job_key(self) -> str:
        return self.job.key


def held_nodes(in_way: list[Reserved]) -> frozenset[str]:
    """The nodes the reservations ``in_way`` hold."""
    return frozenset().union(*(res.nodes for res in in_way)) if in_way else frozenset()


class Reservations:
    """The reservations of one cycle, in ``held``; ``position`` is each job's rank."""

    def __init__(
        self,
        snapshot: Snapshot,
        capacity: Capacity,
        quota: QuotaLedger,
        cands_of: Callable[[Job], list[Candidate]],
    ) -> None:
        self.policy = snapshot.policy
        self.now = snapshot.now_s
        self.capacity = capacity
        self.quota = quota
        self.cands_of = cands_of
        self._pending = snapshot.pending
        self.held: list[Reserved] = []
        self.heads: set[str] = set()  # per level, the first-ranked job that fits nowhere
        self.dropped = 0  # reservations dropped as starts put their holders over quota
        self.position: dict[str, int] = {}
        self._beside_failed: dict[tuple[Shape, GroupKey], list[frozenset[str]]] = {}
        self.claim = self.policy.preemption.enabled and self.policy.preemption.claim
        self._claim_since: dict[str, float | None] = {}  # (claim_since)

    def in_the_way(self, job: Job, cand: Candidate) -> list[Reserved]:
        """Reservations of ``cand``'s group that a start of ``job`` there could delay.

        Under a strict order a reservation does not hold room against jobs ranked
        above its holder: they block it anyway, so holding it would only idle it.
        """
        here = [res for res in self.held if res.key == cand.key]
        if not here:  # (most groups hold none: skip the rest)
            return here
        # Backfill must end before the reservation starts even if it runs long: judged
        # on the estimate's high quantile, not its median (conservative backfilling).
        high = job.estimate.high_s.get(cand.key[1], cand.runtime_s)
        end = self.now + cand.transfer_s + max(cand.runtime_s, high)
        strict = self.policy.ordering in STRICT_ORDERINGS
        mine = self.position.get(job.key, 0)
        # Under ``preemption.claim`` a job that may be stopped when the reservation starts
        # backfills whatever its end, if it keeps at least one checkpoint by then.
        claim = self.claimable(job)
        interval = job.checkpoint_interval_s or self.policy.preemption.checkpoint_interval_s
        out = []
        for res in here:
            if res.job_key == job.key or (strict and mine < self.position.get(res.job_key, 0)):
                continue
            backfill = self.policy.reservation.backfill
            if (
                backfill
                and claim
                and job.gpus <= res.job.gpus
                and res.start_s - self.now >= interval
                and self.claim_since(res.job) is not None
            ):
                continue
            if end > res.start_s or not backfill:
                out.append(res)
        return out

    def excluded(self, job: Job, cand: Candidate) -> frozenset[str]:
        """Nodes of ``cand`` this job may not use because a reservation holds them."""
        return held_nodes(self.in_the_way(job, cand))

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
        lasts = {res.key: res.end_s - res.start_s}
        # Room of a GPU type its quota forbids is no room, unless the quota forbids its own
        # type as much (a user's whole quota in use): then it waits for quota anywhere.
        due_now = res.start_s <= self.now
        blocked_here = due_now and bool(self.quota.exceeds(job, res.key[1]))
        for cand in self.cands_of(job) if due_now else ():
            if blocked_here or not self.quota.exceeds(job, cand.key[1]):
                taken = frozenset().union(*(r.nodes for r in others if r.key == cand.key))
                options.append((cand.key, taken))
                lasts.setdefault(cand.key, cand.transfer_s + cand.runtime_s)
        for index, (key, exclude) in enumerate(options):
            if free_now:
                nodes = self.capacity.fit(job, key, exclude)
                found = None if nodes is None else (self.now, nodes)
            else:
                found = self.capacity.earliest_fit(
                    job, key, self.now, exclude=exclude, claim_since=self.claim_since(job)
                )
            if found is not None and found[0] <= res.start_s + 1e-9:
                if index == 0:
                    return res
                return Reserved(
                    job=job,
                    key=key,
                    nodes=frozenset(found[1]),
                    start_s=found[0],
                    end_s=found[0] + lasts[key],
                )
        return None

    def fit_beside(
        self, job: Job, cand: Candidate, in_way: list[Reserved]
    ) -> tuple[str, ...] | None:
        """Room on reserved nodes that their reservations can do without (backfill by resource).

        A reservation holds whole nodes against :meth:`excluded`; here ``job`` may
        still start there if every reservation it touches keeps its start, on its
        nodes or moved to other room (a reservation that could start now on room free
        now must still find room free now: room of a job past its predicted end
        frees "now" only on paper). Tried on one reserved node at a time, then on all.
        ``in_way``: :meth:`in_the_way` of ``job`` and ``cand``, as it stands.
        """
        if not in_way or not self.policy.reservation.backfill:
            return None
        # Capacity only shrinks in the walk: a shape that found no room beside some
        # reservations finds none later beside them or more, until reservations move.
        failed = self._beside_failed.setdefault((shape(job), cand.key), [])
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
                self.held = kept
                self._beside_failed.clear()  # reservations moved
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
        current: list[Reserved] | None = [r for r in self.held if r.job_key != job.key]
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

    def after_start(
        self, job: Job, cand: Candidate, nodes: tuple[str, ...], walked: Collection[str]
    ) -> None:
        """Keep the reservations true once ``job`` took ``nodes`` of ``cand`` (and its
        quota): its own goes, a holder not yet walked and now over its quota loses its
        room, and a reservation on the taken nodes moves (or is made again) elsewhere."""
        self.held = [r for r in self.held if r.job_key != job.key]
        for res in list(self.held):
            if res.job_key not in walked and self.quota.exceeds(res.job, res.key[1]):
                # Over its quota now, the holder cannot start in this cycle: its room is
                # free for others (it reserves again once its quota allows).
                self.held.remove(res)
                self.dropped += 1
            elif res.key == cand.key and res.nodes.intersection(nodes):
                # A job ranked above the holder under a strict order may take its room.
                others = [r for r in self.held if r is not res]
                moved = self._moved(res, others)
                if moved is not res:
                    self._beside_failed.clear()
                    self.held.remove(res)
                    if moved is not None:
                        self.held.append(moved)
                    else:
                        self.reserve(res.job, self.cands_of(res.job))

    def reserve(self, job: Job, cands: list[Candidate]) -> Reserved | None:
        res_policy = self.policy.reservation
        if not res_policy.enabled or len(self.held) >= res_policy.max_reservations:
            return None
        if not self.reserves(job):
            return None
        best: tuple[bool, float, bool, str, str, Reserved] | None = None
        for cand in cands:
            taken = frozenset().union(*(r.nodes for r in self.held if r.key == cand.key))
            found = self.capacity.earliest_fit(
                job, cand.key, self.now, exclude=taken, claim_since=self.claim_since(job)
            )
            if found is None:
                continue
            when, nodes = found
            # Room a job past its predicted end still holds frees "now" only on paper: it
            # comes after any other room (a job that can start now reserves where it can,
            # so no later holder reserves that room away from it); at equal completion,
            # room free now beats room predicted to free.
            late = when <= self.now and self.capacity.fit(job, cand.key, taken) is None
            idle = self.capacity.with_free_gpus(cand.key) - taken if late else frozenset()
            if idle:
                # Such room is held on nodes with nothing free now where that is as early:
                # GPUs free now stay for jobs that can start on them.
                busy = self.capacity.earliest_fit(
                    job,
                    cand.key,
                    self.now,
                    exclude=taken | idle,
                    claim_since=self.claim_since(job),
                )
                if busy is not None and busy[0] <= when:
                    nodes = busy[1]
            done = when + cand.transfer_s + cand.runtime_s
            res = Reserved(
                job=job,
                key=cand.key,
                nodes=frozenset(nodes),
                start_s=when,
                end_s=done,
            )
            waits = self.capacity.fit(job, cand.key) is None
            if best is None or (late, done, waits, *cand.key) < best[:5]:
                best = (late, done, waits, cand.key[0], cand.key[1], res)
        if best is None:
            return None
        res = best[5]
        self.held.append(res)
        return res

    def _drain_wait_s(self, job: Job) -> float | None:
        """Under ``fifo_share`` above 0, the wait at which ``job`` drains (that share of
        :meth:`wait_limit_s`); None with ``fifo_share`` 0 (it drains at its due time)."""
        share = self.policy.reservation.fifo_share
        return share * self.wait_limit_s(job) if share > 0 else None

    def reserve_ahead(self, ranked: Sequence[Ranked]) -> None:
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
        if res_policy.head:
            self.heads = self._heads(ranked)
        worthy = [item for item in ranked if self.reserves(item.job)]

        # Draining jobs first (under drain_fifo in due order, whatever their size:
        # :meth:`drain_order`); then big jobs (they cannot backfill; small ones soon find
        # room); then each level's head; then by age.
        def order(r: Ranked) -> tuple[object, ...]:
            draining = self.draining(r.job)
            return (
                r.level,
                not draining,
                self.drain_order(r.job) if draining else 0.0,
                r.job.gpus < res_policy.min_gpus,
                r.job.key not in self.heads,
                r.job.submit_s,
                r.job.key,
            )

        worthy.sort(key=order)
        for item in worthy:
            if len(self.held) >= res_policy.max_reservations:
                return
            job = item.job
            job_cands = self.cands_of(job)
            if self.quota.exceeds(job) or not job_cands:
                continue
            # A job that fits at the start of the cycle may still lose the room to
            # higher-ranked jobs in the walk; a claiming job reserves it anyway.
            claims = self.keeps_room(job)
            if not claims and any(self.capacity.fit(job, c.key) is not None for c in job_cands):
                continue
            self.reserve(job, job_cands)

    def _heads(self, ranked: Sequence[Ranked]) -> set[str]:
        """Per level, the first-ranked job within its quota that fits nowhere now."""
        heads: dict[int, str] = {}
        for item in ranked:
            if item.level in heads or self.quota.exceeds(item.job):
                continue
            cands = self.cands_of(item.job)
            if cands and all(self.capacity.fit(item.job, c.key) is None for c in cands):
                heads[item.level] = item.job.key
        return set(heads.values())

    def keeps_room(self, job: Job) -> bool:
        """True if ``job``, blocked, holds its reservation even where it fits at the start
        of the cycle (it drains, or it is big under ``claim_big``): no job ranked above it
        takes that room in the walk."""
        res_policy = self.policy.reservation
        return self.draining(job) or (res_policy.claim_big and job.gpus >= res_policy.min_gpus)

    def claim_since(self, job: Job) -> float | None:
        """Under ``preemption.claim``, since when ``job`` may reserve (the earliest instant
        one of the reasons it has now began: its size, its wait, its drain): a job that
        started on its room since then took room held, or about to be held, for it, and
        may be stopped for it. None without ``preemption.claim``, or for a job that does not
        keep its room (:meth:`keeps_room`): room it freed would go to higher-ranked jobs in
        the next cycle, the job just stopped first, to be claimed again (a loop)."""
        if not self.claim:
            return None
        if job.key not in self._claim_since:  # fixed within the cycle: asked per candidate
            self._claim_since[job.key] = self._since(job) if self.keeps_room(job) else None
        return self._claim_since[job.key]

    def _since(self, job: Job) -> float:
        res_policy = self.policy.reservation
        base = job.submit_s + ran_s(job)
        since = [self.now]
        if job.gpus >= res_policy.min_gpus:
            since.append(job.submit_s)
        guard = self.wait_guard_s
        if guard is not None and self.waited(job) >= guard:
            since.append(base + guard)
        if self.draining(job):
            need = self._drain_wait_s(job)
            if res_policy.drain_fifo and job.fifo_due_s is not None and need is not None:
                since.append(base + need)
            elif res_policy.drain_fifo and job.fifo_due_s is not None:
                since.append(job.fifo_due_s)
            elif res_policy.drain_after_s is not None:
                since.append(base + res_policy.drain_after_s)
        return min(since)

    def with_pending(self, snapshot: Snapshot, extra: Sequence[Job]) -> Reservations:
        """These reservations' rules read with ``extra`` pending too (the FIFO limits and
        mean wait depend on who waits): what stopping jobs would change."""
        alt = Reservations(
            replace(snapshot, pending=(*self._pending, *extra)),
            self.capacity,
            self.quota,
            self.cands_of,
        )
        alt.heads = self.heads
        return alt

    def claimable(self, job: Job) -> bool:
        """True if a reservation may stop ``job`` (running, or pending and started now)
        when the reservation starts (``preemption.claim``): it checkpoints and would not
        reserve once requeued, so the holder keeps the room it frees."""
        return self.claim and job.checkpoint and not self.reserves(job)

    def waited(self, job: Job) -> float:
        """Time ``job`` has spent waiting: since it was submitted, less what it ran before
        (a preempted job's running time is not waiting; nor is a running job's)."""
        return self.now - job.submit_s - ran_s(job)

    def reserves(self, job: Job, *, for_wait: bool = True) -> bool:
        """True if ``job``, when blocked, may hold a reservation: it is big, has waited
        :attr:`wait_guard_s` or drains (:meth:`reserve_ahead`, :meth:`_reserve`).
        ``for_wait=False``: not counting the wait (``max_wait_s``)."""
        res_policy = self.policy.reservation
        if not res_policy.enabled:
            return False
        return (
            job.gpus >= res_policy.min_gpus
            or job.key in self.heads
            or (
                for_wait and self.wait_guard_s is not None and self.waited(job) >= self.wait_guard_s
            )
            or self.draining(job)
        )

    @cached_property
    def wait_guard_s(self) -> float | None:
        """The wait after which a blocked job may reserve for it: ``aging.max_wait_s``, or
        ``aging.max_wait_fifo_share`` of :attr:`fifo_limit_s` if longer; None: never."""
        aging = self.policy.aging
        if aging.max_wait_s is None:
            return None
        return max(aging.max_wait_s, aging.max_wait_fifo_share * self.fifo_limit_s)

    def draining(self, job: Job) -> bool:
        """True once ``job`` has waited ``reservation.drain_after_s`` and ``drain_ratio``
        times the mean wait of the pending jobs (the starvation guard), or with
        ``reservation.drain_fifo`` once it has waited ``fifo_share`` times the longest FIFO
        wait budget of the pending jobs (with ``fifo_share`` 0: once the clock is past its
        own FIFO due time); the limit is :meth:`wait_limit_s`."""
        res_policy = self.policy.reservation
        waited = self.waited(job)
        if res_policy.drain_fifo and job.fifo_due_s is not None:
            need = self._drain_wait_s(job)
            if need is None:
                if fifo_due(job, self.now):
                    return True
            elif waited >= need:
                return True
        after = res_policy.drain_after_s
        if after is None or waited < after:
            return False
        return waited >= res_policy.drain_ratio * self._mean_wait

    def wait_limit_s(self, job: Job) -> float:
        """The wait ``job`` drains at ``fifo_share`` of (under ``drain_fifo``): for a job
        of fewer than ``calibrate_below_gpus`` GPUs with a calibrated due time the longest
        calibrated budget, for the others :attr:`fifo_limit_s`."""
        if (
            job.gpus < self.policy.reservation.calibrate_below_gpus
            and job.fifo_calibrated_due_s is not None
        ):
            return self._widest_calibrated
        return self.fifo_limit_s

    def behind(self, res: Reserved) -> bool:
        """True if ``res``'s job drains, its wait bound has run out and ``res`` starts
        after it: the bound is its submit time plus what it ran plus FIFO's longest wait
        (:attr:`fifo_limit_s`, under ``fifo_share``), else its FIFO due time
        (``preemption.for_overdue``)."""
        job = res.job
        if not self.draining(job):
            return False
        if self.policy.reservation.fifo_share > 0:
            bound = job.submit_s + ran_s(job) + self.fifo_limit_s
        elif job.fifo_due_s is not None:
            bound = job.fifo_due_s
        else:
            return False
        return res.start_s > bound and self.now >= bound

    def first_behind(self, held: Iterable[Reserved]) -> Reserved | None:
        """The reservation of ``held`` that is :meth:`behind` and due first (drain order,
        then job key); None if none is behind."""
        late = [r for r in held if self.behind(r)]
        return min(late, key=lambda r: (self.drain_order(r.job), r.job_key), default=None)

    def drain_order(self, job: Job) -> float:
        """Under ``reservation.drain_fifo``, when a draining ``job`` fell due: its FIFO due
        time, else (none stamped) its submit time; 0 without drain_fifo. Draining jobs
        reserve in this order, so an older-due draining job takes the earliest room
        before a later-due one, big or not, and the later one backfills only where it
        does not delay it (without drain_fifo big draining jobs go first, then the oldest)."""
        if not self.policy.reservation.drain_fifo:
            return 0.0
        return job.submit_s if job.fifo_due_s is None else job.fifo_due_s

    @cached_property
    def fifo_limit_s(self) -> float:
        """FIFO's longest wait as the jobs of ``calibrate_below_gpus`` GPUs or more see
        it: the longest FIFO wait budget of the pending jobs (:func:`widest_fifo_wait`)."""
        return widest_fifo_wait(self._pending)

    @cached_property
    def _widest_calibrated(self) -> float:
        """The longest calibrated FIFO wait budget of the pending jobs."""
        return widest_fifo_wait(self._pending, calibrated=True)

    @cached_property
    def _mean_wait(self) -> float:
        pending = self._pending
        if not pending:
            return 0.0
        return sum(max(0.0, self.waited(j)) for j in pending) / len(pending)

    def of(self, key: str) -> Reserved | None:
        return next((r for r in self.held if r.job_key == key), None)

    def final(self, hold: Hold) -> Hold:
        """``hold`` with its reservation as it stands at the end of the cycle (a later
        start may have moved it to other room, never to a later start)."""
        res = self.of(hold.job_key)
        if hold.reserved_start_s is None or res is None:
            return hold
        return replace(
            hold,
            message=reasons.reserved(res.key, res.start_s, self.now),
            reserved_start_s=res.start_s,
            reserved_end_s=res.end_s,
        )
