"""Time to move a job's data and image to a cluster.

The data lives in ``job.data_cluster``; the image is pulled once per cluster
(counted when the job names where it comes from, i.e. with its data). A job
with no data location moves nothing. A cluster with no link from the data's
cluster cannot receive it.
"""

from __future__ import annotations

from cpn.core.model import Job, Snapshot

#: Bytes per GB and bits per byte: seconds = GB * 8 / Gbps.
_BITS_PER_BYTE = 8.0


def transfer_s(job: Job, cluster: str, snapshot: Snapshot) -> float | None:
    """Seconds to move ``job``'s data and image to ``cluster``; None when unreachable."""
    source = job.data_cluster
    size_gb = job.data_gb + job.image_gb
    if not source or size_gb <= 0 or source == cluster:
        return 0.0
    gbps = snapshot.link_gbps(source, cluster)
    if gbps is None or gbps <= 0:
        return None
    return size_gb * _BITS_PER_BYTE / gbps
