"""Member clusters: their clients, informers and inventory.

A :class:`Member` watches its cluster's nodes, bound pods and cpn's Jobs and
turns them into a core :class:`~cpn.core.model.Cluster`. The API's own
accounting (requests of bound, unfinished pods) decides what is free; pods
that belong to cpn's Jobs are left to the hub's store, which knows about Jobs
whose pods do not exist yet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.adapters.kube import Informer, JsonApi, call_failed
from cpn.adapters.probe import ProbeFn, Prober
from cpn.api import constants as k
from cpn.api.quantity import parse_quantity
from cpn.core.capacity import Usage
from cpn.core.domains import CONFLICT, node_domain
from cpn.core.model import Cluster, Node
from cpn.core.policy import Domain
from predictor.catalog import UnknownName, canonical_gpu

log = logging.getLogger(__name__)

_GIB = float(1 << 30)
_DONE_POD_PHASES = frozenset({"Succeeded", "Failed"})

#: (member name, kind: "nodes"|"pods"|"jobs", event type, object or None)
MemberEventFn = Callable[[str, str, str, Mapping[str, Any] | None], None]


def _qty(value: Any, scale: float = 1.0) -> float:
    if value is None:
        return 0.0
    try:
        return float(parse_quantity(value)) / scale
    except (ValueError, TypeError):
        return 0.0


def pod_usage(pod: Mapping[str, Any]) -> Usage:
    """Requests of a pod (GPU limits count: extended resources have requests = limits)."""
    usage = Usage()
    for container in (pod.get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        requests = res.get("requests") or {}
        limits = res.get("limits") or {}
        usage.gpus += _qty(limits.get(k.GPU_RESOURCE, requests.get(k.GPU_RESOURCE)))
        usage.cpu += _qty(requests.get("cpu", limits.get("cpu")))
        usage.memory_gib += _qty(requests.get("memory", limits.get("memory")), _GIB)
    return usage


@dataclass(slots=True)
class MemberSpec:
    """What the MemberCluster object says."""

    name: str
    namespace: str = "cpn-jobs"
    prometheus_url: str = ""
    location: str = ""
    bandwidth_gbps: Mapping[str, float] = field(default_factory=dict)
    unschedulable: bool = False


class Member:
    """One member cluster as the hub sees it."""

    def __init__(
        self,
        spec: MemberSpec,
        api: client.ApiClient,
        hub: str,
        on_event: MemberEventFn,
        on_probe: ProbeFn | None = None,
    ) -> None:
        self.spec = spec
        self.api = api
        self.hub = hub
        self.nodes: dict[str, Mapping[str, Any]] = {}
        self.pods: dict[str, tuple[str, Usage]] = {}  # others' pods: uid -> (node, usage)
        self.jobs: dict[str, Mapping[str, Any]] = {}  # member Job name -> Job
        self._on_event = on_event
        self.rest = JsonApi(api)
        self._jobs_path = f"/apis/batch/v1/namespaces/{spec.namespace}/jobs"
        name = spec.name
        self.informers = [
            Informer(
                f"{name}/nodes", api, self.rest.lister("/api/v1/nodes"), self._handler("nodes")
            ),
            Informer(
                f"{name}/pods",
                api,
                self.rest.lister("/api/v1/pods"),
                self._handler("pods"),
                # Bound pods that are not cpn's: cpn's own are counted from its records, so
                # the API server need not send their events at all.
                field_selector="spec.nodeName!=",
                label_selector=f"!{k.LABEL_UID}",
            ),
            Informer(
                f"{name}/jobs",
                api,
                self.rest.lister(self._jobs_path),
                self._handler("jobs"),
                label_selector=f"{k.LABEL_HUB}={hub}",
            ),
        ]
        # Its API server probed on a schedule of its own (None: not probed, as in tests of
        # the inventory alone).
        self.prober = Prober(name, api, on_probe) if on_probe is not None else None
        self.unknown_types: set[str] = set()
        self._parsed: dict[str, tuple[str | None, Node | None]] = {}  # name -> (version, node)
        self._domains: tuple[Domain, ...] = ()  # the policy's domains the parsed nodes are in
        # name -> (parsed node, what is free on it, the node with it): the last answer
        self._current: dict[str, tuple[Node, tuple[float | None, ...], Node]] = {}

    @property
    def name(self) -> str:
        return self.spec.name

    def start(self) -> None:
        if self.prober is not None:
            self.prober.start()
        for informer in self.informers:
            informer.start()

    def stop(self) -> None:
        if self.prober is not None:
            self.prober.stop()
        for informer in self.informers:
            informer.stop()

    @property
    def probe_overdue_s(self) -> float:
        """Seconds without a probe result that count as a missed probe."""
        return self.prober.overdue_s if self.prober is not None else 0.0

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def ready(self, grace_s: float) -> tuple[bool, str]:
        """Whether its watches are listed and running, and why not. A watch that broke is
        given ``grace_s`` to re-list before the member counts as unreachable (watches end
        and resume). Whether its API server answers at all is the probe's part
        (:class:`~cpn.adapters.probe.Prober`)."""
        now = time.monotonic()
        for informer in self.informers:
            if not informer.synced.is_set():
                return False, f"{informer.name}: not listed yet {informer.last_error}".strip()
            if not informer.healthy and now - informer.failed_at > grace_s:
                return False, f"{informer.name}: {informer.last_error or 'unreachable'}"
        return True, ""

    def _handler(self, kind: str) -> Callable[[str, Mapping[str, Any] | None], None]:
        def handle(event: str, obj: Mapping[str, Any] | None) -> None:
            self._apply(kind, event, obj)
            self._on_event(self.name, kind, event, obj)

        return handle

    def _apply(self, kind: str, event: str, obj: Mapping[str, Any] | None) -> None:
        """Update the mirror (runs on the informer's thread; dict assignments are atomic)."""
        if obj is None:
            return
        if event == "LIST":
            items = obj.get("items") or []
            if kind == "nodes":
                self.nodes = {i["metadata"]["name"]: i for i in items}
            elif kind == "pods":
                self.pods = {}
                for pod in items:
                    self._apply("pods", "ADDED", pod)
            else:
                self.jobs = {i["metadata"]["name"]: i for i in items}
            return
        meta = obj.get("metadata") or {}
        if kind == "nodes":
            if event == "DELETED":
                self.nodes.pop(meta["name"], None)
            else:
                self.nodes[meta["name"]] = obj
        elif kind == "jobs":
            if event == "DELETED":
                self.jobs.pop(meta["name"], None)
            else:
                self.jobs[meta["name"]] = obj
        else:
            uid = meta.get("uid", "")
            phase = (obj.get("status") or {}).get("phase")
            if event == "DELETED" or phase in _DONE_POD_PHASES:
                self.pods.pop(uid, None)
            else:
                node = (obj.get("spec") or {}).get("nodeName") or ""
                self.pods[uid] = (node, pod_usage(obj))

    def cluster(
        self,
        cpn_usage: Mapping[str, Usage],
        *,
        ready: bool,
        cpu_util: Mapping[str, float] | None = None,
        domains: tuple[Domain, ...] = (),
    ) -> Cluster:
        """The core view: nodes with GPUs, free = allocatable - others' pods - cpn's jobs,
        each in its domain of ``domains`` (the policy's)."""
        if domains is not self._domains:  # a new policy: every node's domain resolved again
            self._domains = domains
            self._parsed, self._current = {}, {}
        other: dict[str, Usage] = {}
        for node_name, usage in list(self.pods.values()):
            total = other.setdefault(node_name, Usage())
            total.gpus += usage.gpus
            total.cpu += usage.cpu
            total.memory_gib += usage.memory_gib
        nodes = []
        if len(self._parsed) > len(self.nodes):  # forget deleted nodes
            self._parsed = {n: v for n, v in self._parsed.items() if n in self.nodes}
            self._current = {n: v for n, v in self._current.items() if n in self.nodes}
        for name, obj in sorted(self.nodes.items()):
            node = self._node(
                name,
                obj,
                other.get(name, Usage()),
                cpn_usage.get(name, Usage()),
                (cpu_util or {}).get(name),
            )
            if node is not None:
                nodes.append(node)
        return Cluster(
            name=self.name,
            nodes=tuple(nodes),
            ready=ready and not self.spec.unschedulable,
            location=self.spec.location,
        )

    def _node(
        self, name: str, obj: Mapping[str, Any], other: Usage, ours: Usage, cpu_util: float | None
    ) -> Node | None:
        """The node with what is free on it now; its fixed facts and its domain are parsed
        once per version of the Node object (every cycle asks for every node)."""
        version = (obj.get("metadata") or {}).get("resourceVersion")
        cached = self._parsed.get(name)
        if cached is None or cached[0] != version or version is None:
            cached = (version, self._parse_node(name, obj))
            self._parsed[name] = cached
        node = cached[1]
        if node is None:
            return None
        free = (
            node.gpus - other.gpus - ours.gpus,
            node.cpu - other.cpu - ours.cpu,
            node.memory_gib - other.memory_gib - ours.memory_gib,
            cpu_util,
        )
        last = self._current.get(name)
        if last is not None and last[0] is node and last[1] == free:
            return last[2]  # nothing moved on it since the last cycle
        current = replace(
            node, free_gpus=free[0], free_cpu=free[1], free_memory_gib=free[2], cpu_util=free[3]
        )
        self._current[name] = (node, free, current)
        return current

    def _parse_node(self, name: str, obj: Mapping[str, Any]) -> Node | None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        product = labels.get(k.GPU_PRODUCT_LABEL)
        status = obj.get("status") or {}
        alloc = status.get("allocatable") or {}
        gpus = int(_qty(alloc.get(k.GPU_RESOURCE)))
        if not product or gpus <= 0:
            return None
        try:
            gpu_type = canonical_gpu(product)
        except UnknownName:
            if product not in self.unknown_types:
                log.warning(
                    "member %s node %s: unknown GPU product %r; node ignored",
                    self.name,
                    name,
                    product,
                )
                self.unknown_types.add(product)
            return None
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        cpu = _qty(alloc.get("cpu"))
        memory = _qty(alloc.get("memory"), _GIB)
        domain = node_domain(self._domains, self.name, labels)
        if CONFLICT in domain:
            log.warning(
                "member %s node %s: selected by domains %s; no job is placed on it until "
                "the policy's domains are made exclusive",
                self.name,
                name,
                " and ".join(domain.split(CONFLICT)),
            )
        return Node(
            cluster=self.name,
            name=name,
            gpu_type=gpu_type,
            gpus=gpus,
            free_gpus=gpus,
            gpu_memory_gib=_qty(labels.get(k.GPU_MEMORY_LABEL)) / 1024.0,
            cpu=cpu,
            free_cpu=cpu,
            memory_gib=memory,
            free_memory_gib=memory,
            schedulable=ready and not (obj.get("spec") or {}).get("unschedulable", False),
            domain=domain,
        )

    # -- writes (called from worker threads) ---------------------------------------------
    def create_job(self, manifest: Mapping[str, Any]) -> str:
        """Create a member Job; AlreadyExists counts as success. Returns the Job's uid or "".
        A failure the API server answers raises :class:`~cpn.runtime.ports.CallFailed`."""
        try:
            return self._create_job(manifest)
        except ApiException as err:
            raise call_failed(err) from err

    def _create_job(self, manifest: Mapping[str, Any]) -> str:
        namespace = manifest["metadata"]["namespace"]
        try:
            return self._create(namespace, manifest)
        except ApiException as err:
            if err.status == 409:
                return ""
            if err.status != 404:
                raise
        # The namespace is missing: create it (concurrent dispatches race to; fine), retry once.
        try:
            body = {"metadata": {"name": namespace}}
            self.rest.call("POST", "/api/v1/namespaces", body, _request_timeout=30)
        except ApiException as err:
            if err.status != 409:
                raise
        try:
            return self._create(namespace, manifest)
        except ApiException as err:
            if err.status == 409:
                return ""
            raise

    def _create(self, namespace: str, manifest: Mapping[str, Any]) -> str:
        """Create the Job and return its uid, read from the JSON (no client model)."""
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
        created = self.rest.call("POST", path, manifest, _request_timeout=30)
        return str(created["metadata"]["uid"])

    def termination_messages(self, job: str) -> list[str]:
        """The termination messages of the containers of a member Job's pods (a GPU
        benchmark's result), in pod then container order; "" for one that left none."""
        try:
            pods = self.rest.list(
                f"/api/v1/namespaces/{self.spec.namespace}/pods",
                label_selector=f"job-name={job}",
                _request_timeout=30,
            )
        except ApiException as err:
            raise call_failed(err) from err
        out = []
        for pod in pods.get("items") or []:
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                ended = (status.get("state") or {}).get("terminated") or {}
                out.append(str(ended.get("message") or ""))
        return out

    def delete_job(self, name: str) -> None:
        """Delete a member Job and its pods; a missing Job counts as deleted."""
        try:
            self.rest.call(
                "DELETE",
                f"{self._jobs_path}/{name}",
                propagation_policy="Background",
                _request_timeout=30,
            )
        except ApiException as err:
            if err.status != 404:
                raise call_failed(err) from err
