"""A trace's job seen two ways: as the scheduler sees it, and the truth it does not see.

:func:`scheduler_job` makes the core :class:`~cpn.core.model.Job` the world submits
(workers shaped to the largest node, a checkpoint drawn when the trace leaves it blank,
the model and declared work hidden when ``unlabelled``); :func:`truth_for` gives every
job's true runtime per GPU type.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from types import MappingProxyType

from cpn.core.model import Job
from cpn.sim.speed import TrueRuntime
from cpn.sim.trace import TraceJob

#: What a job declares about its work (hidden from the scheduler when ``unlabelled``).
_DESCRIBED = ("batch_size", "epochs", "dataset_samples", "steps", "data_gb")


def draw(seed: int, what: str, key: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, what, key): the same in every run."""
    return random.Random(f"{seed}:{what}:{key}").random()


def worker_shape(gpus: float, max_node_gpus: int) -> tuple[int, int, float]:
    """(gpus_per_worker, workers, gpu_share) for a job asking ``gpus`` GPUs in total.

    A fraction of one GPU is a shared GPU; otherwise gpus_per_worker is the largest
    divisor of ``gpus`` that fits the largest node, and workers = gpus / that.
    """
    if gpus < 1:
        return 1, 1, gpus
    total = int(gpus)
    largest = max(1, max_node_gpus)
    for per in range(min(total, largest), 0, -1):
        if total % per == 0:
            return per, total // per, 1.0
    return 1, total, 1.0  # pragma: no cover - per=1 always divides


def scheduler_job(
    trace: TraceJob,
    *,
    max_node_gpus: int,
    unlabelled: bool = False,
    seed: int = 0,
    checkpointable: float = 0.0,
) -> Job:
    """``trace`` as the scheduler sees it (see :class:`~cpn.sim.world.World` for
    ``unlabelled``, ``seed`` and ``checkpointable``); its ``estimate`` is left empty."""
    per, workers, share = worker_shape(trace.gpus, max_node_gpus)
    features: dict[str, float] = {"gpus": float(trace.gpus)}
    described = ("data_gb",) if unlabelled else _DESCRIBED
    for name in described:
        value = getattr(trace, name)
        if value is not None:
            features[name] = float(value)
    checkpoint = trace.checkpoint
    if checkpoint is None:
        checkpoint = draw(seed, "checkpoint", trace.job_id) < checkpointable
    return Job(
        key=trace.job_id,
        submit_s=trace.submit_s,
        gpus_per_worker=per,
        workers=workers,
        gpu_share=share,
        gpu_memory_gib=trace.gpu_memory_gib or 0.0,
        cpu=(trace.cpu or 0.0) / workers,
        memory_gib=(trace.memory_gib or 0.0) / workers,
        user=trace.user,
        group=trace.group,
        priority=trace.priority,
        model="" if unlabelled else trace.model,
        features=MappingProxyType(features),
        data_cluster=trace.data_cluster,
        data_gb=trace.data_gb or 0.0,
        image_gb=trace.image_gb or 0.0,
        inputs=trace.inputs,
        user_estimate_s=None if unlabelled else trace.user_estimate_s,
        checkpoint=checkpoint,
    )


def truth_for(trace: Iterable[TraceJob], reference_gpu: str) -> TrueRuntime:
    """The ground truth of ``trace``: each job's runtime per GPU type."""
    truth = TrueRuntime(reference_gpu)
    for job in trace:
        truth.add(
            job.job_id,
            duration_s=job.duration_s,
            gpu_type=job.gpu_type,
            model=job.model,
            batch_size=job.batch_size,
            gpus=job.gpus,
        )
    return truth
