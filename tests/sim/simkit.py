"""Builders and a tiny hand-made plan function for the simulator's pure tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cpn.core.model import CyclePlan, Snapshot, Start
from cpn.sim.clusters import ClusterSet, parse_clusters
from cpn.sim.trace import TraceJob

DATA = Path(__file__).resolve().parents[1] / "data"
SIM_DATA = Path(__file__).resolve().parents[2] / "operator" / "cpn" / "sim" / "data"
SHARED = Path("/work/shared/data")


def tjob(
    job_id: str, submit_s: float = 0.0, gpus: float = 1, duration_s: float = 100.0, **kw: Any
) -> TraceJob:
    """A trace job with sensible defaults (duration on the reference GPU)."""
    return TraceJob(job_id=job_id, submit_s=submit_s, gpus=gpus, duration_s=duration_s, **kw)


def clusters(
    spec: Mapping[str, list[tuple[int, str, int]]] | None = None,
    *,
    reference: str = "V100",
    bandwidth: Mapping[str, Mapping[str, float]] | None = None,
) -> ClusterSet:
    """Clusters from ``{name: [(count, gpu_type, gpus_per_node), ...]}`` (default: one 2x4 V100)."""
    spec = spec or {"a": [(2, "V100", 4)]}
    doc = {
        "reference_gpu": reference,
        "clusters": [
            {
                "name": name,
                "nodes": [
                    {"count": c, "gpu_type": g, "gpus_per_node": n, "cpu": 32, "memory_gib": 128}
                    for c, g, n in nodes
                ],
            }
            for name, nodes in spec.items()
        ],
        "bandwidth_gbps": dict(bandwidth or {}),
    }
    return parse_clusters(doc)


def greedy_plan(snapshot: Snapshot) -> CyclePlan:
    """FIFO with backfill, first fit: start each pending job (by submit time) where its
    workers fit, cluster by cluster in name order. Deliberately simple and independent
    of :mod:`cpn.core`."""
    free = {(n.cluster, n.name): n.free_gpus for c in snapshot.clusters for n in c.nodes}
    types = {(n.cluster, n.name): n.gpu_type for c in snapshot.clusters for n in c.nodes}
    starts = []
    for job in sorted(snapshot.pending, key=lambda j: (j.submit_s, j.key)):
        per = job.gpu_share if job.gpu_share < 1 else float(job.gpus_per_worker)
        for cluster in sorted(c.name for c in snapshot.clusters):
            trial = dict(free)
            nodes: list[str] = []
            for key in sorted(k for k in trial if k[0] == cluster):
                while len(nodes) < job.workers and trial[key] >= per:
                    trial[key] -= per
                    nodes.append(key[1])
            kinds = {types[(cluster, n)] for n in nodes}
            if len(nodes) == job.workers and len(kinds) == 1:
                free = trial
                gpu = kinds.pop()
                starts.append(
                    Start(
                        job_key=job.key,
                        cluster=cluster,
                        gpu_type=gpu,
                        nodes=tuple(nodes),
                        predicted_runtime_s=job.estimate.on(gpu) or 0.0,
                    )
                )
                break
    return CyclePlan(starts=tuple(starts))


def no_transfer(*_args: object) -> float:
    """A transfer function for tests that do not move data."""
    return 0.0
