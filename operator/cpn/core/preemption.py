"""Preemption: whom the cycle stops for a blocked job, and what that costs.

:func:`choose_preemptions` picks the victims for the blocked jobs of the window.

A job that checkpoints every ``interval`` seconds of compute keeps, when stopped after
``elapsed`` seconds of compute, the work up to its last checkpoint
(:func:`saved_s`) and loses the rest; resuming costs a restart overhead on top
(:func:`preemption_cost_gpu_s`). The cycle preempts only when the waiting job ranks
above its victim by more than this cost (:func:`choose_preemptions`),
and the simulator charges exactly this, so both agree on what a preemption wastes.
With ``preemption.for_overdue`` the head of the overdue queue, once its wait budget is
spent, stops checkpointing jobs in the group it reserved whatever their ranks
(:func:`_overdue_head`, :func:`_cheapest_nodes_first`). With ``claim`` a reservation
due now stops the checkpointing jobs that took its room since its holder could reserve
(:func:`claim_preemptions`; :class:`cpn.core.policy.Preemption`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import replace

from cpn.core import reasons
from cpn.core.capacity import Capacity, GroupKey
from cpn.core.fifodue import resumed_due_s
from cpn.core.model import Job, Preempt, Running, Snapshot
from cpn.core.policy import Preemption
from cpn.core.queue import Ranked, effective_priority, order_jobs, runtime_for_order
from cpn.core.quota import QuotaLedger
from cpn.core.reservations import Reservations, held_nodes


def saved_s(elapsed_s: float, interval_s: float) -> float:
    """Compute kept by the last checkpoint after ``elapsed_s`` seconds of compute."""
    if elapsed_s <= 0:
        return 0.0
    if interval_s <= 0 or not math.isfinite(interval_s):
        return elapsed_s if interval_s <= 0 else 0.0
    return math.floor(elapsed_s / interval_s + 1e-9) * interval_s


def interval_of(item: Running, policy: Preemption) -> float:
    """The checkpoint interval of a running job (its own, else the policy's)."""
    return item.job.checkpoint_interval_s or policy.checkpoint_interval_s


def preemption_cost_gpu_s(item: Running, now_s: float, policy: Preemption) -> float:
    """GPU-seconds a preemption of ``item`` now wastes: work since its last checkpoint
    (counted from its start, which includes any transfer: an upper bound) plus the restart."""
    elapsed = max(0.0, now_s - item.start_s)
    lost = elapsed - saved_s(elapsed, interval_of(item, policy))
    return item.job.gpus * (lost + policy.restart_cost_s)


def requeued(item: Running, now_s: float) -> Job:
    """``item``'s job as it would wait if stopped at ``now_s``: its attempt counted as
    attained service and its FIFO due time moved by it."""
    ran = now_s - item.start_s
    return replace(
        item.job,
        attained_gpu_s=item.job.attained_gpu_s + item.job.gpus * ran,
        fifo_due_s=resumed_due_s(item.job.fifo_due_s, ran),
    )


def choose_preemptions(
    snapshot: Snapshot,
    ranked: Sequence[Ranked],
    *,
    started: Collection[str],
    milp_held: Collection[str],
    capacity: Capacity,
    quota: QuotaLedger,
    reservations: Reservations,
) -> tuple[Preempt, ...]:
    """Running jobs to stop for blocked jobs of the window that rank above them by more
    than the preemption costs (:func:`preemption_cost_gpu_s` under the formula).

    Only checkpointing jobs that ran ``min_run_s`` and would take no reservation once
    requeued are victims (under ``no_bigger_victims``, between jobs of one level and
    priority, only those needing at most the waiting job's GPUs); ``capacity`` is taken for
    each job a preemption is made for.
    """
    policy = snapshot.policy
    blocked = [r for r in ranked[: policy.placement.window] if r.job.key not in started]
    head = _overdue_head(ranked, started, reservations) if policy.preemption.for_overdue else None
    if head is not None:
        blocked = [head, *(r for r in blocked if r.job.key != head.job.key)]
    if not blocked or not snapshot.running:
        return ()
    now = snapshot.now_s
    running_jobs = [
        replace(r.job, attained_gpu_s=r.job.attained_gpu_s + r.job.gpus * (now - r.start_s))
        for r in snapshot.running
    ]
    types = capacity.gpu_types()
    combined = order_jobs([*running_jobs, *(r.job for r in blocked)], snapshot, types)
    rank_of = {r.job.key: (r.level, -r.score) for r in combined}
    gittins = policy.preemption.ranks_by_gittins
    remaining = {r.job.key: runtime_for_order(r.job, types, gittins=gittins) for r in combined}
    prio = {r.job.key: effective_priority(r.job, policy) for r in combined}
    rules = policy.preemption
    gap = rules.min_priority_gap
    # Under the formula, scores are GPU-seconds: a victim must rank below by more
    # than the GPU-seconds its preemption wastes (see cpn.core.preemption).
    priced = policy.ordering == "cpn"
    cost = {
        r.job.key: preemption_cost_gpu_s(r, now, rules) if priced else 0.0 for r in snapshot.running
    }
    # A victim that would hold a reservation once requeued (big, long-waiting or
    # draining, its FIFO due time moved as a preemption moves it) would claim its room
    # straight back: never preempted. The overdue head may stop one that would reserve
    # for its size or its wait, never one that would drain: draining jobs reserve first,
    # in due order, so the room it frees stays with the head.
    stoppable = {
        r.job.key: requeued(r, now)
        for r in snapshot.running
        if r.job.checkpoint and now - r.start_s >= rules.min_run_s
    }
    # A victim that waited ``protect_waited_share`` of FIFO's longest wait would likely
    # pass it once requeued: only the overdue head may stop it. Under
    # ``around_reservations`` one that would reserve only for its wait may be stopped.
    protect = rules.protect_waited_share
    for_wait = not rules.around_reservations
    movable = {
        key
        for key, job in stoppable.items()
        if not reservations.reserves(job, for_wait=for_wait)
        and (protect is None or reservations.waited(job) < protect * reservations.fifo_limit_s)
    }
    movable_for_head = {key for key, job in stoppable.items() if not reservations.draining(job)}

    def where(running: Running) -> GroupKey:  # its group: cluster, GPU type, domain
        return capacity.key_of(running.cluster, running.gpu_type, running.nodes)

    victims_taken: set[str] = set()
    out: list[Preempt] = []
    by_key = {r.job.key: r for r in snapshot.running}
    above: list[Ranked] = []  # blocked jobs ranked above, no preemption made for them
    for item in blocked:
        if quota.exceeds(item.job) or item.job.key in milp_held:
            continue  # it would not start on freed room either: a preemption for nothing
        above.append(item)
        mine = rank_of[item.job.key]
        overdue = head is not None and item.job.key == head.job.key
        pool = (
            _cheapest_nodes_first(snapshot.running, movable_for_head - victims_taken, cost)
            if overdue
            else sorted(
                (
                    r
                    for r in snapshot.running
                    if r.job.key in movable
                    and r.job.key not in victims_taken
                    and rank_of[r.job.key][0] >= mine[0]
                    and rank_of[r.job.key][1] - mine[1] >= gap + cost[r.job.key]
                    # Below the waiting job's level or priority, rank and price decide;
                    # between peers, the victim must be longer (``shorter_by``, under the
                    # formula) and, under ``no_bigger_victims``, no wider.
                    and (
                        rank_of[r.job.key][0] > mine[0]
                        or prio[r.job.key] < prio[item.job.key]
                        or (
                            (
                                not priced
                                or remaining[r.job.key]
                                >= rules.shorter_by * remaining[item.job.key]
                            )
                            and (not rules.no_bigger_victims or r.job.gpus <= item.job.gpus)
                        )
                    )
                ),
                key=lambda r: (rank_of[r.job.key], r.job.key),
                reverse=True,
            )
        )
        cands = {c.key: c for c in reservations.cands_of(item.job)}
        # The overdue head frees room only where it holds its reservation: there the
        # freed room moves its reservation to now, so nothing else takes it first.
        reserved = {r.key for r in reservations.held if r.job_key == item.job.key}
        for key in sorted({where(r) for r in pool}):
            if key not in cands or quota.exceeds(item.job, key[1]):
                continue
            if overdue and key not in reserved:
                continue
            # Where another job holds a reservation due now, freed room goes to it in the
            # next cycle (a reservation due now moves to room free now): no preemption.
            # One due later keeps its nodes (``held`` below keeps them from being victims);
            # unless ``around_reservations``, it forbids preemption in its group too.
            if any(
                r.key == key
                and r.job_key != item.job.key
                and (r.start_s <= now or not rules.around_reservations)
                for r in reservations.held
            ):
                continue
            held = reservations.excluded(item.job, cands[key])
            chosen: list[str] = []
            for victim in (r for r in pool if where(r) == key):
                if held.intersection(victim.nodes):
                    continue
                capacity.release(victim.cluster, victim.nodes, victim.job)
                chosen.append(victim.job.key)
                if capacity.fit(item.job, key, held) is not None:
                    break
            if (
                chosen
                and capacity.fit(item.job, key, held) is not None
                and (overdue or not _taken_from_above(above[:-1], key, capacity, reservations))
            ):
                nodes = capacity.fit(item.job, key, held)
                assert nodes is not None
                capacity.take(item.job, key, nodes)
                quota.take_slot(item.job)
                above.pop()
                for victim_key in chosen:
                    victims_taken.add(victim_key)
                    out.append(
                        Preempt(
                            job_key=victim_key,
                            for_key=item.job.key,
                            reason=(
                                reasons.preempted_for_overdue(item.job.key)
                                if overdue
                                else reasons.preempted_for(item.job.key)
                            ),
                        )
                    )
                break
            for victim_key in chosen:
                victim = by_key[victim_key]
                capacity.take(victim.job, where(victim), victim.nodes)
    return tuple(out)


def _cheapest_nodes_first(
    running: Sequence[Running], movable: Collection[str], cost: dict[str, float]
) -> list[Running]:
    """The movable running jobs, those on the nodes cheapest to clear first (a node with a
    job that may not be preempted last: clearing it frees less), then the cheapest."""
    on_node: dict[str, list[Running]] = {}
    for r in running:
        for node in set(r.nodes):
            on_node.setdefault(node, []).append(r)

    def clearing(node: str) -> float:
        jobs = on_node[node]
        if any(r.job.key not in movable for r in jobs):
            return math.inf
        return sum(cost[r.job.key] for r in jobs)

    price = {node: clearing(node) for node in on_node}
    return sorted(
        (r for r in running if r.job.key in movable),
        key=lambda r: (max(price[n] for n in r.nodes), cost[r.job.key], r.job.key),
    )


def _overdue_head(
    ranked: Sequence[Ranked], started: Collection[str], reservations: Reservations
) -> Ranked | None:
    """The first reservation holder in drain order that did not start, spent its wait
    budget and reserved room starting later still (:meth:`Reservations.behind`): the head
    of the overdue queue, which may stop any checkpointing job in its reserved group that
    would not drain once requeued, whatever their ranks (``preemption.for_overdue``)."""
    by_key = {r.job.key: r for r in ranked}
    first = reservations.first_behind(
        res for res in reservations.held if res.job_key in by_key and res.job_key not in started
    )
    return None if first is None else by_key[first.job_key]


def _taken_from_above(
    above: Sequence[Ranked], key: GroupKey, capacity: Capacity, reservations: Reservations
) -> bool:
    """True if a blocked job ranked above would take room freed in ``key`` first: the
    next cycle gives it the room, so a preemption made for a lower job would serve a
    job that could not justify it (and be repeated, cycle after cycle)."""
    for item in above:
        cand = next((c for c in reservations.cands_of(item.job) if c.key == key), None)
        if cand is not None and capacity.fit(item.job, key, reservations.excluded(item.job, cand)):
            return True
    return False


def claim_preemptions(
    snapshot: Snapshot,
    *,
    started: Collection[str],
    stopped: Collection[str],
    capacity: Capacity,
    reservations: Reservations,
) -> tuple[Preempt, ...]:
    """Under ``preemption.claim``: for each reservation due now whose holder does not fit,
    stop the jobs it may claim on its room (:meth:`Capacity.claims`: checkpointing, no
    wider than the holder, started since it began reserving; the cheapest to stop first),
    as many as it needs, unless with them (and every victim of the cycle's claims before)
    back in the queue this holder or an earlier one would no longer keep its room
    (:meth:`Reservations.keeps_room`): the room would go straight back to them in the next
    cycle, to be claimed again (a loop). ``stopped``: jobs already preempted this cycle.
    """
    now = snapshot.now_s
    rules = snapshot.policy.preemption
    out: list[Preempt] = []
    gone = set(stopped)
    # Every job this cycle stops, as it will wait (their FIFO budgets move the limits).
    requeued_all = [requeued(r, now) for r in snapshot.running if r.job.key in gone]
    claimers: list[Job] = []
    for res in sorted(reservations.held, key=lambda r: (r.start_s, r.job_key)):
        if res.job_key in started or res.start_s > now + 1e-6:
            continue
        others = held_nodes([r for r in reservations.held if r is not res and r.key == res.key])
        if capacity.fit(res.job, res.key, others) is not None:
            continue
        since = reservations.claim_since(res.job)
        pool = sorted(
            (
                r
                for r in snapshot.running
                if since is not None
                and r.job.key not in gone
                and capacity.claims(res.job, since, r.job.key)
                and res.nodes.intersection(r.nodes)
                and capacity.key_of(r.cluster, r.gpu_type, r.nodes) == res.key
            ),
            key=lambda r: (preemption_cost_gpu_s(r, now, rules), r.job.key),
        )
        chosen: list[Running] = []
        nodes = None
        for victim in pool:
            capacity.release(victim.cluster, victim.nodes, victim.job)
            chosen.append(victim)
            nodes = capacity.fit(res.job, res.key, others)
            if nodes is not None:
                break
        if nodes is not None:
            back = [*requeued_all, *(requeued(v, now) for v in chosen)]
            then = reservations.with_pending(snapshot, back)
            if all(then.keeps_room(holder) for holder in (*claimers, res.job)):
                requeued_all, claimers = back, [*claimers, res.job]
            else:
                nodes = None
        if nodes is None:
            for victim in chosen:
                key = capacity.key_of(victim.cluster, victim.gpu_type, victim.nodes)
                capacity.take(victim.job, key, victim.nodes)
            continue
        capacity.take(res.job, res.key, nodes)
        for victim in chosen:
            gone.add(victim.job.key)
            reason = reasons.preempted_for_claim(res.job_key)
            out.append(Preempt(job_key=victim.job.key, for_key=res.job_key, reason=reason))
    return tuple(out)
