"""Free capacity of the member clusters during one cycle, node by node.

A :class:`Capacity` is a mutable working copy made from a snapshot at the start
of a cycle; the cycle takes from it as it decides starts. It answers two
questions: where does a job fit now (best-fit, node by node, every worker in
one cluster), and when would it fit, given the predicted ends of running jobs
(:meth:`Capacity.earliest_fit`), which reservations and wait estimates use.

It also applies the rule of :mod:`cpn.core.alone`: a job that must run alone fits
only nodes no other job uses, and a node a job runs alone on takes no other job
until that job's (predicted) end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from cpn.core.alone import runs_alone
from cpn.core.domains import job_domain
from cpn.core.model import Job, Node, Running, Snapshot
from cpn.core.policy import QueuePolicy
from cpn.core.runtime_law import expected_end_s

_EPS = 1e-9

#: (cluster, GPU type), and the domain after them when the nodes are in one
#: (:mod:`cpn.core.domains`): a domain's nodes form groups of their own
GroupKey = tuple[str, ...]

#: What a job gives back on a node, and when: (instant, GPUs, CPU, memory); with the node
Release = tuple[float, float, float, float]
Event = tuple[float, str, float, float, float]  # (instant, node, GPUs, CPU, memory)


def group_key(cluster: str, gpu_type: str, domain: str = "") -> GroupKey:
    """The group of the nodes of ``cluster`` and ``gpu_type`` in ``domain``."""
    return (cluster, gpu_type, domain) if domain else (cluster, gpu_type)


def key_domain(key: GroupKey) -> str:
    """The domain of group ``key`` ("" for none)."""
    return key[2] if len(key) > 2 else ""


@dataclass(slots=True)
class Slot:
    """Free resources of one node (mutable within a cycle)."""

    cluster: str
    name: str
    gpu_type: str
    gpus: int
    free_gpus: float
    gpu_memory_gib: float
    free_cpu: float
    free_memory_gib: float
    cpu: float
    memory_gib: float
    usable: bool = True  # ready, schedulable and under the CPU ceiling
    unusable_why: str = ""  # why not, when not (what a job held off it is told)
    domain: str = ""
    running: list[Running] = field(default_factory=list)  # once per worker (releases())
    taken: list[Release] | None = None  # releases of this cycle's starts (None: none yet)
    sorted_releases: list[Release] | None = None  # all of them in order, made at this
    releases_epoch: int = -1  # capacity's epoch
    jobs: int = 0  # cpn jobs on it (running, or started this cycle)
    alone_key: str = ""  # the job that runs alone on it ("" when none)
    alone_until: float = math.inf  # that job's predicted end

    @property
    def key(self) -> GroupKey:
        """The group this node is in."""
        return group_key(self.cluster, self.gpu_type, self.domain)

    def empty(self) -> bool:
        """No job on it: all its GPUs free and no cpn job (what a job running alone needs)."""
        return self.jobs == 0 and self.free_gpus >= self.gpus - _EPS


@dataclass(slots=True)
class Usage:
    """Resources one or more pods or workers take on a node (a running sum)."""

    gpus: float = 0.0
    cpu: float = 0.0
    memory_gib: float = 0.0


def worker_gpus(job: Job) -> float:
    """GPUs one worker asks: a fraction when shared, else whole GPUs."""
    if job.gpus_per_worker <= 0:
        return 0.0
    return job.gpu_share if job.gpu_share < 1 else float(job.gpus_per_worker)


Shape = tuple[float, int, float, float, float]
CountKey = tuple[Shape, bool, frozenset[str]]  # shape, from_empty, nodes excluded


def shape(job: Job) -> Shape:
    """What placement looks at: per-worker GPUs, workers, CPU, memory, GPU memory."""
    return (worker_gpus(job), job.workers, job.cpu, job.memory_gib, job.gpu_memory_gib)


def _place(
    job: Job, slots: Sequence[Slot], free: dict[str, list[float]] | None = None
) -> tuple[str, ...] | None:
    """Best-fit: each worker on the node that leaves the fewest GPUs free.

    ``free`` maps each slot's name to its free [GPUs, CPU, memory]; without it, the
    slots' own free resources (left untouched).
    """
    chosen: list[str] = []
    need = worker_gpus(job)
    cpu_need, memory_need, eps = job.cpu, job.memory_gib, _EPS  # (locals: read per node)
    gpu_memory = job.gpu_memory_gib if need > eps else -math.inf
    rows: dict[str, list[float]] = {} if free is None else free
    for _ in range(job.workers):
        best: Slot | None = None
        best_left = math.inf
        for slot in slots:
            row = rows.get(slot.name) if rows else None
            if row is None:
                gpus = slot.free_gpus
                if (
                    need > gpus + eps
                    or cpu_need > slot.free_cpu + eps
                    or memory_need > slot.free_memory_gib + eps
                ):
                    continue
            else:
                gpus, cpu, memory = row
                if need > gpus + eps or cpu_need > cpu + eps or memory_need > memory + eps:
                    continue
            if gpu_memory > slot.gpu_memory_gib + eps:
                continue
            left = gpus - need
            if left < best_left - eps:
                best, best_left = slot, left
                if left <= 0:  # a fit leaves at least -_EPS: none can beat this one
                    break
        if best is None:
            return None
        row = rows.get(best.name)
        if row is None:
            row = rows[best.name] = [best.free_gpus, best.free_cpu, best.free_memory_gib]
        row[0] -= need
        row[1] -= job.cpu
        row[2] -= job.memory_gib
        chosen.append(best.name)
    return tuple(chosen)


class Capacity:
    """Per-node free resources, grouped by (cluster, GPU type)."""

    _NO_LAST: tuple[Job | None, Shape, bool, set[GroupKey]] = (
        None,
        (0.0, 0, 0.0, 0.0, 0.0),
        False,
        set(),
    )

    def __init__(self, slots: Iterable[Slot], policy: QueuePolicy | None = None) -> None:
        self.policy = policy
        self.groups: dict[GroupKey, list[Slot]] = {}
        self._by_name: dict[tuple[str, str], Slot] = {}
        for slot in sorted(slots, key=lambda s: (s.cluster, s.gpu_type, s.domain, s.name)):
            self.groups.setdefault(slot.key, []).append(slot)
            self._by_name[(slot.cluster, slot.name)] = slot
        # per domain, each of its groups with its GPU type; the GPU types in group order
        self.domain_groups: dict[str, list[tuple[GroupKey, str]]] = {}
        for key in self.groups:
            self.domain_groups.setdefault(key_domain(key), []).append((key, key[1]))
        self.types = list(dict.fromkeys(key[1] for key in self.groups))
        # ``usable`` never changes within a cycle: the usable nodes of each group, and
        # the others (what a job is told when only a busy node would hold it).
        self.usable = {key: [s for s in slots if s.usable] for key, slots in self.groups.items()}
        self.unusable = {
            key: [s for s in slots if not s.usable] for key, slots in self.groups.items()
        }
        self._alone_groups: set[GroupKey] = set()  # groups where a node may be held alone
        self._free: dict[GroupKey, float] = {}  # free GPUs of a group's usable nodes
        # its usable nodes with GPUs free, and perhaps a few taken full since (_place
        # passes over a node with none free, so they change no answer): how many
        self._open: dict[GroupKey, list[Slot]] = {}
        self._stale: dict[GroupKey, int] = {}
        # Capacity only shrinks while a cycle decides starts, so a shape that does not
        # fit a group stays unfit until something is released: remember it.
        # (per shape, nodes excluded and alone: the groups it does not fit)
        self._unfit: dict[tuple[Shape, frozenset[str], bool], set[GroupKey]] = {}
        self._ever: dict[tuple[Shape, GroupKey], bool] = {}
        self._alone: set[str] = set()  # jobs that hold their nodes alone
        self._running: set[str] = set()  # jobs of the snapshot's running list
        self._last: tuple[Job | None, Shape, bool, set[GroupKey]] = self._NO_LAST
        self.now_s = 0.0  # the snapshot's instant (running jobs' ends are read at it)
        # id(running job) -> its end: a job on the capacity's slots (so alive, its id its
        # own) until the capacity is renewed, when this is emptied
        self._ends: dict[int, float] = {}
        self._epoch = 0  # one more each time the capacity is renewed (capacity_renew.py)
        self._dirty: list[Slot] = []  # slots a start or a release changed
        self._events: dict[GroupKey, list[Event]] = {}  # (_group_events)
        self._counts: dict[GroupKey, dict[CountKey, tuple[dict[str, int], int]]] = {}
        # Under preemption.claim (set by the cycle): the running jobs a reservation may stop
        # when it starts, as GPUs and start; this cycle's starts of such jobs, per node, as
        # (release, GPUs); and which pending jobs are such. See earliest_fit(claim_since).
        self.claimable: dict[str, tuple[float, float]] = {}
        self.claim_taken: dict[str, list[tuple[Release, float]]] = {}
        self.claim_pending: Callable[[Job], bool] | None = None

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> Capacity:
        """Working copy of the snapshot's free capacity, with release times of running jobs."""
        ceiling = snapshot.policy.node_cpu_ceiling
        slots: list[Slot] = []
        for cluster in snapshot.clusters:
            for node in cluster.nodes:
                slots.append(_slot(node, cluster.ready, ceiling))
        capacity = cls(slots, snapshot.policy)
        capacity.now_s = snapshot.now_s
        for item in snapshot.running:
            capacity._running.add(item.job.key)
            if item.alone:
                capacity._alone.add(item.job.key)
            for name in item.nodes:
                slot = capacity._by_name.get((item.cluster, name))
                if slot is not None:
                    slot.running.append(item)
            for name in set(item.nodes):
                slot = capacity._by_name.get((item.cluster, name))
                if slot is not None:
                    slot.jobs += 1
                    if item.alone:
                        slot.alone_key, slot.alone_until = item.job.key, capacity.end(item)
                        capacity._alone_groups.add(slot.key)
        return capacity

    def end(self, item: Running) -> float:
        """When running job ``item`` is expected to end, seen at the capacity's instant."""
        found = self._ends.get(id(item))
        if found is not None:
            return found
        end = expected_end_s(item, self.now_s, at_least_s=0.0)
        self._ends[id(item)] = end
        return end

    def _group_events(self, key: GroupKey) -> list[Event]:
        """The releases of group ``key``'s usable nodes, each with its node's name, in
        order; kept until a start or release in the group (read, do not change)."""
        found = self._events.get(key)
        if found is None:  # (what releases() gives, without a list per node)
            found = [
                (
                    self.end(item),
                    slot.name,
                    worker_gpus(item.job),
                    item.job.cpu,
                    item.job.memory_gib,
                )
                for slot in self.usable.get(key, ())
                for item in slot.running
            ]
            found += [
                (r[0], slot.name, *r[1:])
                for slot in self.usable.get(key, ())
                if slot.taken
                for r in slot.taken
            ]
            found.sort()
            self._events[key] = found
        return found

    def _counts_of(
        self,
        job: Job,
        key: GroupKey,
        slots: list[Slot],
        free: dict[str, list[float]],
        ident: CountKey | None,
        make: bool,
    ) -> tuple[dict[str, int], int] | None:
        """How many of ``job``'s workers each node holds with ``free`` free, and in all (a
        copy); kept per ``ident`` (shape, from_empty, excluded: the rows a search starts
        from) until a start or release in the group. Without ``make``: only if kept."""
        keep = ident is not None and key not in self._alone_groups
        memo = self._counts.setdefault(key, {}) if keep else {}
        found = memo.get(ident) if ident is not None else None
        if found is None:
            if not make:
                return None
            count = {s.name: _workers_on(job, free[s.name], s) for s in slots}
            found = (count, sum(count.values()))
            if ident is not None:
                memo[ident] = found
        return dict(found[0]), found[1]

    def releases(self, slot: Slot) -> list[Release]:
        """What the jobs on ``slot`` give back and when, in order (running jobs at their
        expected ends, this cycle's starts at their predicted ones). Read, do not change."""
        memo = slot.sorted_releases
        if memo is not None and slot.releases_epoch == self._epoch:
            return memo
        out = [
            (self.end(item), worker_gpus(item.job), item.job.cpu, item.job.memory_gib)
            for item in slot.running
        ]
        if slot.taken:
            out += slot.taken
        out.sort()
        slot.sorted_releases, slot.releases_epoch = out, self._epoch
        return out

    def empty_at(self, slot: Slot) -> float:
        """When the last job on ``slot`` is expected to end (its last release; -inf with
        none): the node is empty from then on."""
        releases = self.releases(slot)
        return releases[-1][0] if releases else -math.inf

    def groups_for(self, domain: str) -> list[tuple[GroupKey, str]]:
        """The groups of ``domain``'s nodes, each with its GPU type: the only ones a job
        bound to ``domain`` may use (:func:`cpn.core.domains.job_domain`)."""
        return self.domain_groups.get(domain, [])

    def key_of(self, cluster: str, gpu_type: str, nodes: Sequence[str]) -> GroupKey:
        """The group of a start or running job on ``nodes`` of ``cluster`` (of ``gpu_type``
        in no domain when the capacity has none of them)."""
        slot = self._by_name.get((cluster, nodes[0])) if nodes else None
        return slot.key if slot is not None else group_key(cluster, gpu_type)

    def slot(self, cluster: str, name: str) -> Slot:
        """The slot of node ``name`` of ``cluster`` (KeyError when there is none)."""
        return self._by_name[(cluster, name)]

    def gpu_types(self) -> frozenset[str]:
        """GPU types present in usable clusters."""
        return frozenset(key[1] for key, slots in self.groups.items() if slots)

    def free_gpus(self, key: GroupKey, exclude: frozenset[str] = frozenset()) -> float:
        """Free GPUs of usable nodes in a group, minus nodes in ``exclude``."""
        if not exclude and key in self._free:
            return self._free[key]
        total = sum(s.free_gpus for s in self.usable.get(key, ()) if s.name not in exclude)
        if not exclude:
            self._free[key] = total
        return total

    def with_free_gpus(self, key: GroupKey) -> frozenset[str]:
        """The names of the group's usable nodes with a GPU free now."""
        return frozenset(s.name for s in self._open_slots(key) if s.free_gpus > 0)

    def alone(self, job: Job) -> bool:
        """True if ``job`` must run alone on its nodes (:mod:`cpn.core.alone`)."""
        return self.policy is not None and runs_alone(job, self.policy)

    def fit(
        self, job: Job, key: GroupKey, exclude: frozenset[str] = frozenset()
    ) -> tuple[str, ...] | None:
        """Nodes for each worker of ``job`` in group ``key`` now, or None."""
        if job is not self._last[0]:  # callers ask about one job many times in a row
            self.known_unfit(job)
        _, last_shape, alone, unfit = self._last
        if exclude:
            unfit = self._unfit.setdefault((last_shape, exclude, alone), set())
        if key in unfit:
            return None
        slots = self._room(key, last_shape[0])
        if exclude or alone or key in self._alone_groups:
            slots = [
                s
                for s in slots
                if s.name not in exclude and (s.empty() if alone else not s.alone_key)
            ]
        placed = _place(job, slots)
        if placed is None:
            unfit.add(key)
        return placed

    def known_unfit(self, job: Job) -> set[GroupKey]:
        """Groups :meth:`fit` already found ``job``'s shape does not fit now, none
        excluded (it stays unfit there until :meth:`release`). Read, do not change."""
        last, _, _, unfit = self._last
        if job is not last:
            last_shape, alone = shape(job), self.alone(job)
            unfit = self._unfit.setdefault((last_shape, frozenset(), alone), set())
            self._last = (job, last_shape, alone, unfit)
        return unfit

    def fits_but_for_alone(self, job: Job, key: GroupKey) -> bool:
        """For a ``job`` that does not fit in ``key`` now (:meth:`fit` is None): True if
        it would were it not for the rule of :mod:`cpn.core.alone` (it needs an empty
        node, or nodes are held alone)."""
        if not self.alone(job) and key not in self._alone_groups:
            return False  # the rule played no part in that answer
        return _place(job, self._room(key, worker_gpus(job))) is not None

    def _room(self, key: GroupKey, need: float) -> list[Slot]:
        """The usable nodes of group ``key`` a worker asking ``need`` GPUs may fit on:
        those with GPUs free when it asks any (a node with none free fits no such ask)."""
        if need <= _EPS:
            return self.usable.get(key, [])
        return self._open_slots(key)

    def _open_slots(self, key: GroupKey) -> list[Slot]:
        """The usable nodes of group ``key`` with a GPU free, kept between takes: it may
        still hold some that a take filled since (made again once half of it is)."""
        found = self._open.get(key)
        if found is None:
            found = self._open[key] = [s for s in self.usable.get(key, ()) if s.free_gpus > 0]
        return found

    def ever_fits(self, job: Job, key: GroupKey) -> bool:
        """True if ``job`` fits the group's nodes when they are empty."""
        memo = (shape(job), key)
        if memo not in self._ever:
            slots = list(self.groups.get(key, ()))
            free = {s.name: [float(s.gpus), s.cpu, s.memory_gib] for s in slots}
            self._ever[memo] = _place(job, slots, free) is not None
        return self._ever[memo]

    def ever_fits_somewhere(self, job: Job) -> bool:
        """True if ``job`` fits, when they are empty, the nodes of one group of its domain
        whose GPU type it allows (else no cluster could ever hold it)."""
        domain = job_domain(self.policy, job) if self.policy is not None else ""
        return any(
            job.allows(gpu_type) and self.ever_fits(job, key)
            for key, gpu_type in self.groups_for(domain)
        )

    def take(
        self, job: Job, key: GroupKey, nodes: Sequence[str], until_s: float | None = None
    ) -> None:
        """Take the resources of a start on ``nodes``; they come back at ``until_s``."""
        need = worker_gpus(job)
        alone = job.key in self._alone or (job.key not in self._running and self.alone(job))
        self._free.pop(key, None)
        if alone:
            self._alone.add(job.key)
            self._alone_groups.add(key)
        for name in set(nodes):
            slot = self._by_name[(key[0], name)]
            self._dirty.append(slot)
            self._events.pop(slot.key, None)
            self._counts.pop(slot.key, None)
            slot.jobs += 1
            if alone:
                slot.alone_key = job.key
                slot.alone_until = math.inf if until_s is None else until_s
        for name in nodes:
            slot = self._by_name[(key[0], name)]
            before = slot.free_gpus
            slot.free_gpus -= need
            slot.free_cpu -= job.cpu
            slot.free_memory_gib -= job.memory_gib
            if slot.free_gpus <= 0 < before:  # no longer one with GPUs free
                stale = self._stale[key] = self._stale.get(key, 0) + 1
                if stale * 2 > len(self._open.get(key, ())):  # made again when half is
                    self._open.pop(key, None)
                    self._stale[key] = 0
            if until_s is not None:
                if slot.taken is None:
                    slot.taken = []
                slot.taken.append((until_s, need, job.cpu, job.memory_gib))
                slot.sorted_releases = None
                if self.claim_pending is not None and self.claim_pending(job):
                    self.claim_taken.setdefault(name, []).append(
                        ((until_s, need, job.cpu, job.memory_gib), job.gpus)
                    )

    def release(self, cluster: str, nodes: Sequence[str], job: Job) -> None:
        """Give back what a preempted job held."""
        self._unfit.clear()
        self._last = self._NO_LAST
        self._free.clear()
        self._open.clear()
        self._stale.clear()
        need = worker_gpus(job)
        for name in set(nodes):
            slot = self._by_name.get((cluster, name))
            if slot is not None:
                self._dirty.append(slot)
                self._events.pop(slot.key, None)
                self._counts.pop(slot.key, None)
                slot.jobs = max(0, slot.jobs - 1)
                if slot.alone_key == job.key:
                    slot.alone_key, slot.alone_until = "", math.inf
        for name in nodes:
            slot = self._by_name.get((cluster, name))
            if slot is not None:
                slot.free_gpus += need
                slot.free_cpu += job.cpu
                slot.free_memory_gib += job.memory_gib

    def _claim_events(
        self, holder: Job, since: float, slots: list[Slot], now_s: float
    ) -> list[Event]:
        """The releases of ``slots`` in order, those of jobs ``holder`` may stop now."""
        events: list[Event] = []
        for slot in slots:
            for item in slot.running:
                end = now_s if self.claims(holder, since, item.job.key) else self.end(item)
                job = item.job
                events.append((end, slot.name, worker_gpus(job), job.cpu, job.memory_gib))
            mine = [r for r, g in self.claim_taken.get(slot.name, ()) if g <= holder.gpus]
            for r in slot.taken or ():
                if r in mine:  # started this cycle, claimable: may be stopped too
                    mine.remove(r)
                    events.append((now_s, slot.name, *r[1:]))
                else:
                    events.append((r[0], slot.name, *r[1:]))
        events.sort()
        return events

    def claims(self, holder: Job, since: float, key: str) -> bool:
        """True if a reservation of ``holder``, which may reserve since ``since``, may stop
        running job ``key`` when it starts: claimable, no wider, started since then."""
        found = self.claimable.get(key)
        return found is not None and found[0] <= holder.gpus and found[1] >= since - 1e-6

    def earliest_fit(
        self,
        job: Job,
        key: GroupKey,
        now_s: float,
        *,
        from_empty: bool = False,
        exclude: frozenset[str] = frozenset(),
        claim_since: float | None = None,
    ) -> tuple[float, tuple[str, ...]] | None:
        """Earliest instant ``job`` fits in the group as running jobs end, and where.

        With ``from_empty`` the capacity free now is treated as taken by others
        (what a job that loses this cycle's contention can expect). A job that must run
        alone waits for a node whose jobs have all ended; others do not use a node held
        alone before the end of the job holding it. With ``claim_since`` (a reservation's
        search under ``preemption.claim``) the jobs :meth:`claims` says it may stop free
        their room now.
        """
        slots = [s for s in self.groups.get(key, ()) if s.usable and s.name not in exclude]
        if from_empty:
            free = {s.name: [0.0, 0.0, 0.0] for s in slots}
        else:
            free = {s.name: [s.free_gpus, s.free_cpu, s.free_memory_gib] for s in slots}
        alone = self.alone(job)
        if (
            claim_since is not None
            and (self.claimable or self.claim_taken)
            and key not in self._alone_groups
        ):
            events = self._claim_events(job, claim_since, slots, now_s)
        elif key not in self._alone_groups:  # no node held alone: the group's releases, in order
            events = self._group_events(key)
            if exclude:
                events = [e for e in events if e[1] not in exclude]
        else:
            events = [
                (end, slot.name, gpus, cpu, mem)
                for slot in slots
                for end, gpus, cpu, mem in self.releases(slot)
            ]
            if not alone:  # a node held alone: what is free on it comes back at its end
                for slot in slots:
                    if slot.alone_key:
                        gpus, cpu, mem = free[slot.name]
                        events.append((slot.alone_until, slot.name, gpus, cpu, mem))
                        free[slot.name] = [0.0, 0.0, 0.0]
            events.sort()
        # for a job alone: a node is empty once its last job has ended (its last release)
        last = {s.name: self.empty_at(s) for s in slots} if alone else {}

        def place(instant: float | None) -> tuple[str, ...] | None:
            usable = slots
            if alone:
                usable = [
                    s
                    for s in slots
                    if (s.empty() if instant is None else last[s.name] <= instant + _EPS)
                    and free[s.name][0] >= s.gpus - _EPS
                ]
            # _place changes the rows of the nodes it picks: one worker only once it
            # fits (and then the search ends); more may change some and still not fit.
            rows = free if job.workers <= 1 else {k: list(v) for k, v in free.items()}
            return _place(job, usable, rows)

        # Not alone, once a try failed (leaving the rows as they were): workers per node and
        # in all; fewer than the job's, _place cannot fit it (changes are counted again).
        ident = (shape(job), from_empty, exclude)
        counted = None if alone else self._counts_of(job, key, slots, free, ident, False)
        if not from_empty and (counted is None or counted[1] >= job.workers):
            placed = place(None)
            if placed is not None:
                return now_s, placed
            if not alone and counted is None:
                counted = self._counts_of(job, key, slots, free, ident, True)
        count, total = counted if counted is not None else ({}, 0)
        index = 0
        while index < len(events):
            instant = events[index][0]
            while index < len(events) and events[index][0] <= instant + _EPS:
                _, name, gpus, cpu, mem = events[index]
                row = free[name]
                row[0] += gpus
                row[1] += cpu
                row[2] += mem
                index += 1
                if counted is not None:
                    total -= count[name]
                    count[name] = _workers_on(job, row, self._by_name[(key[0], name)])
                    total += count[name]
            if counted is not None and total < job.workers:
                continue
            placed = place(instant)
            if placed is not None:
                return instant, placed
            if not alone and counted is None:
                counted = self._counts_of(job, key, slots, free, None, True)
                count, total = counted if counted is not None else ({}, 0)
        return None


def _workers_on(job: Job, row: list[float], slot: Slot) -> int:
    """How many of ``job``'s workers :func:`_place` could put on ``slot`` with ``row`` (its
    free [GPUs, CPU, memory]) free, all of them at most: its test, worker after worker."""
    need, eps = worker_gpus(job), _EPS
    if need > eps and job.gpu_memory_gib > slot.gpu_memory_gib + eps:
        return 0
    gpus, cpu, memory = row
    held = 0
    while held < job.workers and not (
        need > gpus + eps or job.cpu > cpu + eps or job.memory_gib > memory + eps
    ):
        gpus, cpu, memory = gpus - need, cpu - job.cpu, memory - job.memory_gib
        held += 1
    return held


def _slot(node: Node, ready: bool, ceiling: float | None) -> Slot:
    why = ""
    if not ready:
        why = "its cluster not ready"
    elif not node.schedulable:
        why = "not schedulable"
    elif ceiling is not None and node.cpu_util is not None and node.cpu_util > ceiling:
        why = f"CPU above the ceiling ({ceiling:g})"
    return Slot(
        cluster=node.cluster,
        name=node.name,
        gpu_type=node.gpu_type,
        gpus=node.gpus,
        free_gpus=node.free_gpus,
        gpu_memory_gib=node.gpu_memory_gib,
        free_cpu=node.free_cpu,
        free_memory_gib=node.free_memory_gib,
        cpu=node.cpu,
        memory_gib=node.memory_gib,
        usable=not why,
        unusable_why=why,
        domain=node.domain,
    )
