"""GPUBenchmark shapes to core values and back: its spec read with the policy's defaults,
the member Job that runs it, its status, and its result as the predictor's rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cpn.api import constants as k
from cpn.api.aijob import parse_time
from cpn.api.status import rfc3339
from cpn.core.benchmarks import PENDING, BenchResult, Known, ModelResult, NodeRate, SlowNode
from cpn.core.policy import Benchmarks
from predictor.history import BenchmarkRecord

_MAX_NAME = 63
#: llama3 results teach the predictor's llama3-8b only at the published depth
LLAMA3_LAYERS = 32
#: the workload's names of models the predictor's catalog calls otherwise
CATALOG_NAME = {"llama3": "llama3-8b"}


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchSpec:
    """What a GPUBenchmark asks, with the policy's defaults filled in."""

    name: str
    #: seconds per model (``--budget-seconds``)
    budget_s: float
    #: the MemberCluster and its node measured
    cluster: str
    node: str
    #: the models run (``--models``)
    models: tuple[str, ...]


def read_spec(body: Mapping[str, Any], policy: Benchmarks) -> BenchSpec:
    """The GPUBenchmark's spec (the CRD's schema has checked its types)."""
    spec = body.get("spec") or {}
    models = tuple(spec.get("models") or ()) or policy.models
    return BenchSpec(
        name=body["metadata"]["name"],
        cluster=str(spec.get("cluster", "")),
        node=str(spec.get("node", "")),
        models=models,
        budget_s=float(spec.get("budgetSeconds") or policy.budget_s),
    )


def phase_of(body: Mapping[str, Any]) -> str:
    """Its phase; Pending until cpn wrote one."""
    return str((body.get("status") or {}).get("phase") or PENDING)


def known_of(body: Mapping[str, Any]) -> Known:
    """What :func:`cpn.core.benchmarks.to_create` needs of a GPUBenchmark."""
    spec, status = body.get("spec") or {}, body.get("status") or {}
    return Known(
        cluster=str(spec.get("cluster", "")),
        node=str(spec.get("node", "")),
        gpu_type=str(status.get("gpuType") or ""),
        phase=phase_of(body),
        finished_s=parse_time(status.get("completionTime")),
    )


def benchmark_name(cluster: str, node: str) -> str:
    """The name cpn gives the GPUBenchmark it creates for a node: ``<cluster>-<node>``."""
    return f"{cluster}-{node}"[:253].rstrip("-.").lower()


def new_benchmark(cluster: str, node: str) -> dict[str, Any]:
    """A GPUBenchmark for ``node`` of ``cluster`` (the policy supplies models and budget)."""
    return {
        "apiVersion": f"{k.GROUP}/{k.VERSION}",
        "kind": "GPUBenchmark",
        "metadata": {
            "name": benchmark_name(cluster, node),
            "labels": {k.LABEL_MANAGED: k.MANAGED_BY},
        },
        "spec": {"cluster": cluster, "node": node},
    }


def requested_benchmark(
    cluster: str, node: str, *, models: tuple[str, ...] = (), budget_s: float | None = None
) -> dict[str, Any]:
    """A GPUBenchmark an admin asks for (``cpn benchmark run``): named by the hub from
    ``<cluster>-<node>-``, so a node can be measured again; the policy's models and budget
    unless given."""
    spec: dict[str, Any] = {"cluster": cluster, "node": node}
    if models:
        spec["models"] = list(models)
    if budget_s is not None:
        spec["budgetSeconds"] = budget_s
    prefix = benchmark_name(cluster, node)[: _MAX_NAME - len("cpn-bench-") - 6].rstrip("-.")
    return {
        "apiVersion": f"{k.GROUP}/{k.VERSION}",
        "kind": "GPUBenchmark",
        "metadata": {"generateName": f"{prefix}-", "labels": {k.LABEL_MANAGED: k.MANAGED_BY}},
        "spec": spec,
    }


def job_name(name: str) -> str:
    """The member Job of a GPUBenchmark: ``cpn-bench-<name>``, cut to a DNS label."""
    return f"cpn-bench-{name}"[:_MAX_NAME].rstrip("-.")


def render_job(
    spec: BenchSpec, *, image: str, hub: str, namespace: str, uid: str = ""
) -> dict[str, Any]:
    """The batch/v1 Job that runs the benchmark workload on the GPUBenchmark's node: one
    pod, one GPU, pinned by node affinity, never retried; its result is the container's
    termination message."""
    labels = {
        k.LABEL_MANAGED: k.MANAGED_BY,
        k.LABEL_HUB: hub,
        k.LABEL_BENCHMARK: spec.name[:_MAX_NAME].rstrip("-."),
    }
    node_term = {"key": k.HOSTNAME_LABEL, "operator": "In", "values": [spec.node]}
    container = {
        "name": "bench",
        "image": image,
        "command": ["python", "-m", "cpn_workloads"],
        "args": [
            "bench",
            "--models",
            ",".join(spec.models),
            "--budget-seconds",
            f"{spec.budget_s:g}",
        ],
        "env": [
            {"name": "CPN_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
        ],
        "resources": {"limits": {k.GPU_RESOURCE: "1"}, "requests": {k.GPU_RESOURCE: "1"}},
        "terminationMessagePolicy": "File",
    }
    affinity = {"nodeSelectorTerms": [{"matchExpressions": [node_term]}]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(spec.name),
            "namespace": namespace,
            "labels": labels,
            "annotations": {"cpn.io/gpubenchmark": spec.name, "cpn.io/gpubenchmark-uid": uid},
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "restartPolicy": "Never",
                    "affinity": {
                        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}
                    },
                    "containers": [container],
                },
            },
        },
    }


def catalog_model(result: ModelResult) -> str | None:
    """The predictor's name for what was measured, or None when it must not teach it
    (llama3 with fewer than its published layers is another model)."""
    if result.model == "llama3" and result.layers not in (None, LLAMA3_LAYERS):
        return None
    return CATALOG_NAME.get(result.model, result.model)


def records(
    result: BenchResult, *, name: str, node: str, gpu_type: str, measured_at: float
) -> list[BenchmarkRecord]:
    """The predictor's rows of a checked result (one per model it may learn)."""
    out = []
    for r in result.results:
        model = catalog_model(r)
        if model is None:
            continue
        out.append(
            BenchmarkRecord(
                source=name,
                node=node,
                measured_at=measured_at,
                gpu_type=gpu_type,
                model=model,
                batch_size=r.batch_size,
                samples_per_s=r.samples_per_s,
                precision=r.precision,
                versions=result.software,
            )
        )
    return out


def succeeded_status(
    result: BenchResult, *, gpu_type: str, finished_s: float, learned: int
) -> dict[str, Any]:
    """The status of a GPUBenchmark whose result was read and checked."""
    first = result.results[0]
    rows = [
        {
            "model": r.model,
            "catalogModel": catalog_model(r) or "",
            "batchSize": r.batch_size,
            "precision": r.precision,
            "samplesPerSecond": r.samples_per_s,
            "stepP50Seconds": r.step_p50_s,
            "stepP90Seconds": r.step_p90_s,
            "learned": catalog_model(r) is not None,
        }
        for r in result.results
    ]
    return {
        "phase": "Succeeded",
        "reason": "Measured",
        "message": f"{len(rows)} model(s) measured; {learned} row(s) taught the predictor",
        "gpuType": gpu_type,
        "model": first.model,
        "samplesPerSecond": first.samples_per_s,
        "completionTime": rfc3339(finished_s),
        "device": result.device,
        "software": dict(result.software),
        "results": [{key: v for key, v in row.items() if v is not None} for row in rows],
    }


def recalled(body: Mapping[str, Any]) -> list[BenchmarkRecord]:
    """The predictor's rows of a Succeeded GPUBenchmark as the hub keeps it (read back at
    start-up: the hub is the store)."""
    status, spec = body.get("status") or {}, body.get("spec") or {}
    if status.get("phase") != "Succeeded":
        return []
    finished = parse_time(status.get("completionTime")) or 0.0
    out = []
    for row in status.get("results") or []:
        if not row.get("learned") or not row.get("catalogModel"):
            continue
        out.append(
            BenchmarkRecord(
                source=body["metadata"]["name"],
                node=str(spec.get("node", "")),
                measured_at=finished,
                gpu_type=str(status.get("gpuType", "")),
                model=str(row["catalogModel"]),
                batch_size=int(row.get("batchSize") or 0),
                samples_per_s=float(row.get("samplesPerSecond") or 0.0),
                precision=str(row.get("precision") or ""),
                versions=dict(status.get("software") or {}),
            )
        )
    return out


def node_rates(body: Mapping[str, Any]) -> list[NodeRate]:
    """The samples/s per model of a Succeeded GPUBenchmark, for the slow-node rule."""
    status, spec = body.get("status") or {}, body.get("spec") or {}
    if status.get("phase") != "Succeeded":
        return []
    out = []
    for row in status.get("results") or []:
        rate = row.get("samplesPerSecond")
        if not row.get("model") or isinstance(rate, bool) or not isinstance(rate, int | float):
            continue
        out.append(
            NodeRate(
                cluster=str(spec.get("cluster", "")),
                node=str(spec.get("node", "")),
                gpu_type=str(status.get("gpuType") or ""),
                model=str(row["model"]),
                samples_per_s=float(rate),
                source=str(body["metadata"]["name"]),
            )
        )
    return out


def slow_message(slow: SlowNode) -> str:
    """One slow node in words: ``<node> resnet50 1355/s, 0.50x the median 2710/s of 2 other
    H100-80GB nodes``."""
    rate = slow.rate
    return (
        f"{rate.node} {rate.model} {rate.samples_per_s:g}/s, {slow.ratio:.2f}x the median "
        f"{slow.peers_median:g}/s of {slow.peers} other {rate.gpu_type} nodes"
    )
