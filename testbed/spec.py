"""The test bed's layout: which clusters, which fake GPU nodes, which ports.

Pure code: parses ``nodes.yaml`` into frozen values and renders the Node
objects the bed creates. Nothing here starts a process or talks to a server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: pod annotation: simulated run time, a Go duration ("20s", "1h30m"); absent -> runs until deleted
DURATION_ANNOTATION = "testbed.cpn.io/duration"
#: pod annotation: extra run time (a Go duration) of a pod that resumes a preempted job, i.e.
#: one with cpn's ``cpn.io/resume-from-seconds``; that pod runs duration - resume-from + this
RESTART_COST_ANNOTATION = "testbed.cpn.io/restart-cost"
#: pod annotation: "Failed" fails the pod after the duration, "Hang" keeps it running
OUTCOME_ANNOTATION = "testbed.cpn.io/outcome"
#: pod annotation written by the kwok stage when the pod starts: absolute end time (RFC 3339)
FINISH_AT_ANNOTATION = "testbed.cpn.io/finish-at"
#: pod annotation read by the DCGM simulator: GPU utilisation in percent while the pod runs
GPU_UTIL_ANNOTATION = "testbed.cpn.io/gpu-util"
#: pod annotation read by the DCGM simulator: framebuffer fraction in use while the pod runs
GPU_MEM_FRACTION_ANNOTATION = "testbed.cpn.io/gpu-mem-fraction"
#: node annotation naming the NVML model name (dcgm-exporter's modelName)
MODEL_NAME_ANNOTATION = "testbed.cpn.io/gpu-model-name"
#: node annotations with the power figures the DCGM simulator uses
POWER_LIMIT_ANNOTATION = "testbed.cpn.io/gpu-power-limit-w"
IDLE_POWER_ANNOTATION = "testbed.cpn.io/gpu-idle-power-w"
#: pod label cpn puts on its GPU benchmark pods (cpn.api.constants.LABEL_BENCHMARK)
BENCHMARK_LABEL = "cpn.io/benchmark"
#: pod annotation the DCGM simulator writes on a benchmark pod: its termination message,
#: which the kwok stage that ends the pod copies into containerStatuses[].state.terminated
TERMINATION_MESSAGE_ANNOTATION = "testbed.cpn.io/termination-message"
#: node annotation: the termination message every benchmark pod on that node leaves, as is
#: (a test's way to hand the operator a malformed result)
BENCHMARK_MESSAGE_ANNOTATION = "testbed.cpn.io/benchmark-message"
#: node annotation: a factor on the truth's samples/s of every benchmark pod on that node
#: (a slow node: "0.5" reports half of its GPU type's truth)
BENCHMARK_SPEED_ANNOTATION = "testbed.cpn.io/benchmark-speed"
#: node annotation: seconds a benchmark pod on that node runs per model (a long benchmark,
#: for a user job to preempt)
BENCHMARK_SECONDS_ANNOTATION = "testbed.cpn.io/benchmark-seconds"
#: seconds a simulated benchmark pod runs per model
BENCHMARK_SECONDS_PER_MODEL = 2
#: the benchmark workload's batch size per model on a GPU (workloads/cpn_workloads/models.py)
WORKLOAD_BATCH = {"resnet50": 64, "yolov8m": 16, "llama3": 1, "bert-large": 8}
#: node annotation that kwok's --manage-nodes-with-annotation-selector matches
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
GPU_RESOURCE = "nvidia.com/gpu"

HUB = "hub"
DEFAULT_NODES_FILE = Path(__file__).with_name("nodes.yaml")
DEFAULT_PORT_BASE = 26100
#: ports reserved per cluster; cluster i uses base + i * PORT_BLOCK + offset
PORT_BLOCK = 10
PORT_OFFSETS: dict[str, int] = {
    "etcd": 0,
    "etcd-peer": 1,
    "kube-apiserver": 2,
    "kube-controller-manager": 3,
    "kube-scheduler": 4,
    "kwok": 5,
    "prometheus": 6,
    "dcgm": 7,
    # only with the MultiKueue peer (testbed.kueue)
    "kueue-webhook": 8,
    "kueue-health": 9,
}


class SpecError(ValueError):
    """``nodes.yaml`` is malformed; the message names the field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuModel:
    """One GPU type as NVML and GPU feature discovery name it."""

    key: str
    product: str
    family: str
    memory_mib: int
    power_limit_w: float
    idle_power_w: float
    #: the bed's truth: what this GPU type trains per second, per benchmark model, at the
    #: workload's batch (WORKLOAD_BATCH); simulated benchmark pods report it
    samples_per_s: Mapping[str, float] = field(default_factory=dict, compare=False)

    @property
    def gfd_product(self) -> str:
        """The ``nvidia.com/gpu.product`` label value (spaces become dashes)."""
        return self.product.replace(" ", "-")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    """One fake GPU node."""

    name: str
    gpu_model: GpuModel
    gpus: int
    cpu: int
    memory_gib: int

    def manifest(self) -> dict[str, Any]:
        """The Node object, labelled like GPU feature discovery labels a real node."""
        quantities = {
            "cpu": str(self.cpu),
            "memory": f"{self.memory_gib}Gi",
            "pods": "110",
            "ephemeral-storage": "1Ti",
            GPU_RESOURCE: str(self.gpus),
        }
        model = self.gpu_model
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "annotations": {
                    KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE,
                    MODEL_NAME_ANNOTATION: model.product,
                    POWER_LIMIT_ANNOTATION: str(model.power_limit_w),
                    IDLE_POWER_ANNOTATION: str(model.idle_power_w),
                },
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": model.gfd_product,
                    "nvidia.com/gpu.family": model.family,
                    "nvidia.com/gpu.memory": str(model.memory_mib),
                    "nvidia.com/gpu.count": str(self.gpus),
                },
            },
            "status": {"capacity": dict(quantities), "allocatable": dict(quantities)},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    """One cluster of the bed: the hub (no nodes) or a member."""

    name: str
    index: int
    nodes: tuple[NodeSpec, ...]
    #: whether the member runs the GPU metrics stack (the DCGM simulator and Prometheus);
    #: ``metrics: false`` in the nodes file leaves it out (a scale bench bed: with 1,000
    #: nodes a member's stack costs more than its control plane)
    metrics: bool = True

    @property
    def is_hub(self) -> bool:
        """The hub runs only etcd, kube-apiserver and kube-controller-manager."""
        return self.name == HUB

    @property
    def components(self) -> tuple[str, ...]:
        """Component names in start order."""
        base = ("etcd", "kube-apiserver", "kube-controller-manager")
        if self.is_hub:
            return base
        if not self.metrics:
            return (*base, "kube-scheduler", "kwok")
        return (*base, "kube-scheduler", "kwok", "dcgm", "prometheus")

    def port(self, base: int, component: str) -> int:
        """The loopback port of ``component`` in this cluster."""
        return base + self.index * PORT_BLOCK + PORT_OFFSETS[component]


@dataclass(frozen=True, slots=True, kw_only=True)
class BedSpec:
    """The whole bed: hub first, then members in file order."""

    clusters: tuple[ClusterSpec, ...]
    port_base: int
    #: every GPU model of the file, those no node uses included (tests add such nodes)
    gpu_models: tuple[GpuModel, ...] = ()

    @property
    def members(self) -> tuple[ClusterSpec, ...]:
        """The member clusters (every cluster but the hub)."""
        return tuple(c for c in self.clusters if not c.is_hub)

    def cluster(self, name: str) -> ClusterSpec:
        """The cluster called ``name``; KeyError if there is none."""
        for c in self.clusters:
            if c.name == name:
                return c
        raise KeyError(name)


#: where Linux says which local ports it hands to outgoing connections
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's ephemeral port range (low, high), or None where it cannot be read."""
    try:
        low, high = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def ports_problem(spec: BedSpec, ephemeral: tuple[int, int] | None) -> str | None:
    """Why the bed's ports cannot be used, or None. Ports in the ephemeral range are
    refused: any client connection on the machine may hold one of them when a server of
    the bed starts ("address already in use", seen once with a bed at 33000)."""
    first = spec.port_base
    last = first + len(spec.clusters) * PORT_BLOCK - 1
    size = last - first + 1
    if ephemeral is None or (ephemeral[0] - 1024 < size and 65535 - ephemeral[1] < size):
        return None  # unknown, or no room outside it: nothing better to suggest
    if first <= ephemeral[1] and last >= ephemeral[0]:
        return (
            f"the bed's ports {first}-{last} overlap the kernel's ephemeral ports "
            f"{ephemeral[0]}-{ephemeral[1]} (net.ipv4.ip_local_port_range), which outgoing "
            "connections take at random; set CPN_TESTBED_PORT_BASE outside that range"
        )
    return None


def _int(raw: Any, where: str, minimum: int = 0) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        raise SpecError(f"{where}: expected an integer >= {minimum}, got {raw!r}")
    return raw


def _num(raw: Any, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw < 0:
        raise SpecError(f"{where}: expected a number >= 0, got {raw!r}")
    return float(raw)


def _str(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise SpecError(f"{where}: expected a non-empty string, got {raw!r}")
    return raw


def _rates(raw: Any, where: str) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: expected a mapping of model to samples/s")
    out = {}
    for model, value in raw.items():
        if model not in WORKLOAD_BATCH:
            raise SpecError(f"{where}.{model}: not a benchmark model ({', '.join(WORKLOAD_BATCH)})")
        out[model] = _num(value, f"{where}.{model}")
        if out[model] <= 0:
            raise SpecError(f"{where}.{model}: expected a number > 0, got {value!r}")
    return out


def benchmark_result(
    gpu: GpuModel, models: list[str], node: str, speed: float = 1.0
) -> dict[str, Any]:
    """The result document the benchmark workload would print on a GPU of ``gpu``, with the
    bed's truth times ``speed`` as its samples/s (a model the truth lacks is reported as
    failed)."""
    results: list[dict[str, Any]] = []
    for model in models:
        truth = gpu.samples_per_s.get(model)
        batch = WORKLOAD_BATCH.get(model, 1)
        rate = truth if truth is None or speed == 1 else round(truth * speed, 6)
        if rate is None:
            results.append({"model": model, "error": f"no truth for {model} on {gpu.key}"})
            continue
        step = batch / rate
        results.append(
            {
                "model": model,
                "batch_size": batch,
                "precision": "bf16",
                "steps": 100,
                "samples_per_s": rate,
                "step_s": {"p50": round(step, 6), "p90": round(step * 1.05, 6)},
            }
        )
    return {
        "kind": "cpn.io/gpu-benchmark",
        "schema": 1,
        "mode": "bench",
        "node": node,
        "device": {"type": "cuda", "name": gpu.product, "memory_gib": gpu.memory_mib / 1024},
        "software": {"workload": "testbed-sim", "torch": "none (simulated)"},
        "results": results,
    }


def parse_spec(doc: Any, *, port_base: int = DEFAULT_PORT_BASE) -> BedSpec:
    """Turn the parsed ``nodes.yaml`` document into a BedSpec (hub added first)."""
    if not isinstance(doc, dict):
        raise SpecError("nodes file: expected a mapping with gpu_models and members")
    raw_models = doc.get("gpu_models")
    if not isinstance(raw_models, dict) or not raw_models:
        raise SpecError("gpu_models: expected a non-empty mapping")
    models: dict[str, GpuModel] = {}
    for key, m in raw_models.items():
        where = f"gpu_models.{key}"
        if not isinstance(m, dict):
            raise SpecError(f"{where}: expected a mapping")
        models[key] = GpuModel(
            key=key,
            product=_str(m.get("product"), f"{where}.product"),
            family=_str(m.get("family"), f"{where}.family"),
            memory_mib=_int(m.get("memory_mib"), f"{where}.memory_mib", 1),
            power_limit_w=_num(m.get("power_limit_w"), f"{where}.power_limit_w"),
            idle_power_w=_num(m.get("idle_power_w"), f"{where}.idle_power_w"),
            samples_per_s=_rates(m.get("samples_per_s"), f"{where}.samples_per_s"),
        )
    raw_members = doc.get("members")
    if not isinstance(raw_members, dict) or len(raw_members) < 1:
        raise SpecError("members: expected a mapping with at least one member cluster")
    metrics = doc.get("metrics", True)
    if not isinstance(metrics, bool):
        raise SpecError(f"metrics: expected true or false, got {metrics!r}")
    clusters = [ClusterSpec(name=HUB, index=0, nodes=())]
    seen: set[str] = set()
    for index, (name, groups) in enumerate(raw_members.items(), start=1):
        if name == HUB or not isinstance(name, str) or not name.replace("-", "").isalnum():
            raise SpecError(f"members: invalid cluster name {name!r}")
        if not isinstance(groups, list):
            raise SpecError(f"members.{name}: expected a list of node groups")
        nodes: list[NodeSpec] = []
        for g_index, g in enumerate(groups):
            where = f"members.{name}[{g_index}]"
            if not isinstance(g, dict):
                raise SpecError(f"{where}: expected a mapping")
            model_key = _str(g.get("gpu_model"), f"{where}.gpu_model")
            if model_key not in models:
                raise SpecError(f"{where}.gpu_model: unknown model {model_key!r}")
            prefix = _str(g.get("prefix"), f"{where}.prefix")
            for i in range(_int(g.get("count"), f"{where}.count", 1)):
                node_name = f"{prefix}-{i}"
                if node_name in seen:
                    raise SpecError(f"{where}: node name {node_name!r} used twice")
                seen.add(node_name)
                nodes.append(
                    NodeSpec(
                        name=node_name,
                        gpu_model=models[model_key],
                        gpus=_int(g.get("gpus"), f"{where}.gpus", 1),
                        cpu=_int(g.get("cpu"), f"{where}.cpu", 1),
                        memory_gib=_int(g.get("memory_gib"), f"{where}.memory_gib", 1),
                    )
                )
        clusters.append(ClusterSpec(name=name, index=index, nodes=tuple(nodes), metrics=metrics))
    return BedSpec(clusters=tuple(clusters), port_base=port_base, gpu_models=tuple(models.values()))


def default_nodes_file() -> Path:
    """``$CPN_TESTBED_NODES``, else the ``nodes.yaml`` beside this module."""
    return Path(os.environ.get("CPN_TESTBED_NODES", DEFAULT_NODES_FILE)).absolute()


def load_spec(path: Path | None = None, *, port_base: int | None = None) -> BedSpec:
    """Read a nodes file (default: :func:`default_nodes_file`)."""
    path = path or default_nodes_file()
    if port_base is None:
        port_base = int(os.environ.get("CPN_TESTBED_PORT_BASE", DEFAULT_PORT_BASE))
    with path.open(encoding="utf-8") as f:
        return parse_spec(yaml.safe_load(f), port_base=port_base)
