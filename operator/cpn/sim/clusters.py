"""The simulator's cluster file: member clusters, their nodes, and the links between them.

::

    reference_gpu: V100
    clusters:
      - name: east
        nodes:
          - {count: 4, gpu_type: V100, gpus_per_node: 8, gpu_memory_gib: 32,
             cpu: 64, memory_gib: 512, labels: {pool: interactive}}
    bandwidth_gbps: {east: {west: 10}}   # symmetric; missing pairs mean no link

GPU types are canonicalised through the predictor's catalog; ``gpu_memory_gib`` (per
GPU) defaults to the catalog's figure for the type, ``cpu`` and ``memory_gib`` to 0
(a job asking CPU or memory then never fits). ``labels`` are the nodes' labels, which
the policy's domains select (:meth:`ClusterSet.in_domains`, with the operator's
:func:`cpn.core.domains.node_domain`). Every error names the file and the field path
(``clusters[0].nodes[1].gpu_type``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from cpn.core.domains import check_domains, node_domain
from cpn.core.errors import FieldError, InvalidSpec
from cpn.core.model import Cluster, Node
from cpn.core.policy import Domain
from cpn.sim import speed


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSet:
    """What a cluster file describes: clusters, symmetric bandwidths, the reference GPU."""

    clusters: tuple[Cluster, ...]
    bandwidth_gbps: Mapping[str, Mapping[str, float]]
    reference_gpu: str
    labels: Mapping[tuple[str, str], Mapping[str, str]] = field(default_factory=dict)  # by node

    def in_domains(self, domains: tuple[Domain, ...]) -> tuple[Cluster, ...]:
        """The clusters with each node in its domain of ``domains`` (the policy's); domains
        that overlap on a node are refused, as the operator refuses them."""
        if not domains:
            return self.clusters
        nodes = [
            (c.name, n.name, self._labels(c.name, n.name)) for c in self.clusters for n in c.nodes
        ]
        refused, _ = check_domains(domains, nodes)
        if refused:
            raise InvalidSpec([FieldError("domains", why) for why in refused])
        return tuple(
            replace(
                c,
                nodes=tuple(
                    replace(n, domain=node_domain(domains, c.name, self._labels(c.name, n.name)))
                    for n in c.nodes
                ),
            )
            for c in self.clusters
        )

    def _labels(self, cluster: str, node: str) -> Mapping[str, str]:
        return self.labels.get((cluster, node), MappingProxyType({}))

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """Canonical GPU types present, sorted."""
        return tuple(sorted({n.gpu_type for c in self.clusters for n in c.nodes if n.gpus > 0}))

    @property
    def total_gpus(self) -> int:
        """GPUs over every node of every cluster."""
        return sum(n.gpus for c in self.clusters for n in c.nodes)


def _number(
    raw: Any,
    path: str,
    errors: list[FieldError],
    *,
    default: float | None = None,
    integer: bool = False,
) -> float:
    if raw is None:
        if default is None:
            errors.append(FieldError(path, "required"))
            return 0.0
        return default
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        errors.append(FieldError(path, f"must be a number, got {raw!r}"))
        return 0.0
    value = float(raw)
    if not math.isfinite(value) or value < 0:
        errors.append(FieldError(path, f"must be a non-negative number, got {raw!r}"))
        return 0.0
    if integer and not value.is_integer():
        errors.append(FieldError(path, f"must be a whole number, got {raw!r}"))
        return 0.0
    return value


def _catalog_memory_gib(gpu_type: str) -> float:
    """Memory of one ``gpu_type`` GPU from the catalog (0 when unknown)."""
    if not gpu_type:
        return 0.0
    from predictor import catalog

    return float(catalog.gpu_spec(gpu_type).memory_gib)


def _gpu(raw: Any, path: str, errors: list[FieldError]) -> str:
    if not isinstance(raw, str) or not raw.strip():
        errors.append(FieldError(path, "required: a GPU type name"))
        return ""
    try:
        return speed.canonical_gpu(raw.strip())
    except speed.UnknownName as exc:
        errors.append(FieldError(path, str(exc)))
        return ""


_NODE_KEYS = {
    "count",
    "gpu_type",
    "gpus_per_node",
    "gpu_memory_gib",
    "cpu",
    "memory_gib",
    "name",
    "labels",
}


def _node_labels(raw: Any, path: str, errors: list[FieldError]) -> Mapping[str, str]:
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        errors.append(FieldError(path, "must be a mapping of label to string value"))
        return MappingProxyType({})
    return MappingProxyType(dict(raw))


def parse_clusters(doc: Any, *, where: str = "") -> ClusterSet:
    """Parse a cluster document (already loaded YAML); InvalidSpec lists every bad field."""
    errors: list[FieldError] = []
    if not isinstance(doc, Mapping):
        raise InvalidSpec("the document must be a mapping", where=where)
    unknown = sorted(set(doc) - {"reference_gpu", "clusters", "bandwidth_gbps"})
    errors += [FieldError(str(k), "unknown field") for k in unknown]
    reference = _gpu(doc.get("reference_gpu"), "reference_gpu", errors)
    raw_clusters = doc.get("clusters")
    clusters: list[Cluster] = []
    labels: dict[tuple[str, str], Mapping[str, str]] = {}
    names: set[str] = set()
    if not isinstance(raw_clusters, list) or not raw_clusters:
        errors.append(FieldError("clusters", "required: a non-empty list"))
        raw_clusters = []
    for ci, raw_cluster in enumerate(raw_clusters):
        cpath = f"clusters[{ci}]"
        if not isinstance(raw_cluster, Mapping):
            errors.append(FieldError(cpath, "must be a mapping"))
            continue
        name = raw_cluster.get("name")
        if not isinstance(name, str) or not name.strip():
            errors.append(FieldError(f"{cpath}.name", "required: a non-empty string"))
            name = f"cluster{ci}"
        elif name in names:
            errors.append(FieldError(f"{cpath}.name", f"duplicate cluster name {name!r}"))
        names.add(name)
        for key in sorted(set(raw_cluster) - {"name", "nodes", "location"}):
            errors.append(FieldError(f"{cpath}.{key}", "unknown field"))
        raw_nodes = raw_cluster.get("nodes")
        if not isinstance(raw_nodes, list) or not raw_nodes:
            errors.append(FieldError(f"{cpath}.nodes", "required: a non-empty list"))
            raw_nodes = []
        nodes: list[Node] = []
        for ni, raw_node in enumerate(raw_nodes):
            npath = f"{cpath}.nodes[{ni}]"
            if not isinstance(raw_node, Mapping):
                errors.append(FieldError(npath, "must be a mapping"))
                continue
            for key in sorted(set(raw_node) - _NODE_KEYS):
                errors.append(FieldError(f"{npath}.{key}", "unknown field"))
            count = int(
                _number(raw_node.get("count"), f"{npath}.count", errors, default=1, integer=True)
            )
            gpu_type = _gpu(raw_node.get("gpu_type"), f"{npath}.gpu_type", errors)
            gpus = int(
                _number(
                    raw_node.get("gpus_per_node"), f"{npath}.gpus_per_node", errors, integer=True
                )
            )
            gpu_mem = _number(
                raw_node.get("gpu_memory_gib"),
                f"{npath}.gpu_memory_gib",
                errors,
                default=_catalog_memory_gib(gpu_type),
            )
            cpu = _number(raw_node.get("cpu"), f"{npath}.cpu", errors, default=0)
            mem = _number(raw_node.get("memory_gib"), f"{npath}.memory_gib", errors, default=0)
            stem = raw_node.get("name") or f"{name}-g{ni}"
            node_labels = _node_labels(raw_node.get("labels"), f"{npath}.labels", errors)
            for k in range(count):
                if node_labels:
                    labels[(name, f"{stem}-{k:03d}")] = node_labels
                nodes.append(
                    Node(
                        cluster=name,
                        name=f"{stem}-{k:03d}",
                        gpu_type=gpu_type,
                        gpus=gpus,
                        free_gpus=float(gpus),
                        gpu_memory_gib=gpu_mem,
                        cpu=cpu,
                        free_cpu=cpu,
                        memory_gib=mem,
                        free_memory_gib=mem,
                    )
                )
        location = raw_cluster.get("location", "")
        clusters.append(Cluster(name=name, nodes=tuple(nodes), location=str(location or "")))
    bandwidth = _bandwidth(doc.get("bandwidth_gbps"), names, errors)
    if errors:
        raise InvalidSpec(errors, where=where)
    return ClusterSet(
        clusters=tuple(clusters),
        bandwidth_gbps=bandwidth,
        reference_gpu=reference,
        labels=MappingProxyType(labels),
    )


def _bandwidth(
    raw: Any, names: set[str], errors: list[FieldError]
) -> Mapping[str, Mapping[str, float]]:
    links: dict[str, dict[str, float]] = {}
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, Mapping):
        errors.append(
            FieldError("bandwidth_gbps", "must be a mapping of cluster -> {cluster: Gbps}")
        )
        return MappingProxyType({})
    for src, row in raw.items():
        if src not in names:
            errors.append(FieldError(f"bandwidth_gbps.{src}", "unknown cluster"))
            continue
        if not isinstance(row, Mapping):
            errors.append(
                FieldError(f"bandwidth_gbps.{src}", "must be a mapping of cluster -> Gbps")
            )
            continue
        for dst, gbps in row.items():
            path = f"bandwidth_gbps.{src}.{dst}"
            if dst not in names:
                errors.append(FieldError(path, "unknown cluster"))
                continue
            value = _number(gbps, path, errors)
            if value <= 0:
                if not errors or errors[-1].path != path:
                    errors.append(FieldError(path, "must be positive"))
                continue
            for a, b in ((src, dst), (dst, src)):
                previous = links.setdefault(a, {}).get(b)
                if previous is not None and previous != value:
                    errors.append(FieldError(path, f"conflicts with {b}->{a} = {previous:g}"))
                links[a][b] = value
    return MappingProxyType({k: MappingProxyType(v) for k, v in links.items()})


def read_clusters(path: str | Path) -> ClusterSet:
    """Load a cluster YAML file; InvalidSpec names the file and field path."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidSpec(f"cannot read cluster file: {exc.strerror}", where=str(path)) from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidSpec(f"not YAML: {exc}", where=str(path)) from exc
    return parse_clusters(doc, where=str(path))
