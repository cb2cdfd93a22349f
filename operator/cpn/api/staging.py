"""Render the staging Job that copies one input of an AIJob to a member cluster, and read
back what a staging Job says it copies.

One staging Job per (member, input, staging, attempt): its name comes from a hash of the
input's ident, the attempt and a nonce per staging (creating it twice answers
AlreadyExists); two jobs needing the same input on a member share one staging (the
runtime's table, :mod:`cpn.runtime.staging`). Kubernetes removes it an hour after it ends
(``ttlSecondsAfterFinished``) if cpn has not. It is pinned to the node the job will run on
(policy ``data.staging_scope: node``, copying onto a ``hostPath``), or runs anywhere in
the member copying into the PersistentVolumeClaim ``data.shared_claim`` (``cluster``,
which the training Job then mounts: :func:`cpn.api.jobs.render_job`), and runs the
workload image's copy program (``python -m cpn_workloads.stage``) with the policy's copy
tool and destination; its annotations (on the Job and its pod) say what it copies, from
where, how many bytes and what cpn predicted it to take: a restarted operator, and the
test bed's pod simulator, read them there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cpn.api import constants as k
from cpn.api.aijob import parse_time
from cpn.core.policy import DataPolicy

_MAX_NAME = 63


@dataclass(frozen=True, slots=True)
class StagingOrder:
    """One input to copy to ``cluster`` (onto ``node``): ``ident`` (name@version) read from
    ``uri`` held in ``source``, ``size_bytes`` long (0 unknown)."""

    cluster: str
    node: str
    ident: str
    uri: str
    source: str
    size_bytes: int
    attempt: int = 1
    predicted_s: float = 0.0
    nonce: str = ""


def staging_label(ident: str) -> str:
    """The ``cpn.io/staging`` label value of ``ident``'s staging Jobs (a hash: idents may
    hold characters a label value may not)."""
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def staging_job_name(ident: str, attempt: int, nonce: str = "") -> str:
    """``cpn-stage-<hash>-<attempt>[-<nonce>]``: one per input, staging and attempt on a
    member (the nonce tells an input staged again, after an eviction, from its first)."""
    tail = f"-{nonce}" if nonce else ""
    return f"cpn-stage-{staging_label(ident)}-{attempt}{tail}"[:_MAX_NAME]


def input_uri(body: Mapping[str, Any], ident: str) -> str:
    """The ``uri`` of the input ``ident`` (name or name@version) in AIJob ``body`` ("")."""
    for item in (body.get("spec") or {}).get("inputs") or ():
        if not isinstance(item, Mapping):
            continue
        name, version = str(item.get("name") or ""), str(item.get("version") or "")
        if (f"{name}@{version}" if version else name) == ident:
            return str(item.get("uri") or "")
    return ""


def render_staging_job(
    order: StagingOrder, *, hub: str, namespace: str, data: DataPolicy
) -> dict[str, Any]:
    """The batch/v1 Job that copies ``order``'s input onto its node: one pod, never
    retried by Kubernetes (cpn retries with its own back-off, so it counts attempts)."""
    labels = {
        k.LABEL_MANAGED: k.MANAGED_BY,
        k.LABEL_HUB: hub,
        k.LABEL_STAGING: staging_label(order.ident),
    }
    annotations = {
        k.ANNOTATION_STAGING_INPUT: order.ident,
        k.ANNOTATION_STAGING_SOURCE: order.source,
        k.ANNOTATION_STAGING_BYTES: str(order.size_bytes),
        k.ANNOTATION_STAGING_ATTEMPT: str(order.attempt),
        k.ANNOTATION_STAGING_PREDICTED: f"{order.predicted_s:.1f}",
    }
    dest = f"{data.copy_dest.rstrip('/')}/{order.ident}"
    container = {
        "name": "stage",
        "image": data.staging_image,
        "command": ["python", "-m", "cpn_workloads.stage"],
        "args": [
            "--tool",
            data.copy_tool,
            "--uri",
            order.uri,
            "--dest",
            dest,
            "--bytes",
            str(order.size_bytes),
        ],
        "volumeMounts": [{"name": "data", "mountPath": data.copy_dest}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [data_volume(data)],
    }
    if data.staging_scope != "cluster":  # pinned where the job will run
        node_term = {"key": k.HOSTNAME_LABEL, "operator": "In", "values": [order.node]}
        affinity = {"nodeSelectorTerms": [{"matchExpressions": [node_term]}]}
        pod["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": staging_job_name(order.ident, order.attempt, order.nonce),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, round(data.staging_timeout_s)),
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": dict(labels), "annotations": dict(annotations)},
                "spec": pod,
            },
        },
    }


def data_volume(data: DataPolicy, name: str = "data") -> dict[str, Any]:
    """The volume stagings copy into: the node's ``copy_dest`` (``hostPath``), or with
    ``staging_scope: cluster`` the member's PersistentVolumeClaim ``shared_claim``."""
    if data.staging_scope == "cluster":
        return {"name": name, "persistentVolumeClaim": {"claimName": data.shared_claim}}
    return {"name": name, "hostPath": {"path": data.copy_dest, "type": "DirectoryOrCreate"}}


@dataclass(frozen=True, slots=True)
class StagingSeen:
    """A staging Job as a member reports it: what it copies and how it went."""

    name: str
    ident: str
    source: str
    size_bytes: int
    attempt: int
    predicted_s: float
    result: str  # "" running, "Succeeded" or "Failed"
    message: str = ""
    started_s: float | None = None
    finished_s: float | None = None


def read_staging_job(job: Mapping[str, Any]) -> StagingSeen | None:
    """What staging Job ``job`` says (None: not a staging Job of cpn, or unreadable)."""
    meta = job.get("metadata") or {}
    if k.LABEL_STAGING not in (meta.get("labels") or {}):
        return None
    notes = meta.get("annotations") or {}
    ident = str(notes.get(k.ANNOTATION_STAGING_INPUT) or "")
    if not ident:
        return None
    try:
        size = int(notes.get(k.ANNOTATION_STAGING_BYTES) or 0)
        attempt = int(notes.get(k.ANNOTATION_STAGING_ATTEMPT) or 1)
        predicted = float(notes.get(k.ANNOTATION_STAGING_PREDICTED) or 0.0)
    except ValueError:
        return None
    status = job.get("status") or {}
    result, message = "", ""
    for cond in status.get("conditions") or ():
        if cond.get("status") != "True":
            continue
        if cond.get("type") in {"Complete", "SuccessCriteriaMet"}:
            result = "Succeeded"
        elif cond.get("type") in {"Failed", "FailureTarget"}:
            result = "Failed"
            message = str(cond.get("message") or cond.get("reason") or "the copy failed")
    return StagingSeen(
        name=str(meta.get("name") or ""),
        ident=ident,
        source=str(notes.get(k.ANNOTATION_STAGING_SOURCE) or ""),
        size_bytes=size,
        attempt=attempt,
        predicted_s=predicted,
        result=result,
        message=message,
        started_s=parse_time(status.get("startTime")),
        finished_s=parse_time(status.get("completionTime")),
    )


def pull_job_name(image: str, node: str) -> str:
    """``cpn-pull-<hash of image and node>``: one pre-pull per image and node."""
    return f"cpn-pull-{staging_label(f'{image}|{node}')}"


def render_pull_job(
    image: str, node: str, *, hub: str, namespace: str, pull_secrets: list[Any] | None = None
) -> dict[str, Any]:
    """The batch/v1 Job that pulls ``image`` onto ``node`` while the job's inputs are
    staged: one pod pinned there running ``true`` from the image. Its result does not
    matter (an image without ``true`` fails it after the pull, which is all it is for), so
    cpn never reads it: Kubernetes ends it after 10 minutes at most
    (``activeDeadlineSeconds``) and removes it 10 minutes after it ends."""
    labels = {
        k.LABEL_MANAGED: k.MANAGED_BY,
        k.LABEL_HUB: hub,
        k.LABEL_PREPULL: staging_label(f"{image}|{node}"),
    }
    node_term = {"key": k.HOSTNAME_LABEL, "operator": "In", "values": [node]}
    affinity = {"nodeSelectorTerms": [{"matchExpressions": [node_term]}]}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}},
        "containers": [
            {"name": "pull", "image": image, "command": ["true"], "imagePullPolicy": "IfNotPresent"}
        ],
    }
    if pull_secrets:
        pod["imagePullSecrets"] = list(pull_secrets)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": pull_job_name(image, node),
            "namespace": namespace,
            "labels": labels,
            "annotations": {"cpn.io/prepull-image": image, "cpn.io/prepull-node": node},
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "activeDeadlineSeconds": 600,
            "ttlSecondsAfterFinished": 600,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
        },
    }


def images_of(body: Mapping[str, Any]) -> tuple[list[str], list[Any]]:
    """The container images of AIJob ``body``'s pod template (each once, in order), and its
    ``imagePullSecrets``."""
    spec = ((body.get("spec") or {}).get("template") or {}).get("spec") or {}
    images: list[str] = []
    for container in spec.get("containers") or ():
        image = container.get("image") if isinstance(container, Mapping) else None
        if isinstance(image, str) and image and image not in images:
            images.append(image)
    secrets = spec.get("imagePullSecrets")
    return images, list(secrets) if isinstance(secrets, list) else []
