"""Simulated NVIDIA dcgm-exporter and node-exporter for one member cluster.

Run by ``Testbed.up`` as ``python -m testbed.dcgm --kubeconfig K --cluster C --port P``.
It watches the member's Nodes and Pods and serves, on 127.0.0.1:P:

* ``/nodes/<node>/dcgm``: per GPU of that fake node, the series dcgm-exporter
  publishes by default (``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_FB_USED``,
  ``DCGM_FI_DEV_FB_FREE``, ``DCGM_FI_DEV_POWER_USAGE``, ...), labelled as
  released dcgm-exporter images label them: ``gpu``, ``UUID``, ``pci_bus_id``,
  ``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION`` and
  ``container``/``namespace``/``pod`` (empty while no pod holds the GPU).
* ``/nodes/<node>/node``: node-exporter's ``node_cpu_seconds_total{cpu,mode}``
  plus ``node_memory_MemTotal_bytes``/``node_memory_MemAvailable_bytes``;
  Prometheus adds ``instance=<node name>`` (see ``/sd/node``).
* ``/sd/dcgm`` and ``/sd/node``: Prometheus HTTP service discovery, one
  target per node with ``instance`` set to the node name.
* ``/healthz``: ``ok`` once the first list of nodes and pods is in.

A pod holds GPUs from the moment it is bound to a node until it ends: the
lowest free indices of its node, per container in container order, as the
NVIDIA device plugin would hand them out. While it runs, its GPUs report the
utilisation in its ``testbed.cpn.io/gpu-util`` annotation (percent, default
90 with a small deterministic wobble) and ``testbed.cpn.io/gpu-mem-fraction``
of the framebuffer (default 0.8); CPU time follows the pods' CPU requests.

It is also the bed's stand-in for cpn's GPU benchmark workload (KWOK runs no container):
a running pod labelled ``cpn.io/benchmark`` gets, in one patch, the result the workload
would print on its node's GPU type, drawn from the bed's truth (``samples_per_s`` of the
GPU model in ``nodes.yaml``), as annotation ``testbed.cpn.io/termination-message``, and
``testbed.cpn.io/finish-at`` two seconds per model later; kwok's ``pod-succeed`` stage then
ends the pod with that text as its containers' termination message. A node annotated
``testbed.cpn.io/benchmark-message`` hands out that text instead, as is; one annotated
``testbed.cpn.io/benchmark-speed`` reports the truth times that factor (a slow node), and
``testbed.cpn.io/benchmark-seconds`` sets the seconds per model (a long benchmark).
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from testbed.spec import (
    BENCHMARK_LABEL,
    BENCHMARK_MESSAGE_ANNOTATION,
    BENCHMARK_SECONDS_ANNOTATION,
    BENCHMARK_SECONDS_PER_MODEL,
    BENCHMARK_SPEED_ANNOTATION,
    FINISH_AT_ANNOTATION,
    GPU_MEM_FRACTION_ANNOTATION,
    GPU_RESOURCE,
    GPU_UTIL_ANNOTATION,
    IDLE_POWER_ANNOTATION,
    MODEL_NAME_ANNOTATION,
    POWER_LIMIT_ANNOTATION,
    TERMINATION_MESSAGE_ANNOTATION,
    GpuModel,
    benchmark_result,
    load_spec,
)
from testbed.staging import (
    STAGING_LABEL,
    STAGING_OUTCOME_ANNOTATION,
    read_links,
    read_sizes,
    staging_annotations,
)

DRIVER_VERSION = "550.90.07"
DEFAULT_UTIL_PCT = 90.0
DEFAULT_MEM_FRACTION = 0.8
CPU_MODES = ("idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user")
_UUID_NS = uuid.UUID("6f1c0e9a-3c1d-4b7e-9a53-1d2b0c5f4e10")


def parse_quantity(raw: str | None) -> float:
    """A Kubernetes quantity ("500m", "4", "64Gi") as a float; 0 if absent."""
    if not raw:
        return 0.0
    from kubernetes.utils import parse_quantity as _pq

    return float(_pq(raw))  # type: ignore[no-untyped-call]


@dataclass(slots=True, kw_only=True)
class NodeInfo:
    """What the simulator knows of one fake GPU node."""

    name: str
    gpus: int
    model_name: str
    memory_mib: int
    power_limit_w: float
    idle_power_w: float
    cpus: int
    memory_bytes: float
    benchmark_message: str | None = None
    benchmark_speed: float = 1.0
    benchmark_seconds: float = BENCHMARK_SECONDS_PER_MODEL
    staging_outcome: str = ""  # "Failed": staging pods on it fail (testbed/staging.py)


@dataclass(slots=True, kw_only=True)
class PodInfo:
    """A pod bound to a node, as far as the simulated exporters care."""

    uid: str
    name: str
    namespace: str
    node: str
    phase: str
    gpus_by_container: tuple[tuple[str, int], ...]
    cpu_request: float
    memory_request: float
    util_pct: float
    mem_fraction: float

    @property
    def holds_gpus(self) -> bool:
        """Bound and not finished: the device plugin has given it its GPUs."""
        return self.phase in {"Pending", "Running", "Unknown"}


@dataclass(slots=True, kw_only=True)
class _NodeCounters:
    """Monotonic counters integrated over time per node."""

    last_cpu_s: float
    last_energy_s: float
    cpu_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CPU_MODES, 0.0))
    energy_mj: dict[int, float] = field(default_factory=dict)


def node_from_object(obj: dict[str, Any]) -> NodeInfo | None:
    """NodeInfo of a Node object (plain dict), or None if it is not a fake GPU node."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    ann = meta.get("annotations") or {}
    capacity = (obj.get("status") or {}).get("capacity") or {}
    gpus = int(parse_quantity(capacity.get(GPU_RESOURCE)) or labels.get("nvidia.com/gpu.count", 0))
    if gpus <= 0:
        return None
    product = labels.get("nvidia.com/gpu.product", "NVIDIA-GPU")
    return NodeInfo(
        name=meta["name"],
        gpus=gpus,
        model_name=ann.get(MODEL_NAME_ANNOTATION) or product.replace("-", " ", 1),
        memory_mib=int(labels.get("nvidia.com/gpu.memory", "16384")),
        power_limit_w=float(ann.get(POWER_LIMIT_ANNOTATION, 300)),
        idle_power_w=float(ann.get(IDLE_POWER_ANNOTATION, 50)),
        cpus=max(1, int(parse_quantity(capacity.get("cpu")) or 1)),
        memory_bytes=parse_quantity(capacity.get("memory")),
        benchmark_message=ann.get(BENCHMARK_MESSAGE_ANNOTATION),
        benchmark_speed=_positive(ann.get(BENCHMARK_SPEED_ANNOTATION), 1.0),
        staging_outcome=ann.get(STAGING_OUTCOME_ANNOTATION, ""),
        benchmark_seconds=_positive(
            ann.get(BENCHMARK_SECONDS_ANNOTATION), BENCHMARK_SECONDS_PER_MODEL
        ),
    )


def _positive(text: str | None, default: float) -> float:
    """A node annotation's positive finite number; ``default`` when absent or not one."""
    try:
        value = float(text) if text is not None else default
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default


def pod_from_object(obj: dict[str, Any]) -> PodInfo | None:
    """PodInfo of a Pod object (plain dict), or None if it is not bound to a node."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    node = spec.get("nodeName")
    if not node:
        return None
    ann = meta.get("annotations") or {}
    gpus: list[tuple[str, int]] = []
    cpu = mem = 0.0
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        n = int(parse_quantity(limits.get(GPU_RESOURCE) or requests.get(GPU_RESOURCE)))
        if n > 0:
            gpus.append((c.get("name", ""), n))
        cpu += parse_quantity(requests.get("cpu") or limits.get("cpu"))
        mem += parse_quantity(requests.get("memory") or limits.get("memory"))
    try:
        util = float(ann.get(GPU_UTIL_ANNOTATION, DEFAULT_UTIL_PCT))
    except ValueError:
        util = DEFAULT_UTIL_PCT
    try:
        frac = float(ann.get(GPU_MEM_FRACTION_ANNOTATION, DEFAULT_MEM_FRACTION))
    except ValueError:
        frac = DEFAULT_MEM_FRACTION
    return PodInfo(
        uid=meta.get("uid", ""),
        name=meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        node=node,
        phase=(obj.get("status") or {}).get("phase") or "Pending",
        gpus_by_container=tuple(gpus),
        cpu_request=cpu,
        memory_request=mem,
        util_pct=min(100.0, max(0.0, util)),
        mem_fraction=min(1.0, max(0.0, frac)),
    )


def _models_of(pod: dict[str, Any]) -> list[str]:
    """The ``--models`` a benchmark pod's first container runs (the workload's default if
    it names none)."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    words = [*(containers[0].get("command") or []), *(containers[0].get("args") or [])]
    for index, word in enumerate(words[:-1]):
        if word == "--models":
            return [m for m in str(words[index + 1]).split(",") if m]
    return ["resnet50", "yolov8m", "llama3"]


def benchmark_annotations(
    pod: dict[str, Any], node: NodeInfo | None, gpus: dict[str, GpuModel], now_s: float
) -> dict[str, str] | None:
    """What to write on a benchmark pod that runs and has no end yet: its termination
    message (the bed's truth for its node's GPU type, or the node's override) and its end
    time; None for any other pod."""
    meta = pod.get("metadata") or {}
    if BENCHMARK_LABEL not in (meta.get("labels") or {}) or node is None:
        return None
    if (pod.get("status") or {}).get("phase") != "Running":
        return None
    if FINISH_AT_ANNOTATION in (meta.get("annotations") or {}):
        return None
    models = _models_of(pod)
    if node.benchmark_message is not None:
        message = node.benchmark_message
    elif node.model_name in gpus:
        doc = benchmark_result(gpus[node.model_name], models, node.name, node.benchmark_speed)
        message = json.dumps(doc, separators=(",", ":"))
    else:
        message = ""  # a GPU type the bed has no truth for: no result, as a crash leaves
    end = now_s + node.benchmark_seconds * len(models)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(end)) + f".{int(end * 1000) % 1000:03d}Z"
    return {TERMINATION_MESSAGE_ANNOTATION: message[:4096], FINISH_AT_ANNOTATION: stamp}


class ClusterModel:
    """Nodes, pods and GPU assignments of one member cluster; thread-safe."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self._lock = threading.Lock()
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        #: node -> gpu index -> (pod uid, container)
        self.assigned: dict[str, dict[int, tuple[str, str]]] = {}
        self._counters: dict[str, _NodeCounters] = {}

    # --- updates from the watches
    def set_node(self, node: NodeInfo) -> None:
        """Add or replace a node."""
        with self._lock:
            self.nodes[node.name] = node
            self.assigned.setdefault(node.name, {})

    def remove_node(self, name: str) -> None:
        """Forget a node."""
        with self._lock:
            self.nodes.pop(name, None)
            self.assigned.pop(name, None)
            self._counters.pop(name, None)

    def replace_nodes(self, nodes: Iterable[NodeInfo]) -> None:
        """Take a full node list (after a re-list)."""
        fresh = {n.name: n for n in nodes}
        with self._lock:
            for gone in set(self.nodes) - set(fresh):
                self.assigned.pop(gone, None)
                self._counters.pop(gone, None)
            self.nodes = fresh
            for name in fresh:
                self.assigned.setdefault(name, {})
            self._reassign()

    def set_pod(self, pod: PodInfo) -> None:
        """Add or update a bound pod."""
        with self._lock:
            self.pods[pod.uid] = pod
            self._reassign()

    def remove_pod(self, uid: str) -> None:
        """A pod was deleted."""
        with self._lock:
            self.pods.pop(uid, None)
            self._reassign()

    def replace_pods(self, pods: Iterable[PodInfo]) -> None:
        """Take a full pod list (after a re-list)."""
        with self._lock:
            self.pods = {p.uid: p for p in pods}
            self._reassign()

    def _reassign(self) -> None:
        """Free GPUs of pods that ended or left; give free GPUs to new holders (lock held)."""
        for node, slots in self.assigned.items():
            for idx, (uid, _) in list(slots.items()):
                pod = self.pods.get(uid)
                if pod is None or pod.node != node or not pod.holds_gpus:
                    del slots[idx]
        holders = sorted(
            (p for p in self.pods.values() if p.holds_gpus and p.gpus_by_container),
            key=lambda p: (p.namespace, p.name),
        )
        for pod in holders:
            info = self.nodes.get(pod.node)
            held = self.assigned.get(pod.node)
            if info is None or held is None:
                continue
            if any(uid == pod.uid for uid, _ in held.values()):
                continue
            free = [i for i in range(info.gpus) if i not in held]
            for container, n in pod.gpus_by_container:
                for idx in free[:n]:
                    held[idx] = (pod.uid, container)
                free = free[n:]

    # --- reads for the exporters
    def node_names(self) -> list[str]:
        """Names of the fake GPU nodes known now."""
        with self._lock:
            return sorted(self.nodes)

    def gpu_metrics(self, node_name: str, now_s: float) -> list[Metric] | None:
        """The dcgm-exporter series of one node, or None if the node is unknown."""
        with self._lock:
            node = self.nodes.get(node_name)
            if node is None:
                return None
            slots = dict(self.assigned.get(node_name, {}))
            pods = {uid: self.pods[uid] for uid, _ in slots.values() if uid in self.pods}
            counters = self._counters.setdefault(
                node_name, _NodeCounters(last_cpu_s=now_s, last_energy_s=now_s)
            )
            return self._render_gpus(node, slots, pods, counters, now_s)

    def node_metrics(self, node_name: str, now_s: float) -> list[Metric] | None:
        """The node-exporter series of one node, or None if the node is unknown."""
        with self._lock:
            node = self.nodes.get(node_name)
            if node is None:
                return None
            running = [p for p in self.pods.values() if p.node == node_name and p.holds_gpus]
            counters = self._counters.setdefault(
                node_name, _NodeCounters(last_cpu_s=now_s, last_energy_s=now_s)
            )
            busy = min(1.0, sum(p.cpu_request for p in running if p.phase == "Running") / node.cpus)
            dt = max(0.0, now_s - counters.last_cpu_s)
            counters.last_cpu_s = now_s
            shares = {
                "user": 0.02 + 0.85 * busy,
                "system": 0.01 + 0.08 * busy,
                "iowait": 0.002,
                "softirq": 0.001,
                "irq": 0.0005,
                "nice": 0.0,
                "steal": 0.0,
            }
            shares["idle"] = max(0.0, 1.0 - sum(shares.values()))
            for mode in CPU_MODES:
                counters.cpu_seconds[mode] += dt * shares[mode]
            cpu = CounterMetricFamily(
                "node_cpu_seconds",
                "Seconds the CPUs spent in each mode.",
                labels=["cpu", "mode"],
            )
            for i in range(node.cpus):
                for mode in CPU_MODES:
                    cpu.add_metric([str(i), mode], counters.cpu_seconds[mode])
            used = sum(p.memory_request for p in running if p.phase == "Running")
            total = GaugeMetricFamily(
                "node_memory_MemTotal_bytes", "Memory information field MemTotal_bytes."
            )
            total.add_metric([], node.memory_bytes)
            avail = GaugeMetricFamily(
                "node_memory_MemAvailable_bytes", "Memory information field MemAvailable_bytes."
            )
            avail.add_metric([], max(0.0, node.memory_bytes - used))
            return [cpu, total, avail]

    def _render_gpus(
        self,
        node: NodeInfo,
        slots: dict[int, tuple[str, str]],
        pods: dict[str, PodInfo],
        counters: _NodeCounters,
        now_s: float,
    ) -> list[Metric]:
        label_names = [
            "gpu",
            "UUID",
            "pci_bus_id",
            "device",
            "modelName",
            "Hostname",
            "DCGM_FI_DRIVER_VERSION",
            "container",
            "namespace",
            "pod",
        ]
        specs: list[tuple[str, str, str]] = [
            ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
            ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
            ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
            ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
            ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
            (
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                "counter",
                "Total energy consumption since boot (in mJ).",
            ),
            ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
            ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
            ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
            ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
            ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
            ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
            ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
            ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
            ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
            (
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                "gauge",
                "Ratio of time the graphics engine is active.",
            ),
            (
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                "gauge",
                "Ratio of cycles the tensor (HMMA) pipe is active.",
            ),
            (
                "DCGM_FI_PROF_DRAM_ACTIVE",
                "gauge",
                "Ratio of cycles the device memory interface is active.",
            ),
            (
                "DCGM_FI_PROF_PCIE_TX_BYTES",
                "gauge",
                "The rate of data transmitted over the PCIe bus.",
            ),
            ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus."),
        ]
        families: dict[str, Metric] = {}
        for name, kind, doc in specs:
            fam = Metric(name, doc, kind)
            families[name] = fam
        dt = max(0.0, now_s - counters.last_energy_s)
        reserved = round(node.memory_mib * 0.0075)
        for idx in range(node.gpus):
            uid, container = slots.get(idx, ("", ""))
            pod = pods.get(uid)
            running = pod is not None and pod.phase == "Running"
            util = 0.0
            frac = 0.0
            if pod is not None and running:
                wobble = 3.0 * math.sin(now_s / 7.0 + idx)
                util = min(100.0, max(0.0, pod.util_pct + wobble)) if pod.util_pct > 0 else 0.0
                frac = pod.mem_fraction
            used = round((node.memory_mib - reserved) * frac)
            power = node.idle_power_w + (node.power_limit_w - node.idle_power_w) * 0.9 * util / 100
            energy = counters.energy_mj.get(idx, 0.0) + power * dt * 1000.0
            counters.energy_mj[idx] = energy
            gpu_temp = 32.0 + 45.0 * util / 100
            values = {
                "DCGM_FI_DEV_SM_CLOCK": 1410.0 if util > 0 else 210.0,
                "DCGM_FI_DEV_MEM_CLOCK": 1593.0 if util > 0 else 405.0,
                "DCGM_FI_DEV_MEMORY_TEMP": gpu_temp + 4.0,
                "DCGM_FI_DEV_GPU_TEMP": gpu_temp,
                "DCGM_FI_DEV_POWER_USAGE": round(power, 3),
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": round(energy),
                "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0.0,
                "DCGM_FI_DEV_GPU_UTIL": round(util),
                "DCGM_FI_DEV_MEM_COPY_UTIL": round(util * 0.4),
                "DCGM_FI_DEV_ENC_UTIL": 0.0,
                "DCGM_FI_DEV_DEC_UTIL": 0.0,
                "DCGM_FI_DEV_XID_ERRORS": 0.0,
                "DCGM_FI_DEV_FB_FREE": float(node.memory_mib - reserved - used),
                "DCGM_FI_DEV_FB_USED": float(used),
                "DCGM_FI_DEV_FB_RESERVED": float(reserved),
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(util / 100 * 0.95, 4),
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(util / 100 * 0.5, 4),
                "DCGM_FI_PROF_DRAM_ACTIVE": round(util / 100 * 0.4, 4),
                "DCGM_FI_PROF_PCIE_TX_BYTES": 2.0e8 * util / 100,
                "DCGM_FI_PROF_PCIE_RX_BYTES": 3.0e8 * util / 100,
            }
            gpu_uuid = "GPU-" + str(uuid.uuid5(_UUID_NS, f"{self.cluster}/{node.name}/{idx}"))
            labels = [
                str(idx),
                gpu_uuid,
                f"00000000:{0x07 + 0x08 * idx:02X}:00.0",
                f"nvidia{idx}",
                node.model_name,
                node.name,
                DRIVER_VERSION,
                container if pod else "",
                pod.namespace if pod else "",
                pod.name if pod else "",
            ]
            label_map = dict(zip(label_names, labels, strict=True))
            for name, value in values.items():
                families[name].add_sample(name, label_map, float(value))
        counters.last_energy_s = now_s
        return list(families.values())


class _Families(Collector):
    """Adapter: a fixed list of metric families as a prometheus_client collector."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        """Yield the families."""
        yield from self._families


def exposition(families: list[Metric]) -> bytes:
    """Prometheus text exposition of ``families``.

    Counter families are written under their own name: prometheus_client would
    add ``_total`` to the HELP/TYPE lines of a counter, while dcgm-exporter's
    counters (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``) carry no such suffix.
    """
    text = generate_latest(_Families(families))
    for fam in families:
        if (
            fam.type == "counter"
            and not fam.name.endswith("_total")
            and fam.name.startswith("DCGM")
        ):
            text = text.replace(f" {fam.name}_total ".encode(), f" {fam.name} ".encode())
    return text


class Watcher:
    """Keeps a ClusterModel in sync with the API server (list, then watch; re-list on error)."""

    def __init__(
        self,
        model: ClusterModel,
        kubeconfig: str,
        gpus: dict[str, GpuModel] | None = None,
        links_file: Path | None = None,
    ) -> None:
        from kubernetes import client, config

        self.model = model
        self.gpus = gpus or {}  # product (NVML name) -> GPU model with the bed's truth
        self.links_file = links_file  # the bed's true link table (testbed/staging.py)
        self._benchmarked: set[str] = set()  # uids of benchmark pods given their result
        self._api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        self._core = client.CoreV1Api(self._api)
        self.synced = {"nodes": threading.Event(), "pods": threading.Event()}
        self._stop = threading.Event()

    def start(self) -> None:
        """Run both watches in daemon threads."""
        for kind in ("nodes", "pods"):
            threading.Thread(target=self._loop, args=(kind,), daemon=True, name=kind).start()

    def stop(self) -> None:
        """Ask the watch loops to end."""
        self._stop.set()

    def _list(self, kind: str, **kw: Any) -> Any:
        if kind == "nodes":
            return self._core.list_node(_preload_content=False, **kw)
        return self._core.list_pod_for_all_namespaces(_preload_content=False, **kw)

    def _loop(self, kind: str) -> None:
        from kubernetes.client.exceptions import ApiException

        while not self._stop.is_set():
            try:
                doc = json.loads(self._list(kind).data)
                items = doc.get("items") or []
                if kind == "nodes":
                    self.model.replace_nodes(n for n in map(node_from_object, items) if n)
                else:
                    self.model.replace_pods(p for p in map(pod_from_object, items) if p)
                self.synced[kind].set()
                self._watch(kind, doc["metadata"]["resourceVersion"])
            except ApiException as e:
                if e.status != 410:
                    time.sleep(1.0)
            except Exception:
                time.sleep(1.0)

    def _watch(self, kind: str, rv: str) -> None:
        resp = self._list(kind, watch=True, resource_version=rv, timeout_seconds=60)
        try:
            buf = b""
            for chunk in resp.stream(4096, decode_content=True):
                if self._stop.is_set():
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self._event(kind, json.loads(line))
        finally:
            resp.release_conn()

    def _event(self, kind: str, ev: dict[str, Any]) -> None:
        etype, obj = ev.get("type"), ev.get("object") or {}
        if etype == "ERROR":
            raise RuntimeError(f"watch error: {obj}")
        if etype == "BOOKMARK":
            return
        if kind == "nodes":
            node = node_from_object(obj)
            name = (obj.get("metadata") or {}).get("name", "")
            if etype == "DELETED" or node is None:
                self.model.remove_node(name)
            else:
                self.model.set_node(node)
            return
        uid = (obj.get("metadata") or {}).get("uid", "")
        pod = pod_from_object(obj)
        if etype == "DELETED" or pod is None:
            self.model.remove_pod(uid)
            self._benchmarked.discard(uid)
        else:
            self.model.set_pod(pod)
            if uid not in self._benchmarked:
                self._finish_benchmark(uid, obj, pod)

    def _finish_benchmark(self, uid: str, obj: dict[str, Any], pod: PodInfo) -> None:
        """A benchmark pod's result and end, or a staging pod's end (testbed/staging.py)."""
        node = self.model.nodes.get(pod.node)
        notes = benchmark_annotations(obj, node, self.gpus, time.time())
        if notes is None and STAGING_LABEL in ((obj.get("metadata") or {}).get("labels") or {}):
            failing = node is not None and node.staging_outcome == "Failed"
            links = read_links(self.links_file)
            sizes = read_sizes(self.links_file)
            notes = staging_annotations(obj, self.model.cluster, failing, links, time.time(), sizes)
        if notes is None:
            return
        self._benchmarked.add(uid)
        try:
            self._core.patch_namespaced_pod(
                pod.name, pod.namespace, {"metadata": {"annotations": notes}}
            )
        except Exception:
            self._benchmarked.discard(uid)  # tried again on its next event


def make_handler(
    model: ClusterModel, watcher: Watcher | None, port: int
) -> type[BaseHTTPRequestHandler]:
    """The HTTP handler class serving the routes in the module docstring."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            parts = path.split("/")
            if path == "/healthz":
                ok = watcher is None or all(e.is_set() for e in watcher.synced.values())
                self._send(200 if ok else 503, b"ok" if ok else b"syncing")
            elif len(parts) == 3 and parts[1] == "sd" and parts[2] in {"dcgm", "node"}:
                targets = [
                    {
                        "targets": [f"127.0.0.1:{port}"],
                        "labels": {
                            "__metrics_path__": f"/nodes/{name}/{parts[2]}",
                            "instance": name,
                            "node": name,
                        },
                    }
                    for name in model.node_names()
                ]
                self._send(200, json.dumps(targets).encode(), "application/json")
            elif len(parts) == 4 and parts[1] == "nodes" and parts[3] in {"dcgm", "node"}:
                now = time.time()
                fams = (
                    model.gpu_metrics(parts[2], now)
                    if parts[3] == "dcgm"
                    else model.node_metrics(parts[2], now)
                )
                if fams is None:
                    self._send(404, b"unknown node")
                else:
                    self._send(200, exposition(fams), CONTENT_TYPE_LATEST)
            else:
                self._send(404, b"not found")

    return Handler


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m testbed.dcgm --kubeconfig K --cluster C --port P``."""
    parser = argparse.ArgumentParser(prog="testbed.dcgm", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--nodes-file", default=None, help="nodes.yaml with the bed's truth")
    parser.add_argument("--links-file", default=None, help="the bed's true link table")
    args = parser.parse_args(argv)
    model = ClusterModel(args.cluster)
    spec = load_spec(Path(args.nodes_file) if args.nodes_file else None, port_base=0)
    gpus = {gpu.product: gpu for gpu in spec.gpu_models}
    links = Path(args.links_file) if args.links_file else None
    watcher = Watcher(model, args.kubeconfig, gpus, links)
    watcher.start()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(model, watcher, args.port))
    server.daemon_threads = True
    try:
        server.serve_forever()
    finally:
        watcher.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
