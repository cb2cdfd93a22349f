"""Render the member cluster's ``batch/v1`` Job for one attempt of an AIJob.

The Job's name comes from the AIJob's UID and the attempt number, so creating
it twice is harmless (the second create answers AlreadyExists). Origin labels
tie it back to the AIJob across clusters, where owner references cannot reach.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from cpn.api import constants as k
from cpn.api.aijob import parse_time
from cpn.core.fence import checkpoint_env
from cpn.core.model import Start

_MAX_NAME = 63


#: the volume of the shared data claim in a member Job's pods
_SHARED = "cpn-data"


def member_job_name(name: str, uid: str, attempt: int) -> str:
    """``<name>-<uid[:8]>-<attempt>``, cut to a valid 63-character DNS label."""
    suffix = f"-{uid.replace('-', '')[:8]}-{attempt}"
    return name[: _MAX_NAME - len(suffix)].rstrip("-.") + suffix


def origin_labels(
    body: Mapping[str, Any], hub: str, attempt: int, fence: str = ""
) -> dict[str, str]:
    """Labels that name the AIJob a member Job belongs to, its attempt and fence."""
    meta = body["metadata"]
    labels = {
        k.LABEL_MANAGED: k.MANAGED_BY,
        k.LABEL_HUB: hub,
        k.LABEL_NAMESPACE: meta["namespace"],
        k.LABEL_NAME: meta["name"][:63].rstrip("-."),
        k.LABEL_UID: meta["uid"],
        k.LABEL_ATTEMPT: str(attempt),
    }
    if fence:
        labels[k.LABEL_FENCE] = fence
    return labels


def _per_type_annotations(annotations: Mapping[str, str], gpu_type: str) -> dict[str, str]:
    raw = annotations.get(k.ANNOTATION_PER_GPU_TYPE)
    if not raw:
        return {}
    try:
        table = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):  # the AIJob reader refuses both first
        return {}
    out = {}
    if isinstance(table, Mapping):
        for name, values in table.items():
            if isinstance(values, Mapping) and gpu_type in values:
                out[str(name)] = str(values[gpu_type])
    return out


def render_job(
    body: Mapping[str, Any],
    start: Start,
    *,
    attempt: int,
    hub: str,
    namespace: str,
    affinity: str = "node",
    gpu_product: str | None = None,
    hami_pool: str | None = None,
    resume_from_s: float | None = None,
    fence: str = "",
    shared_data: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The batch/v1 Job that runs ``start`` of the AIJob ``body`` on its member cluster.

    Every container gets ``CPN_ATTEMPT`` (1, 2...), ``CPN_FENCE`` (the attempt's fencing
    token, also the Job's label ``cpn.io/fence``) and the checkpoint convention's
    ``CPN_CHECKPOINT_DIR``, ``CPN_CHECKPOINT_ROOT`` and ``CPN_RESUME_DIRS``
    (:func:`cpn.core.fence.checkpoint_env`, under the AIJob's annotation
    ``cpn.io/checkpoint-root``, default ``/checkpoints``) in its environment. An attempt that
    resumes a preempted job (``resume_from_s`` given) also gets ``CPN_RESUME_FROM_S``, the
    seconds of compute its checkpoints kept, and the pod annotation
    ``cpn.io/resume-from-seconds`` with the same value (the test bed's simulated pods run
    only the rest of their work, plus their restart cost).

    ``affinity`` is ``node`` (required affinity to the chosen nodes) or
    ``gpu-type`` (only to nodes whose ``nvidia.com/gpu.product`` is
    ``gpu_product``). Retries are cpn's, so the Job itself never retries.

    ``shared_data`` (claim, path): the PersistentVolumeClaim its inputs were staged into
    (policy ``data.staging_scope: cluster``), mounted read-only at ``path`` in every
    container, as volume ``cpn-data``.
    """
    spec = body["spec"]
    meta = body["metadata"]
    res = spec.get("resources") or {}
    workers = int(spec.get("workers", 1))
    template = copy.deepcopy(dict(spec["template"]))
    pod_meta = dict(template.get("metadata") or {})
    pod_spec = dict(template.get("spec") or {})
    labels = origin_labels(body, hub, attempt, fence)
    annotations = dict(pod_meta.get("annotations") or {})
    annotations.update(_per_type_annotations(annotations, start.gpu_type))
    annotations[k.ANNOTATION_GPU_TYPE] = start.gpu_type
    env = {"CPN_GPU_TYPE": start.gpu_type, "CPN_CLUSTER": start.cluster}
    env["CPN_ATTEMPT"] = str(attempt)
    if fence:
        env["CPN_FENCE"] = fence
    root = (meta.get("annotations") or {}).get(k.ANNOTATION_CHECKPOINT_ROOT)
    env.update(checkpoint_env(root or k.DEFAULT_CHECKPOINT_ROOT, meta["uid"], attempt))
    if resume_from_s is not None:
        annotations[k.ANNOTATION_RESUME_FROM] = env["CPN_RESUME_FROM_S"] = f"{resume_from_s:.0f}"
    share = float(res.get("gpuShare", 1.0))
    if share < 1.0 and hami_pool:
        annotations[k.ANNOTATION_HAMI_POOL] = hami_pool
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
    pod_meta["annotations"] = annotations
    if affinity == "gpu-type" and gpu_product:
        term = {"key": k.GPU_PRODUCT_LABEL, "operator": "In", "values": [gpu_product]}
    else:
        term = {"key": k.HOSTNAME_LABEL, "operator": "In", "values": sorted(set(start.nodes))}
    pod_spec["affinity"] = {
        **(pod_spec.get("affinity") or {}),
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [term]}]
            }
        },
    }
    pod_spec.setdefault("restartPolicy", "Never")
    pod_spec["containers"] = [
        _with_resources(c, index == 0, res, share, env)
        for index, c in enumerate(pod_spec.get("containers") or [])
    ]
    if shared_data is not None:
        claim, path = shared_data
        volume = {"name": _SHARED, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        pod_spec["volumes"] = [*(pod_spec.get("volumes") or []), volume]
        mount = {"name": _SHARED, "mountPath": path, "readOnly": True}
        pod_spec["containers"] = [
            {**c, "volumeMounts": [*(c.get("volumeMounts") or []), mount]}
            for c in pod_spec["containers"]
        ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": member_job_name(meta["name"], meta["uid"], attempt),
            "namespace": namespace,
            "labels": labels,
            "annotations": {"cpn.io/aijob": f"{meta['namespace']}/{meta['name']}"},
        },
        "spec": {
            "parallelism": workers,
            "completions": workers,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {"metadata": pod_meta, "spec": pod_spec},
        },
    }


def _with_resources(
    container: Mapping[str, Any],
    first: bool,
    res: Mapping[str, Any],
    share: float,
    cpn_env: Mapping[str, str],
) -> dict[str, Any]:
    """The first container gets the GPU limit (and HAMi's share limits); all get cpn's env."""
    out = dict(container)
    env = list(out.get("env") or [])
    env += [{"name": name, "value": value} for name, value in cpn_env.items()]
    out["env"] = env
    if not first:
        return out
    resources = dict(out.get("resources") or {})
    limits = dict(resources.get("limits") or {})
    requests = dict(resources.get("requests") or {})
    gpus = int(res.get("gpus", 0))
    if gpus > 0:
        limits[k.GPU_RESOURCE] = str(gpus)
        if share < 1.0:
            limits[k.HAMI_GPU_CORES] = str(round(share * 100))
            if res.get("gpuMemoryGiB"):
                limits[k.HAMI_GPU_MEMORY] = str(round(float(res["gpuMemoryGiB"]) * 1024))
    for name, key in (("cpu", "cpu"), ("memory", "memory")):
        if res.get(name) is not None:
            requests[key] = str(res[name])
    resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    out["resources"] = resources
    return out


def workers_running(status: Mapping[str, Any]) -> int:
    """Workers of a member Job that run or ran, from the Job's status: its ready pods plus
    those that succeeded. A cluster whose Job status has no ``ready`` (before Kubernetes
    1.24) counts its active pods instead, which include pods still waiting for a node."""
    ready = status.get("ready")
    counted = status.get("active") if ready is None else ready
    return int(counted or 0) + int(status.get("succeeded") or 0)


def finished_at(status: Mapping[str, Any], began_s: float, now_s: float) -> float:
    """When a member Job finished, on the operator's clock, from its status (stamped by
    the member's clock, which may be off). Its ``completionTime`` is taken as it is when
    it falls between the attempt's start ``began_s`` and ``now_s`` (a finish seen late,
    after a restart or an outage); one outside (a member whose clock runs ahead or
    behind) is not: the attempt then ran for its Job's ``completionTime - startTime``,
    both read on the member's one clock, so the skew cancels (at most ``now_s``). With
    neither stamp, ``now_s``."""
    done = parse_time(status.get("completionTime"))
    if done is None:
        return now_s
    if began_s <= done <= now_s:
        return done
    started = parse_time(status.get("startTime"))
    if started is None or started > done:
        return now_s
    return min(began_s + (done - started), now_s)
