"""The simulated members' data caches, kept with the core's own rules.

What a start moves and when it is there is the plan's (:mod:`cpn.core.transfer`, the
same function placement costed it with); what the cache holds afterwards and what it
evicts are :func:`cpn.core.datacache.after_start` and :func:`~cpn.core.datacache.evict`,
the rule the operator follows: no copy of either here. An input a start moves is held
from that start, complete when its staging ends, and never evicted while a job running
on the cluster reads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from cpn.core.datacache import after_start, capacity_gb, evict, needed
from cpn.core.model import Cached, ClusterCache, Job, Running, Start
from cpn.core.policy import QueuePolicy


class Caches:
    """Every member's data cache, and the GB moved into them."""

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        self._held: dict[str, dict[str, Cached]] = {}
        self.moved_gb = 0.0

    def view(self) -> Mapping[str, ClusterCache]:
        """The caches as a snapshot holds them (read-only copies)."""
        return MappingProxyType(
            {name: MappingProxyType(dict(held)) for name, held in self._held.items() if held}
        )

    def started(self, job: Job, start: Start, now_s: float, running: Iterable[Running]) -> float:
        """Carry out ``start`` of ``job`` (``running`` includes it); returns the GB it moves."""
        cluster = start.cluster
        moved = moved_gb(job, start)
        if job.inputs:
            cache = after_start(self._held.get(cluster, {}), job, start, now_s)
            self._held[cluster] = cache
            self._evict(cluster, running)
        self.moved_gb += moved
        return moved

    def ended(self, cluster: str, running: Iterable[Running]) -> None:
        """A job on ``cluster`` ended: what it read may now be evicted."""
        if self._held.get(cluster):
            self._evict(cluster, running)

    def _evict(self, cluster: str, running: Iterable[Running]) -> None:
        capacity = capacity_gb(self.policy, cluster)
        self._held[cluster] = evict(self._held[cluster], capacity, needed(running, cluster))


def moved_gb(job: Job, start: Start) -> float:
    """GB ``start`` moves to its cluster: the unnamed data and image from elsewhere, and
    the named inputs it stages."""
    unnamed = job.data_gb + job.image_gb
    far = job.data_cluster is not None and job.data_cluster != start.cluster
    sizes = {i.ident: i.size_gb for i in job.inputs}
    return (unnamed if far else 0.0) + sum(sizes[ident] for ident in start.staged)
