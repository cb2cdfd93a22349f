"""The usage store: ConfigMaps of the operator's namespace, a day slot each and an archive
(:mod:`cpn.api.usage`), read by the operator and ``cpn usage``, written by the operator.

Writes are optimistic: a day is replaced with the ``resourceVersion`` it was read at, so
a concurrent writer (another replica mid fail-over) makes the write fail with a conflict
instead of losing its rows; the caller reads again and retries. Failed calls raise
:class:`~cpn.runtime.ports.CallFailed`.
"""

from __future__ import annotations

from collections.abc import Mapping

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.adapters.kube import JsonApi, call_failed
from cpn.api.usage import LABEL_USAGE, configmap

TIMEOUT_S = 10


class KubeUsageStore:
    """The usage ConfigMaps in ``namespace`` of the cluster ``api`` talks to, as raw
    ``data`` (:mod:`cpn.api.usage` reads and writes it). Blocking calls."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.core = JsonApi(api)
        self._configmaps = f"/api/v1/namespaces/{namespace}/configmaps"

    def list(self) -> list[tuple[str, dict[str, str], str]]:
        """Every usage ConfigMap as (name, data, resourceVersion)."""
        try:
            result = self.core.list(
                self._configmaps, label_selector=LABEL_USAGE, _request_timeout=TIMEOUT_S
            )
        except ApiException as err:
            raise call_failed(err) from err
        return [
            (cm["metadata"]["name"], dict(cm.get("data") or {}), cm["metadata"]["resourceVersion"])
            for cm in result.get("items") or []
        ]

    def read(self, name: str) -> tuple[dict[str, str], str]:
        """A ConfigMap's data and resourceVersion ({} and "" when there is none yet)."""
        try:
            cm = self.core.call("GET", f"{self._configmaps}/{name}", _request_timeout=TIMEOUT_S)
        except ApiException as err:
            if err.status == 404:
                return {}, ""
            raise call_failed(err) from err
        return dict(cm.get("data") or {}), cm["metadata"]["resourceVersion"]

    def write(self, name: str, data: Mapping[str, str], version: str) -> None:
        """Create the ConfigMap (``version`` "") or replace it as read at ``version``; a
        conflict (changed or created meanwhile) raises CallFailed with status 409."""
        body = configmap(name, data, self.namespace, version)
        try:
            if version:
                path = f"{self._configmaps}/{name}"
                self.core.call("PUT", path, body, _request_timeout=TIMEOUT_S)
            else:
                self.core.call("POST", self._configmaps, body, _request_timeout=TIMEOUT_S)
        except ApiException as err:
            raise call_failed(err) from err
