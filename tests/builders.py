"""Builders of real core values with sensible defaults, for table and property tests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cpn.core.model import Cluster, Estimate, Job, Node, Running, Snapshot, frozen_map
from cpn.core.policy import QueuePolicy


def job(
    key: str,
    *,
    gpus: int = 1,
    workers: int = 1,
    submitted_s: float = 0.0,
    runtime_s: float | dict[str, float] = 3600.0,
    **fields: Any,
) -> Job:
    """A job; ``runtime_s`` is one figure for every known GPU type, or a mapping per type."""
    if isinstance(runtime_s, dict):
        runtimes = runtime_s
    else:
        runtimes = {
            t: float(runtime_s) for t in ("A100-80GB", "V100-32GB", "K80", "P100", "V100-16GB")
        }
    return Job(
        key=key,
        submit_s=submitted_s,
        gpus_per_worker=gpus,
        workers=workers,
        estimate=Estimate(runtime_s=frozen_map(runtimes), source="test"),
        **fields,
    )


def nodes(
    cluster: str,
    count: int,
    *,
    gpu_type: str = "A100-80GB",
    gpus: int = 8,
    free: Iterable[float] | None = None,
    cpu: float = 64,
    memory_gib: float = 512,
    gpu_memory_gib: float = 80,
    prefix: str | None = None,
) -> tuple[Node, ...]:
    """``count`` identical nodes, all free unless ``free`` lists free GPUs per node."""
    frees = list(free) if free is not None else [float(gpus)] * count
    return tuple(
        Node(
            cluster=cluster,
            name=f"{prefix or cluster}-{i}",
            gpu_type=gpu_type,
            gpus=gpus,
            free_gpus=frees[i],
            gpu_memory_gib=gpu_memory_gib,
            cpu=cpu,
            free_cpu=cpu,
            memory_gib=memory_gib,
            free_memory_gib=memory_gib,
        )
        for i in range(count)
    )


def cluster(name: str, *node_groups: tuple[Node, ...], ready: bool = True) -> Cluster:
    """A cluster made of node groups (see :func:`nodes`)."""
    return Cluster(name=name, nodes=tuple(n for group in node_groups for n in group), ready=ready)


def running(
    j: Job,
    cluster_name: str,
    gpu_type: str,
    node_names: tuple[str, ...],
    *,
    start_s: float = 0.0,
    end_s: float = 3600.0,
) -> Running:
    """A running job."""
    return Running(
        job=j,
        cluster=cluster_name,
        gpu_type=gpu_type,
        nodes=node_names,
        start_s=start_s,
        predicted_end_s=end_s,
    )


def snapshot(
    *,
    jobs: Iterable[Job] = (),
    clusters: Iterable[Cluster] = (),
    running_jobs: Iterable[Running] = (),
    now_s: float = 0.0,
    policy: QueuePolicy | None = None,
    **fields: Any,
) -> Snapshot:
    """A snapshot with the default policy unless one is given."""
    return Snapshot(
        now_s=now_s,
        policy=policy or QueuePolicy(),
        pending=tuple(jobs),
        clusters=tuple(clusters),
        running=tuple(running_jobs),
        **fields,
    )
