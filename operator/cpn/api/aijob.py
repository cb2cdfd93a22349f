"""Read an AIJob object into a core :class:`~cpn.core.model.Job`.

Structure is checked by the CRD's schema; this checks meaning (GPU types that
exist, quantities that parse, sizes that make sense) and raises
:class:`~cpn.core.errors.InvalidSpec` whose errors name the field path. User
and group are passed in by the caller, who takes them from the namespace:
nothing a user writes in the AIJob can set them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from cpn.core.errors import FieldError, InvalidSpec
from cpn.core.model import Job, frozen_map
from predictor.catalog import UnknownName, expand_gpu_types

_GIB = float(1 << 30)
_MODEL_FEATURES = {
    "datasetSamples": "dataset_samples",
    "epochs": "epochs",
    "batchSize": "batch_size",
    "steps": "steps",
}


def job_key(body: Mapping[str, Any]) -> str:
    """The key of an AIJob in the core: ``namespace/name``."""
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def parse_time(value: str | None) -> float | None:
    """RFC 3339 timestamp to epoch seconds (None stays None)."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _quantity(value: Any, path: str, errors: list[FieldError], scale: float = 1.0) -> float:
    if value is None:
        return 0.0
    try:
        number = float(parse_quantity(value)) / scale  # type: ignore[no-untyped-call]
    except (ValueError, TypeError):
        errors.append(FieldError(path, f"not a Kubernetes quantity: {value!r}"))
        return 0.0
    if not math.isfinite(number) or number < 0:
        errors.append(FieldError(path, f"must be a finite, non-negative quantity, got {value!r}"))
        return 0.0
    return number


def _gpu_types(names: Any, errors: list[FieldError]) -> frozenset[str]:
    allowed: set[str] = set()
    for index, name in enumerate(names or ()):
        try:
            allowed |= expand_gpu_types(str(name))
        except UnknownName as err:
            errors.append(FieldError(f"spec.resources.gpuTypes[{index}]", str(err)))
    return frozenset(allowed)


def parse_aijob(body: Mapping[str, Any], *, user: str, group: str) -> Job:
    """The core view of an AIJob; raises InvalidSpec naming each bad field.

    The returned job has no estimate yet: the caller attaches one.
    """
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    meta = body.get("metadata") or {}
    errors: list[FieldError] = []
    res = spec.get("resources") or {}
    model = spec.get("model") or {}
    data = spec.get("data") or {}
    image = spec.get("image") or {}
    gpus = int(res.get("gpus", 0))
    share = float(res.get("gpuShare", 1.0))
    if share < 1.0 and gpus != 1:
        errors.append(FieldError("spec.resources.gpuShare", "sharing a GPU needs gpus: 1"))
    if not isinstance(spec.get("template"), Mapping):
        errors.append(FieldError("spec.template", "a pod template is required"))
    else:
        containers = (spec["template"].get("spec") or {}).get("containers")
        if not containers:
            errors.append(FieldError("spec.template.spec.containers", "at least one container"))
    features = {
        target: float(model[source])
        for source, target in _MODEL_FEATURES.items()
        if model.get(source) is not None
    }
    for name, value in (model.get("features") or {}).items():
        features[str(name)] = float(value)
    if data.get("sizeGB") and not data.get("cluster"):
        errors.append(FieldError("spec.data.cluster", "where the data is must be given"))
    job = Job(
        key=job_key(body),
        submit_s=parse_time(meta.get("creationTimestamp")) or 0.0,
        gpus_per_worker=gpus,
        workers=int(spec.get("workers", 1)),
        gpu_share=share,
        gpu_memory_gib=float(res.get("gpuMemoryGiB", 0.0)),
        cpu=_quantity(res.get("cpu"), "spec.resources.cpu", errors),
        memory_gib=_quantity(res.get("memory"), "spec.resources.memory", errors, _GIB),
        gpu_types=_gpu_types(res.get("gpuTypes"), errors),
        user=user,
        group=group,
        queue=str(spec.get("queue", "")),
        priority=int(spec.get("priority", 0)),
        model=str(model.get("name", "")),
        features=frozen_map(features),
        data_cluster=data.get("cluster") or None,
        data_gb=float(data.get("sizeGB", 0.0)),
        image_gb=float(image.get("sizeGB", 0.0)),
        user_estimate_s=(
            float(spec["runtimeEstimateSeconds"]) if spec.get("runtimeEstimateSeconds") else None
        ),
        attempts=int(status.get("attempts", 0)),
        not_before_s=parse_time(status.get("notBefore")) or 0.0,
        suspended=bool(spec.get("suspend", False)),
        checkpoint=bool(spec.get("checkpoint", False)),
    )
    if errors:
        raise InvalidSpec(errors, where=job.key)
    return job
