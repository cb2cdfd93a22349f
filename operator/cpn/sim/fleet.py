"""The simulated clusters' nodes: what is free on each, and the values the scheduler sees.

Free resources are kept in one core :class:`~cpn.core.capacity.Capacity` (node
accounting and "does it fit" are core's); a node's frozen :class:`~cpn.core.model.Node`
and a cluster's :class:`~cpn.core.model.Cluster` are rebuilt only when an allocation on
them changed, so a snapshot costs what changed since the last one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from cpn.core.capacity import Capacity, Slot
from cpn.core.model import Cluster, Job, Node, Snapshot
from cpn.core.policy import QueuePolicy

_EPS = 1e-9


class _NodeState:
    """One node: its free resources live in the fleet's :class:`Capacity` (``slot``);
    its frozen :class:`Node` is rebuilt only when dirty."""

    __slots__ = ("base", "slot", "value")

    def __init__(self, node: Node, slot: Slot) -> None:
        self.base = node
        self.slot = slot
        self.value: Node | None = None

    def node(self) -> Node:
        if self.value is None:
            base, slot = self.base, self.slot
            util = (1.0 - slot.free_cpu / base.cpu) if base.cpu > 0 else None
            self.value = replace(
                base,
                free_gpus=max(0.0, slot.free_gpus),
                free_cpu=max(0.0, slot.free_cpu),
                free_memory_gib=max(0.0, slot.free_memory_gib),
                cpu_util=util,
            )
        return self.value


class Fleet:
    """Every node of ``clusters``, empty at first; jobs take and release nodes."""

    def __init__(self, clusters: Sequence[Cluster], policy: QueuePolicy) -> None:
        self.names = tuple(c.name for c in clusters)
        self._meta = {c.name: c for c in clusters}
        empty = Snapshot(now_s=0.0, policy=policy, clusters=tuple(clusters))
        self._capacity = Capacity.from_snapshot(empty)
        self._nodes: dict[tuple[str, str], _NodeState] = {}
        self._cluster_nodes: dict[str, list[_NodeState]] = {}
        for cluster in clusters:
            states = [
                _NodeState(n, self._capacity.slot(cluster.name, n.name)) for n in cluster.nodes
            ]
            self._cluster_nodes[cluster.name] = states
            for state in states:
                self._nodes[(cluster.name, state.base.name)] = state
        self._values: dict[str, Cluster] = {}
        self.max_node_gpus = max((n.gpus for c in clusters for n in c.nodes), default=0)

    def fits_somewhere(self, job: Job) -> bool:
        """Whether ``job`` fits one (cluster, GPU type) of empty nodes it may run on."""
        return self._capacity.ever_fits_somewhere(job)

    def has_room(self, gpus: float) -> bool:
        """Whether a schedulable node has ``gpus`` GPUs free now."""
        return any(
            state.slot.free_gpus + _EPS >= gpus and state.base.schedulable
            for state in self._nodes.values()
        )

    def take(self, job: Job, cluster: str, gpu_type: str, nodes: Sequence[str]) -> None:
        self._capacity.take(job, self._capacity.key_of(cluster, gpu_type, nodes), nodes)
        self._changed(cluster, nodes)

    def release(self, job: Job, cluster: str, nodes: Sequence[str]) -> None:
        self._capacity.release(cluster, nodes, job)
        self._changed(cluster, nodes)

    def _changed(self, cluster: str, nodes: Iterable[str]) -> None:
        for name in nodes:
            self._nodes[(cluster, name)].value = None
        self._values.pop(cluster, None)

    def clusters(self) -> tuple[Cluster, ...]:
        """Every cluster with its nodes' free resources as they are now."""
        out = []
        for name in self.names:
            value = self._values.get(name)
            if value is None:
                nodes = tuple(state.node() for state in self._cluster_nodes[name])
                value = replace(self._meta[name], nodes=nodes)
                self._values[name] = value
            out.append(value)
        return tuple(out)
