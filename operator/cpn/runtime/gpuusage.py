"""A running job's GPU utilisation and memory, from its member's dcgm-exporter series.

Pure: the readings come in (:meth:`cpn.runtime.ports.MetricsSource.pod_gpus`, per pod of
the member), one :class:`~cpn.api.aijobread.GpuUsage` per job goes out, and its status
fields (``gpuUtilizationPercent``, ``gpuMemoryUsedMiB``, ``gpuMetricsTime``; read back by
:func:`cpn.api.aijobread.usage_from_status`). What the status shows and how fresh it is:
docs/user-guide.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cpn.api.aijobread import GpuUsage
from cpn.api.status import rfc3339
from cpn.runtime.ports import GpuReading

#: Kubernetes cuts a generateName base to 63 - 5 characters: the Job controller names a
#: pod ``<job>-`` (``<job>-<index>-`` when indexed) plus 5 random ones, so a long Job's
#: pods start with the first 58 characters of ``<job>-`` only.
_GENERATED_BASE = 58


def job_usage(
    pods: Mapping[tuple[str, str], Sequence[GpuReading]], namespace: str, job_name: str
) -> GpuUsage | None:
    """The usage of member Job ``job_name``'s pods (named ``<job>-<suffix>`` by the Job
    controller, the base cut to 58 characters) in ``namespace``; None when none of them
    holds a reported GPU."""
    prefix = (job_name + "-")[:_GENERATED_BASE]
    readings = [
        reading
        for (ns, pod), found in pods.items()
        if ns == namespace and pod.startswith(prefix)
        for reading in found
    ]
    if not job_name or not readings:
        return None
    memory = [r.memory_mib for r in readings if r.memory_mib is not None]
    return GpuUsage(
        util_pct=sum(r.util_pct for r in readings) / len(readings),
        memory_mib=sum(memory) if len(memory) == len(readings) else None,
        at_s=min(r.at_s for r in readings),
    )


def usage_status(usage: GpuUsage | None) -> dict[str, Any]:
    """The status fields of ``usage`` (none when there is none)."""
    if usage is None:
        return {}
    out: dict[str, Any] = {
        "gpuUtilizationPercent": round(usage.util_pct, 1),
        "gpuMetricsTime": rfc3339(usage.at_s),
    }
    if usage.memory_mib is not None:
        out["gpuMemoryUsedMiB"] = round(usage.memory_mib)
    return out
