"""An AIJob watch event's object read once, whole: who it is, what the operator keeps of its
body, what its status says (:class:`Saved`) and its spec as a core
:class:`~cpn.core.model.Job` (or why it is invalid).

Pure: the runtime's store takes the result (:meth:`cpn.runtime.store.Store.put`) and never
reads the object itself. The job is read with no owner: user and group are the namespace's,
which the store knows (it sets them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cpn.api.aijob import parse_aijob, parse_time
from cpn.core.errors import InvalidSpec
from cpn.core.model import Job


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """The GPUs of one job's pods: mean utilisation (percent) and memory used in all (MiB,
    None when a GPU did not report it); ``at_s`` is the oldest sample they come from."""

    util_pct: float
    memory_mib: float | None
    at_s: float


@dataclass(frozen=True, slots=True)
class Saved:
    """What an AIJob's status says of its scheduling (read back after a restart: the status,
    not memory, is the truth). ``phase`` is "" when the status has none."""

    phase: str = ""
    attempts: int = 0
    failed_attempts: int = 0
    fence: str = ""
    not_before_s: float = 0.0
    fifo_due_s: float | None = None
    fifo_calibrated_due_s: float | None = None
    fifo_basis_s: float | None = None
    cluster: str = ""
    gpu_type: str = ""
    domain: str = ""
    nodes: tuple[str, ...] = ()
    alone: bool = False
    gpu_usage: GpuUsage | None = None
    member_job: str = ""
    start_s: float = 0.0
    finish_s: float = 0.0
    actual_s: float = 0.0
    transfer_s: float = 0.0
    predicted_runtime_s: float = 0.0  # on its gpu_type
    preemptions: int = 0
    preempted_s: float = 0.0
    preempted_why: str = ""
    attained_s: float = 0.0
    checkpointed_s: float = 0.0


@dataclass(frozen=True, slots=True)
class AIJobObject:
    """One AIJob object as a watch event brings it, read (:func:`read_aijob`)."""

    key: str  # namespace/name
    namespace: str
    name: str
    uid: str
    generation: int
    deleting: bool  # it has a deletionTimestamp
    body: Mapping[str, Any]  # the object without status and managedFields (:func:`slim`)
    status: Mapping[str, Any]  # its status as it came
    saved: Saved
    job: Job | None  # its spec, owned by no one yet (user and group ""); None when invalid
    invalid: str = ""  # why its spec is invalid ("" when it is not)


def read_aijob(body: Mapping[str, Any]) -> AIJobObject:
    """``body`` (an AIJob object, or the metadata alone of a deleted one) read whole. A
    status that cannot be read raises (the API server's schema types every field)."""
    meta = body["metadata"]
    kept = slim(body)
    status = body.get("status") or {}
    saved = saved_status(status)
    job, invalid = None, ""
    try:  # the spec as the store keeps it: without its status
        job = parse_aijob(kept, user="", group="")
    except (InvalidSpec, ValueError, TypeError, KeyError) as err:
        invalid = str(err)
    return AIJobObject(
        key=f"{meta['namespace']}/{meta['name']}",
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation") or 0),
        deleting=bool(meta.get("deletionTimestamp")),
        body=kept,
        status=status,
        saved=saved,
        job=job,
        invalid=invalid,
    )


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the operator keeps of an AIJob: no status (the store keeps what it says), no
    managedFields (the largest part of the metadata)."""
    meta = {key: value for key, value in body["metadata"].items() if key != "managedFields"}
    out = {key: value for key, value in body.items() if key not in {"metadata", "status"}}
    out["metadata"] = meta
    return out


def _seconds(value: Any) -> float | None:
    """A number of seconds the status holds, None when it holds none (or not a number)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def saved_status(status: Mapping[str, Any]) -> Saved:
    """What ``status`` says (the fields the operator writes)."""
    usage = usage_from_status(status)
    gpu_type = str(status.get("gpuType") or "")
    member = status.get("memberJob") or {}
    predicted = status.get("predictedRuntimeSeconds") or {}
    last = status.get("lastPreemption") or {}
    return Saved(
        phase=str(status.get("phase") or ""),
        attempts=int(status.get("attempts") or 0),
        failed_attempts=int(status.get("failedAttempts") or 0),
        fence=str(status.get("fence") or ""),
        not_before_s=parse_time(status.get("notBefore")) or 0.0,
        fifo_due_s=parse_time(status.get("fifoDue")),
        fifo_calibrated_due_s=parse_time(status.get("fifoDueCalibrated")),
        fifo_basis_s=_seconds(status.get("fifoBasisSeconds")),
        cluster=str(status.get("cluster") or ""),
        gpu_type=gpu_type,
        domain=str(status.get("domain") or ""),
        nodes=tuple(status.get("nodes") or ()),
        alone=bool(status.get("runsAlone")),
        gpu_usage=usage,
        member_job=str(member.get("name") or ""),
        start_s=parse_time(status.get("startTime")) or 0.0,
        finish_s=parse_time(status.get("completionTime")) or 0.0,
        actual_s=float(status.get("actualRuntimeSeconds") or 0.0),
        transfer_s=float(status.get("transferSeconds") or 0.0),
        predicted_runtime_s=float(predicted.get(gpu_type, 0.0) or 0.0),
        preemptions=int(status.get("preemptions") or 0),
        preempted_s=parse_time(last.get("time")) or 0.0,
        preempted_why=str(last.get("reason") or ""),
        attained_s=float(status.get("attainedSeconds") or 0.0),
        checkpointed_s=float(status.get("checkpointedSeconds") or 0.0),
    )


def usage_from_status(status: Mapping[str, Any]) -> GpuUsage | None:
    """A job's GPU usage as its status shows it (``gpuUtilizationPercent``,
    ``gpuMemoryUsedMiB``, ``gpuMetricsTime``; None when absent)."""
    util = status.get("gpuUtilizationPercent")
    at = parse_time(status.get("gpuMetricsTime"))
    if util is None or at is None:
        return None
    memory = status.get("gpuMemoryUsedMiB")
    return GpuUsage(
        util_pct=float(util),
        memory_mib=None if memory is None else float(memory),
        at_s=at,
    )
