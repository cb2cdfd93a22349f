"""One :class:`~cpn.core.capacity.Capacity` carried from one projected cycle to the next.

The ETA projection (:func:`cpn.core.eta.project`) plans a few hundred future cycles of
one fleet; between two of them only a few nodes' free resources change (the jobs that
started or ended) and a few running jobs come and go. :meth:`Capacity.from_snapshot`
makes every node's slot anew each time (10,000 nodes: most of a projected cycle's cost).
:class:`Renewing` keeps the capacity it made and brings it to the next snapshot's state:
the slots the last cycle's starts changed, the nodes whose free resources changed and
the running jobs that ended or started, nothing else. What it hands back is in the state
``Capacity.from_snapshot`` would make of that snapshot (the projection's results are the
same with it or without: ``project(..., renew=False)``); whenever that cannot be had so
cheaply (another policy or fleet, a node changed more than its free resources, a job
running alone) it makes the capacity anew.

Pure: it holds only what the caller gives it, and the capacity it hands back is valid
until the next call (each call reuses it).
"""

from __future__ import annotations

import math

from cpn.core.capacity import Capacity, Slot
from cpn.core.model import Cluster, Node, Running, Snapshot


def _same_but_free(new: Node, old: Node) -> bool:
    """True when ``new`` differs from ``old`` at most in its free resources."""
    return (
        new.name == old.name
        and new.cluster == old.cluster
        and new.gpu_type == old.gpu_type
        and new.gpus == old.gpus
        and new.gpu_memory_gib == old.gpu_memory_gib
        and new.cpu == old.cpu
        and new.memory_gib == old.memory_gib
        and new.cpu_util == old.cpu_util
        and new.schedulable == old.schedulable
        and new.domain == old.domain
    )


class Renewing:
    """Call it with each snapshot of one fleet in turn: the capacity of that snapshot."""

    def __init__(self) -> None:
        self._capacity: Capacity | None = None
        self._clusters: tuple[Cluster, ...] = ()
        self._running: dict[int, Running] = {}
        # per cluster, where each node is in its tuple (the same while renewing: a changed
        # node keeps its name and place)
        self._index: dict[str, dict[str, int]] = {}
        self.built = 0  # capacities made anew (for tests and benchmarks)
        self.renewed = 0  # capacities brought to the next snapshot

    def __call__(self, snapshot: Snapshot) -> Capacity:
        capacity, self._capacity = self._capacity, None  # (not reused if renewing fails)
        running = {id(item): item for item in snapshot.running}
        if (
            capacity is None
            or len(running) != len(snapshot.running)
            or not self._renew(capacity, snapshot, running)
        ):
            capacity = Capacity.from_snapshot(snapshot)
            self._index = {}
            self.built += 1
        else:
            self.renewed += 1
        self._capacity, self._clusters, self._running = capacity, snapshot.clusters, running
        return capacity

    def _renew(self, capacity: Capacity, snapshot: Snapshot, running: dict[int, Running]) -> bool:
        """Bring ``capacity`` (made for the previous snapshot) to ``snapshot``; False when
        it cannot be (the caller then makes it anew: ``capacity`` may be half changed)."""
        if snapshot.policy is not capacity.policy or capacity._alone_groups:
            return False
        if any(item.alone for item in snapshot.running):
            return False
        if len(snapshot.clusters) != len(self._clusters):
            return False
        fresh: dict[int, tuple[Slot, Node]] = {}  # id(slot) -> the slot and its new node
        for new, old in zip(snapshot.clusters, self._clusters, strict=True):
            if new is old or new.nodes is old.nodes:
                if new is not old and (new.name, new.ready) != (old.name, old.ready):
                    return False
                continue
            if (new.name, new.ready) != (old.name, old.ready) or len(new.nodes) != len(old.nodes):
                return False
            for node, before in zip(new.nodes, old.nodes, strict=True):
                if node is before:
                    continue
                if not _same_but_free(node, before):
                    return False
                slot = capacity.slot(new.name, node.name)
                fresh[id(slot)] = (slot, node)
        # the slots the last cycle changed go back to their nodes' state
        dirty = {id(slot): slot for slot in capacity._dirty}
        if dirty:
            clusters = {c.name: c for c in snapshot.clusters}
            for key, slot in dirty.items():
                if key not in fresh:
                    cluster = clusters[slot.cluster]
                    index = self._index.get(cluster.name)
                    if index is None:
                        index = self._index[cluster.name] = {
                            n.name: i for i, n in enumerate(cluster.nodes)
                        }
                    fresh[key] = (slot, cluster.nodes[index[slot.name]])
        ended = [item for key, item in self._running.items() if key not in running]
        started = [item for key, item in running.items() if key not in self._running]
        for item in ended:
            self._move(capacity, item, -1)
        for item in started:
            self._move(capacity, item, 1)
        for slot, node in fresh.values():
            slot.free_gpus = node.free_gpus
            slot.free_cpu = node.free_cpu
            slot.free_memory_gib = node.free_memory_gib
        for slot in dirty.values():
            slot.taken = None
            slot.alone_key, slot.alone_until = "", math.inf
            slot.jobs = len({id(item) for item in slot.running})
        capacity._dirty = []
        capacity._running = {item.job.key for item in snapshot.running}
        capacity._alone = set()
        capacity._free.clear()
        capacity._open.clear()
        capacity._stale.clear()
        capacity._unfit.clear()
        capacity._last = Capacity._NO_LAST
        capacity._ends = {}
        capacity._events.clear()
        capacity._counts.clear()
        capacity._epoch += 1
        capacity.now_s = snapshot.now_s
        return True

    @staticmethod
    def _move(capacity: Capacity, item: Running, sign: int) -> None:
        """Put running job ``item`` on its slots (sign 1) or take it off them (-1)."""
        for name in item.nodes:
            slot = capacity._by_name.get((item.cluster, name))
            if slot is None:
                continue
            if sign > 0:
                slot.running.append(item)
            else:
                at = next(i for i, other in enumerate(slot.running) if other is item)
                del slot.running[at]
        for name in set(item.nodes):
            slot = capacity._by_name.get((item.cluster, name))
            if slot is not None:
                slot.jobs += sign
