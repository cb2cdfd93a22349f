"""Free capacity of the member clusters during one cycle, node by node.

A :class:`Capacity` is a mutable working copy made from a snapshot at the start
of a cycle; the cycle takes from it as it decides starts. It answers two
questions: where does a job fit now (best-fit, node by node, every worker in
one cluster), and when would it fit, given the predicted ends of running jobs
(:meth:`Capacity.earliest_fit`), which reservations and wait estimates use.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cpn.core.model import Job, Node, Snapshot
from cpn.core.runtime_law import expected_end_s

_EPS = 1e-9

GroupKey = tuple[str, str]  # (cluster, gpu_type)


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
    releases: list[tuple[float, float, float, float]] = field(default_factory=list)


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


def _fits(slot: Slot, job: Job, need: float, gpus: float, cpu: float, memory: float) -> bool:
    if need > _EPS and job.gpu_memory_gib > slot.gpu_memory_gib + _EPS:
        return False
    return need <= gpus + _EPS and job.cpu <= cpu + _EPS and job.memory_gib <= memory + _EPS


Shape = tuple[float, int, float, float, float]


def shape(job: Job) -> Shape:
    """What placement looks at: per-worker GPUs, workers, CPU, memory, GPU memory."""
    return (worker_gpus(job), job.workers, job.cpu, job.memory_gib, job.gpu_memory_gib)


def _place(job: Job, slots: Sequence[Slot], free: dict[str, list[float]]) -> tuple[str, ...] | None:
    """Best-fit: each worker on the node that leaves the fewest GPUs free."""
    chosen: list[str] = []
    need = worker_gpus(job)
    for _ in range(job.workers):
        best: Slot | None = None
        best_left = math.inf
        for slot in slots:
            gpus, cpu, memory = free[slot.name]
            if not _fits(slot, job, need, gpus, cpu, memory):
                continue
            left = gpus - need
            if left < best_left - _EPS:
                best, best_left = slot, left
        if best is None:
            return None
        row = free[best.name]
        row[0] -= need
        row[1] -= job.cpu
        row[2] -= job.memory_gib
        chosen.append(best.name)
    return tuple(chosen)


class Capacity:
    """Per-node free resources, grouped by (cluster, GPU type)."""

    def __init__(self, slots: Iterable[Slot]) -> None:
        self.groups: dict[GroupKey, list[Slot]] = {}
        self._by_name: dict[tuple[str, str], Slot] = {}
        for slot in sorted(slots, key=lambda s: (s.cluster, s.gpu_type, s.name)):
            self.groups.setdefault((slot.cluster, slot.gpu_type), []).append(slot)
            self._by_name[(slot.cluster, slot.name)] = slot
        # Capacity only shrinks while a cycle decides starts, so a shape that does not
        # fit a group stays unfit until something is released: remember it.
        self._unfit: set[tuple[Shape, GroupKey, frozenset[str]]] = set()
        self._ever: dict[tuple[Shape, GroupKey], bool] = {}

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> Capacity:
        """Working copy of the snapshot's free capacity, with release times of running jobs."""
        ceiling = snapshot.policy.node_cpu_ceiling
        slots: list[Slot] = []
        for cluster in snapshot.clusters:
            for node in cluster.nodes:
                slots.append(_slot(node, cluster.ready, ceiling))
        capacity = cls(slots)
        for item in snapshot.running:
            end = expected_end_s(item, snapshot.now_s, at_least_s=0.0)
            for name in item.nodes:
                slot = capacity._by_name.get((item.cluster, name))
                if slot is not None:
                    job = item.job
                    slot.releases.append((end, worker_gpus(job), job.cpu, job.memory_gib))
        for slot in capacity._by_name.values():
            slot.releases.sort()
        return capacity

    def slot(self, cluster: str, name: str) -> Slot:
        """The slot of node ``name`` of ``cluster`` (KeyError when there is none)."""
        return self._by_name[(cluster, name)]

    def gpu_types(self) -> frozenset[str]:
        """GPU types present in usable clusters."""
        return frozenset(gpu for (_, gpu), slots in self.groups.items() if slots)

    def free_gpus(self, key: GroupKey, exclude: frozenset[str] = frozenset()) -> float:
        """Free GPUs of usable nodes in a group, minus nodes in ``exclude``."""
        return sum(
            s.free_gpus for s in self.groups.get(key, ()) if s.usable and s.name not in exclude
        )

    def fit(
        self, job: Job, key: GroupKey, exclude: frozenset[str] = frozenset()
    ) -> tuple[str, ...] | None:
        """Nodes for each worker of ``job`` in group ``key`` now, or None."""
        memo = (shape(job), key, exclude)
        if memo in self._unfit:
            return None
        slots = [s for s in self.groups.get(key, ()) if s.usable and s.name not in exclude]
        free = {s.name: [s.free_gpus, s.free_cpu, s.free_memory_gib] for s in slots}
        placed = _place(job, slots, free)
        if placed is None:
            self._unfit.add(memo)
        return placed

    def ever_fits(self, job: Job, key: GroupKey) -> bool:
        """True if ``job`` fits the group's nodes when they are empty."""
        memo = (shape(job), key)
        if memo not in self._ever:
            slots = list(self.groups.get(key, ()))
            free = {s.name: [float(s.gpus), s.cpu, s.memory_gib] for s in slots}
            self._ever[memo] = _place(job, slots, free) is not None
        return self._ever[memo]

    def take(
        self, job: Job, key: GroupKey, nodes: Sequence[str], until_s: float | None = None
    ) -> None:
        """Take the resources of a start on ``nodes``; they come back at ``until_s``."""
        need = worker_gpus(job)
        for name in nodes:
            slot = self._by_name[(key[0], name)]
            slot.free_gpus -= need
            slot.free_cpu -= job.cpu
            slot.free_memory_gib -= job.memory_gib
            if until_s is not None:
                slot.releases.append((until_s, need, job.cpu, job.memory_gib))
                slot.releases.sort()

    def release(self, cluster: str, nodes: Sequence[str], job: Job) -> None:
        """Give back what a preempted job held."""
        self._unfit.clear()
        need = worker_gpus(job)
        for name in nodes:
            slot = self._by_name.get((cluster, name))
            if slot is not None:
                slot.free_gpus += need
                slot.free_cpu += job.cpu
                slot.free_memory_gib += job.memory_gib

    def earliest_fit(
        self,
        job: Job,
        key: GroupKey,
        now_s: float,
        *,
        from_empty: bool = False,
        exclude: frozenset[str] = frozenset(),
    ) -> tuple[float, tuple[str, ...]] | None:
        """Earliest instant ``job`` fits in the group as running jobs end, and where.

        With ``from_empty`` the capacity free now is treated as taken by others
        (what a job that loses this cycle's contention can expect).
        """
        slots = [s for s in self.groups.get(key, ()) if s.usable and s.name not in exclude]
        if from_empty:
            free = {s.name: [0.0, 0.0, 0.0] for s in slots}
        else:
            free = {s.name: [s.free_gpus, s.free_cpu, s.free_memory_gib] for s in slots}
        if not from_empty:
            placed = _place(job, slots, {k: list(v) for k, v in free.items()})
            if placed is not None:
                return now_s, placed
        events = sorted(
            (end, slot.name, gpus, cpu, mem)
            for slot in slots
            for end, gpus, cpu, mem in slot.releases
        )
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
            placed = _place(job, slots, {k: list(v) for k, v in free.items()})
            if placed is not None:
                return instant, placed
        return None


def _slot(node: Node, ready: bool, ceiling: float | None) -> Slot:
    usable = ready and node.schedulable
    if ceiling is not None and node.cpu_util is not None and node.cpu_util > ceiling:
        usable = False
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
        usable=usable,
    )
