"""The per-cluster data cache: what a start adds to it, and what is evicted.

A cluster's cache (:data:`~cpn.core.model.ClusterCache`) maps an input's ident
(``name@version``) to what is held: size, when it is complete, when a job last read
it. :func:`after_start` is the cache once a start is carried out: the inputs it moves
are held, complete when its staging ends, and every named input it reads there is
used now. :func:`evict` is the eviction rule: while the cache holds more than the
cluster's capacity (``data.cache_gb``, absent = unlimited), the least recently used
input goes first (ties by ident), but never one a running or just-placed job reads
(``needed``): when those alone exceed the capacity, the cache keeps them and nothing
else. The simulator keeps its caches with these functions; so will the operator.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from cpn.core.model import Cached, ClusterCache, Job, Running, Start
from cpn.core.policy import QueuePolicy


def capacity_gb(policy: QueuePolicy, cluster: str) -> float | None:
    """What ``cluster``'s cache may hold (GB); None when unlimited."""
    return policy.data.cache_gb.get(cluster, policy.data.default_cache_gb)


def reads_on(job: Job, cluster: str) -> tuple[str, ...]:
    """Idents of the named inputs ``job`` reads from ``cluster``'s cache when it runs there."""
    return tuple(i.ident for i in job.inputs if i.location is not None and i.location != cluster)


def needed(running: Iterable[Running], cluster: str) -> frozenset[str]:
    """Idents of the inputs the jobs running (or placed) on ``cluster`` read there."""
    return frozenset(
        ident for r in running if r.cluster == cluster for ident in reads_on(r.job, cluster)
    )


def after_start(cache: ClusterCache, job: Job, start: Start, now_s: float) -> dict[str, Cached]:
    """``cache`` (of ``start.cluster``) once ``start`` is carried out at ``now_s``."""
    out = dict(cache)
    sizes = {i.ident: i.size_gb for i in job.inputs}
    for ident in start.staged:
        out[ident] = Cached(
            size_gb=sizes.get(ident, 0.0), last_used_s=now_s, ready_s=now_s + start.transfer_s
        )
    for ident in reads_on(job, start.cluster):
        held = out.get(ident)
        if held is not None and held.last_used_s < now_s:
            out[ident] = Cached(size_gb=held.size_gb, last_used_s=now_s, ready_s=held.ready_s)
    return out


def evict(
    cache: Mapping[str, Cached], capacity: float | None, needed: Collection[str]
) -> dict[str, Cached]:
    """What ``cache`` keeps under ``capacity`` GB (None = all of it), never evicting ``needed``."""
    kept = dict(cache)
    if capacity is None:
        return kept
    total = sum(c.size_gb for c in kept.values())
    if total <= capacity:
        return kept
    by_age = sorted((c.last_used_s, ident) for ident, c in kept.items() if ident not in needed)
    for _, ident in by_age:
        if total <= capacity:
            break
        total -= kept.pop(ident).size_gb
    return kept
