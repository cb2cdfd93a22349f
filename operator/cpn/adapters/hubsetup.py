"""What an admin does on a hub before the operator runs, as API writes.

:func:`register` creates the operator's namespace, its ConfigMaps (the policy), the
member kubeconfig Secrets and the MemberClusters. Running it again on the same hub
is harmless: a namespace that exists is kept, a ConfigMap or Secret that exists is
replaced, and a MemberCluster that exists gets the spec given (merged into its own, so a
second registration with another link bandwidth takes effect; its status is kept).
:mod:`cpn.cli.devbed` builds the objects for the test bed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.adapters.kube import client_from_kubeconfig
from cpn.api import constants as k

Body = Mapping[str, Any]


def _create(create: Callable[..., Any], *args: Any) -> bool:
    """Create; False when the object already exists (409), any other refusal raises."""
    try:
        create(*args)
    except ApiException as err:
        if err.status != 409:
            raise
        return False
    return True


def _upsert(
    create: Callable[..., Any], replace: Callable[..., Any], namespace: str, body: Body
) -> None:
    if not _create(create, namespace, body):
        replace(body["metadata"]["name"], namespace, body)


def register(
    kubeconfig: str,
    namespace: str,
    *,
    configmaps: Sequence[Body] = (),
    secrets: Sequence[Body] = (),
    members: Sequence[Body] = (),
) -> None:
    """Write the namespace, then ``configmaps`` and ``secrets`` in it, then ``members``."""
    api = client_from_kubeconfig(kubeconfig)
    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    try:
        _create(core.create_namespace, {"metadata": {"name": namespace}})
        for configmap in configmaps:
            _upsert(
                core.create_namespaced_config_map,
                core.replace_namespaced_config_map,
                namespace,
                configmap,
            )
        for secret in secrets:
            _upsert(
                core.create_namespaced_secret, core.replace_namespaced_secret, namespace, secret
            )
        for member in members:
            if not _create(
                custom.create_cluster_custom_object, k.GROUP, k.VERSION, k.MEMBER_PLURAL, member
            ):
                custom.patch_cluster_custom_object(
                    k.GROUP,
                    k.VERSION,
                    k.MEMBER_PLURAL,
                    member["metadata"]["name"],
                    {"spec": member["spec"]},
                )
    finally:
        api.close()
