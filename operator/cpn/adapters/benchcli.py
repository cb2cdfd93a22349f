"""What ``cpn benchmark run`` reads and writes: a MemberCluster and its GPU nodes (through
the kubeconfig in its Secret, as the operator connects), and new GPUBenchmarks on the hub.

A refusal of the hub is a :class:`~cpn.adapters.hubcli.HubAnswer`; a member that cannot be
used or reached is a :class:`~cpn.adapters.hubcli.HubError` worded for the user (so that
:func:`~cpn.adapters.hubcli.on_hub` never blames the hub for the member).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from cpn.adapters.hubcli import HubAnswer, HubError
from cpn.adapters.kube import JsonApi, client_from_kubeconfig, member_kubeconfig
from cpn.api import constants as k
from predictor.catalog import UnknownName, canonical_gpu


class UnknownCluster(Exception):
    """No MemberCluster of that name; ``known`` lists the ones there are."""

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(name)
        self.name = name
        self.known = known


def read_member(api: client.ApiClient, name: str) -> dict[str, Any]:
    """The MemberCluster ``name``; :class:`UnknownCluster` when there is none."""
    custom: Any = client.CustomObjectsApi(api)
    try:
        body: dict[str, Any] = custom.get_cluster_custom_object(
            k.GROUP, k.VERSION, k.MEMBER_PLURAL, name
        )
    except ApiException as err:
        if err.status != 404:
            raise HubAnswer.of(err) from err
        try:
            listed = custom.list_cluster_custom_object(k.GROUP, k.VERSION, k.MEMBER_PLURAL)
        except ApiException as again:
            raise HubAnswer.of(again) from again
        known = sorted(i["metadata"]["name"] for i in listed.get("items") or [])
        raise UnknownCluster(name, known) from None
    return body


def _member_api(api: client.ApiClient, member: Mapping[str, Any], namespace: str) -> Any:
    name = member["metadata"]["name"]
    spec = member.get("spec") or {}
    secret_name = str((spec.get("kubeconfigSecret") or {}).get("name", ""))
    try:
        text = member_kubeconfig(JsonApi(api), spec, namespace)
    except ApiException as err:
        raise HubError(
            f"cannot read member {name}'s kubeconfig Secret {namespace}/{secret_name} "
            f"({err.status} {err.reason})"
        ) from None
    except ValueError as why:
        raise HubError(
            f"member {name}'s kubeconfig Secret {secret_name} is not usable: {why}"
        ) from None
    try:
        return client_from_kubeconfig(text)
    except (config.ConfigException, ValueError, TypeError) as err:
        raise HubError(f"member {name}'s kubeconfig is not usable: {err}") from None


def gpu_nodes(api: client.ApiClient, member: Mapping[str, Any], namespace: str) -> dict[str, str]:
    """The member's GPU nodes as the operator counts them (allocatable GPUs and a GPU
    product it knows): node -> GPU type. ``namespace``: where the kubeconfig Secret is."""
    name = member["metadata"]["name"]
    member_api = _member_api(api, member, namespace)
    try:
        core: Any = client.CoreV1Api(member_api)
        nodes: list[Any] = core.list_node(_request_timeout=30).items
    except ApiException as err:
        why = f"({err.status} {err.reason})"
        raise HubError(f"member {name} refused to list its nodes {why}") from None
    except HTTPError as err:
        host = member_api.configuration.host
        detail = str(getattr(err, "reason", None) or err).rsplit(": ", 1)[-1].strip()
        raise HubError(f"cannot reach member {name} at {host}: {detail}") from None
    found: dict[str, str] = {}
    for node in nodes:
        labels = node.metadata.labels or {}
        allocatable = (node.status.allocatable if node.status else None) or {}
        product = labels.get(k.GPU_PRODUCT_LABEL)
        if not product or str(allocatable.get(k.GPU_RESOURCE, "0")) in {"0", ""}:
            continue
        try:
            found[node.metadata.name] = canonical_gpu(product)
        except UnknownName:
            continue
    return found


def create_benchmark(api: client.ApiClient, body: Mapping[str, Any]) -> dict[str, Any]:
    """Create a GPUBenchmark; the object the hub made (its name, when generated)."""
    custom: Any = client.CustomObjectsApi(api)
    try:
        made: dict[str, Any] = custom.create_cluster_custom_object(
            k.GROUP, k.VERSION, k.BENCHMARK_PLURAL, body
        )
    except ApiException as err:
        raise HubAnswer.of(err) from err
    return made
