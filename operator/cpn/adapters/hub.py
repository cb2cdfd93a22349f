"""The hub cluster through the Kubernetes client: the runtime's :class:`~cpn.runtime.ports.Hub`.

Watches of Namespaces, AIJobs, GPUBenchmarks and the policy ConfigMap
(:class:`~cpn.adapters.kube.Informer`), AIJob, MemberCluster and GPUBenchmark status patches,
GPUBenchmarks created, Events, the last good policy, and connecting to a
member from the kubeconfig in its Secret. The client's exceptions stay here: a failed call
raises :class:`~cpn.runtime.ports.CallFailed`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException

from cpn.adapters import lastgood
from cpn.adapters.events import post_event
from cpn.adapters.kube import (
    Informer,
    JsonApi,
    call_failed,
    client_from_kubeconfig,
    member_kubeconfig,
)
from cpn.adapters.members import Member, MemberSpec
from cpn.adapters.prometheus import MetricsSource
from cpn.api import constants as k
from cpn.api.groupquota import BOUNDS_CONFIGMAP, GROUPQUOTA_PLURAL, bounds_configmap
from cpn.config import OperatorConfig
from cpn.runtime.ports import MemberUnusable, MemberWatchFn, ProbeFn, SavedPolicy, WatchFn


class KubeHub:
    """The hub, for one operator process. ``threads``: how many threads share its client's
    connections (the runtime's dispatch and write pools)."""

    def __init__(self, api: client.ApiClient, config: OperatorConfig, *, threads: int) -> None:
        self.api = api
        self.config = config
        # Any: the client's typed signatures want model objects; we pass plain dicts.
        self.custom: Any = client.CustomObjectsApi(api)
        self.core = JsonApi(api)
        widen_pool(api, threads)

    # -- watches --------------------------------------------------------------------------
    def watch_namespaces(self, on_event: WatchFn) -> Informer:
        namespaces = self.core.lister("/api/v1/namespaces")
        return Informer("hub/namespaces", self.api, namespaces, on_event).start()

    def watch_aijobs(self, on_event: WatchFn) -> Informer:
        """Every AIJob, listed page by page (100,000 of them take tens of seconds to list)."""
        return self._watch_cpn(k.AIJOB_PLURAL, on_event, paged=True)

    def _watch_cpn(self, plural: str, on_event: WatchFn, *, paged: bool = False) -> Informer:
        """Every object of one of cpn's kinds, in every namespace."""
        return Informer(
            f"hub/{plural}",
            self.api,
            self.custom.list_cluster_custom_object,
            on_event,
            paged=paged,
            group=k.GROUP,
            version=k.VERSION,
            plural=plural,
        ).start()

    def watch_policy(self, namespace: str, name: str, on_event: WatchFn) -> Informer:
        """The one policy ConfigMap (namespaced, by name: least privilege)."""
        return Informer(
            "policy",
            self.api,
            self.core.lister(f"/api/v1/namespaces/{namespace}/configmaps"),
            on_event,
            field_selector=f"metadata.name={name}",
        ).start()

    # -- writes and reads (blocking: from worker threads) ----------------------------------
    def patch_aijob_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        try:
            response = self.custom.patch_namespaced_custom_object_status(
                k.GROUP,
                k.VERSION,
                namespace,
                k.AIJOB_PLURAL,
                name,
                {"status": patch},
                _preload_content=False,  # the answer is the whole object: read, not parsed
            )
        except ApiException as err:
            raise call_failed(err) from err
        response.data  # read it all, so the connection goes back to the pool  # noqa: B018

    def patch_member_status(self, name: str, status: Mapping[str, Any]) -> None:
        self._patch_status(k.MEMBER_PLURAL, name, status)

    def _patch_status(self, plural: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the status of a cluster-scoped object of cpn's."""
        try:
            self.custom.patch_cluster_custom_object_status(
                k.GROUP, k.VERSION, plural, name, {"status": status}
            )
        except ApiException as err:
            raise call_failed(err) from err

    def watch_benchmarks(self, on_event: WatchFn) -> Informer:
        return self._watch_cpn(k.BENCHMARK_PLURAL, on_event)

    # -- delegated quotas (GroupQuotas and the group bounds the admission policy reads) ----
    def watch_groupquotas(self, on_event: WatchFn) -> Informer:
        return self._watch_cpn(GROUPQUOTA_PLURAL, on_event)

    def patch_groupquota_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        try:
            self.custom.patch_namespaced_custom_object_status(
                k.GROUP, k.VERSION, namespace, GROUPQUOTA_PLURAL, name, {"status": status}
            )
        except ApiException as err:
            if err.status != 404:  # deleted meanwhile
                raise call_failed(err) from err

    def put_group_bounds(self, namespace: str, data: Mapping[str, str]) -> None:
        """Create or replace the ``cpn-group-bounds`` ConfigMap in ``namespace`` (cpn's)."""
        body = bounds_configmap(namespace, data)
        configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
        try:
            self.core.put_or_create(configmaps, BOUNDS_CONFIGMAP, body)
        except ApiException as err:
            raise call_failed(err) from err

    def create_benchmark(self, body: Mapping[str, Any]) -> None:
        """Create a GPUBenchmark; one that exists already counts as created."""
        try:
            response = self.custom.create_cluster_custom_object(
                k.GROUP, k.VERSION, k.BENCHMARK_PLURAL, body, _preload_content=False
            )
            response.release_conn()
        except ApiException as err:
            if err.status != 409:
                raise call_failed(err) from err

    def patch_benchmark_status(self, name: str, status: Mapping[str, Any]) -> None:
        self._patch_status(k.BENCHMARK_PLURAL, name, status)

    def list_members(self) -> list[Mapping[str, Any]]:
        try:
            result = self.custom.list_cluster_custom_object(k.GROUP, k.VERSION, k.MEMBER_PLURAL)
        except ApiException as err:
            raise call_failed(err) from err
        return list(result.get("items") or [])

    def post_event(self, obj: Mapping[str, Any], reason: str, message: str, warning: bool) -> None:
        post_event(self.api, obj, reason, message, warning)

    def save_last_good(self, namespace: str, name: str, text: str, version: str) -> None:
        try:
            lastgood.save(self.api, namespace, name, text, version)
        except ApiException as err:
            raise call_failed(err) from err

    def load_last_good(self, namespace: str, name: str) -> SavedPolicy | None:
        try:
            return lastgood.load(self.api, namespace, name)
        except ApiException as err:
            raise call_failed(err) from err

    # -- members -------------------------------------------------------------------------
    def connect_member(
        self, name: str, spec: Mapping[str, Any], on_event: MemberWatchFn, on_probe: ProbeFn
    ) -> Member:
        try:
            api = client_from_kubeconfig(member_kubeconfig(self.core, spec, self.config.namespace))
            widen_pool(api, self.config.dispatch_workers)
        except (ApiException, ValueError, ConfigException) as err:
            raise MemberUnusable(getattr(err, "reason", None) or str(err)) from err
        member_spec = MemberSpec(
            name=name,
            namespace=spec.get("namespace") or "cpn-jobs",
            prometheus_url=spec.get("prometheusURL") or "",
            location=spec.get("location") or "",
            bandwidth_gbps={str(a): float(b) for a, b in (spec.get("bandwidthGbps") or {}).items()},
            unschedulable=bool(spec.get("unschedulable", False)),
        )
        return Member(member_spec, api, self.config.hub, on_event, on_probe)

    def metrics_source(self, url: str, max_age_s: float) -> MetricsSource:
        return MetricsSource(url, max_age_s=max_age_s)


def widen_pool(api: client.ApiClient, size: int) -> None:
    """Let ``size`` threads share the client's connections (urllib3 keeps 10 per host by
    default and drops the rest, so bursts opened a new TLS connection per call)."""
    manager = getattr(api.rest_client, "pool_manager", None)
    if manager is not None:
        manager.connection_pool_kw["maxsize"] = max(
            size, manager.connection_pool_kw.get("maxsize") or 0
        )
