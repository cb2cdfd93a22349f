"""Time to move a job's data and image to a cluster.

Two kinds of data. The unnamed data of ``spec.data`` lives in ``job.data_cluster`` and
is moved at every start, with the image (pulled once per cluster, counted when the job
names where it comes from, i.e. with its data). Named inputs (``job.inputs``) are
cached per cluster (``Snapshot.data_cache``, :mod:`cpn.core.datacache`): one already
there costs nothing, one being staged there costs the wait until it is complete, and
one absent is moved from its ``location``. A job's own moves run one after another (one
staging per job); its data is ready when its moves and every staging it waits on are
done. Inputs with no location move nothing (cpn does not know where they are). A
cluster with no link from where data is cannot receive it.

Within one cycle the cycle passes ``arriving``: the inputs the starts before this one
move, by (cluster, ident), with when they will be complete (seconds from now), so two
jobs needing the same absent input on one cluster share one transfer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from cpn.core.model import Job, Snapshot

#: Bytes per GB and bits per byte: seconds = GB * 8 / Gbps.
_BITS_PER_BYTE = 8.0
_NOTHING: Mapping[tuple[str, str], float] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Staging:
    """What starting a job on a cluster moves, and when its data is all there."""

    seconds: float
    moves: tuple[str, ...] = ()  # idents of the named inputs this job moves there


def staging(
    job: Job, cluster: str, snapshot: Snapshot, arriving: Mapping[tuple[str, str], float] = _NOTHING
) -> Staging | None:
    """The staging of ``job`` on ``cluster``; None when some data cannot reach it."""
    moving = 0.0
    source = job.data_cluster
    size_gb = job.data_gb + job.image_gb
    if source and size_gb > 0 and source != cluster:
        gbps = snapshot.link_gbps(source, cluster)
        if gbps is None or gbps <= 0:
            return None
        moving = size_gb * _BITS_PER_BYTE / gbps
    if not job.inputs:
        return Staging(moving)
    cache = snapshot.data_cache.get(cluster, {})
    waiting = 0.0
    moves = []
    for wanted in job.inputs:
        if wanted.location is None or wanted.location == cluster:
            continue
        ident = wanted.ident
        held = cache.get(ident)
        if held is not None:
            waiting = max(waiting, held.ready_s - snapshot.now_s)
            continue
        coming = arriving.get((cluster, ident))
        if coming is not None:
            waiting = max(waiting, coming)
            continue
        gbps = snapshot.link_gbps(wanted.location, cluster)
        if gbps is None or gbps <= 0:
            return None
        moving += wanted.size_gb * _BITS_PER_BYTE / gbps
        moves.append(ident)
    return Staging(max(moving, waiting), tuple(moves))


def transfer_s(job: Job, cluster: str, snapshot: Snapshot) -> float | None:
    """Seconds to move ``job``'s data and image to ``cluster``; None when unreachable."""
    found = staging(job, cluster, snapshot)
    return None if found is None else found.seconds
