"""Builders for the objects tests put on the bed, and a condition-polling helper."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from testbed.spec import DURATION_ANNOTATION, GPU_RESOURCE, GPU_UTIL_ANNOTATION, OUTCOME_ANNOTATION

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not hold in time (an AssertionError, so pytest shows it as a failure)."""


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.25,
) -> T:
    """Call ``probe`` until it returns something truthy; return that, or raise WaitTimeout."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


def gpu_job(
    name: str,
    *,
    gpus: int,
    duration: str | None,
    gpu_product: str | None = None,
    outcome: str | None = None,
    gpu_util_pct: float | None = None,
    cpu: str = "4",
    memory: str = "16Gi",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job whose one pod asks ``gpus`` GPUs and runs ``duration`` on a fake node.

    ``gpu_product`` is a ``nvidia.com/gpu.product`` label value (e.g.
    ``NVIDIA-A100-SXM4-80GB``); ``outcome`` is ``Failed`` or ``Hang``.
    """
    annotations: dict[str, str] = {}
    if duration is not None:
        annotations[DURATION_ANNOTATION] = duration
    if outcome is not None:
        annotations[OUTCOME_ANNOTATION] = outcome
    if gpu_util_pct is not None:
        annotations[GPU_UTIL_ANNOTATION] = str(gpu_util_pct)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "train",
                "image": "cpn.local/trainer:sim",
                "resources": {
                    "requests": {"cpu": cpu, "memory": memory, GPU_RESOURCE: str(gpus)},
                    "limits": {GPU_RESOURCE: str(gpus)},
                },
            }
        ],
    }
    if gpu_product is not None:
        pod_spec["nodeSelector"] = {"nvidia.com/gpu.product": gpu_product}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations, "labels": dict(labels or {})},
                "spec": pod_spec,
            },
        },
    }
