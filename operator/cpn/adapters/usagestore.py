"""The usage store: one ConfigMap per UTC day in the operator's namespace
(:mod:`cpn.api.usage`), read by the operator and ``cpn usage``, written by the operator.

Writes are optimistic: a day is replaced with the ``resourceVersion`` it was read at, so
a concurrent writer (another replica mid fail-over) makes the write fail with a conflict
instead of losing its rows; the caller reads again and retries. Failed calls raise
:class:`~cpn.runtime.ports.CallFailed`.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.adapters.kube import call_failed
from cpn.api.usage import LABEL_USAGE, UsageFormatError, configmap, configmap_name, decode
from cpn.core.accounting import DayUsage

log = logging.getLogger(__name__)

TIMEOUT_S = 10


class KubeUsageStore:
    """Days of usage in ``namespace`` of the cluster ``api`` talks to. Blocking calls."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.core: Any = client.CoreV1Api(api)

    def list_raw(self) -> list[tuple[str, dict[str, str], str]]:
        """Every usage ConfigMap as (name, data, resourceVersion). Raises ApiException."""
        result = self.core.list_namespaced_config_map(
            self.namespace, label_selector=f"{LABEL_USAGE}=day", _request_timeout=TIMEOUT_S
        )
        return [
            (cm.metadata.name, dict(cm.data or {}), cm.metadata.resource_version)
            for cm in result.items
        ]

    def days(self) -> list[tuple[DayUsage, str]]:
        """Every readable day, with its resourceVersion; an unreadable one is logged and
        left out (and not written over: :meth:`read` refuses it)."""
        try:
            raw = self.list_raw()
        except ApiException as err:
            raise call_failed(err) from err
        out = []
        for name, data, version in raw:
            try:
                out.append((decode(name, data), version))
            except UsageFormatError as err:
                log.error("%s; left out of the usage totals", err)
        return out

    def read(self, day: str) -> tuple[DayUsage, str]:
        """A day and its resourceVersion ("" and no usage when it has no ConfigMap yet).
        Raises :class:`UsageFormatError` for one that cannot be read."""
        name = configmap_name(day)
        try:
            cm = self.core.read_namespaced_config_map(
                name, self.namespace, _request_timeout=TIMEOUT_S
            )
        except ApiException as err:
            if err.status == 404:
                return DayUsage(day), ""
            raise call_failed(err) from err
        return decode(name, dict(cm.data or {})), cm.metadata.resource_version

    def write(self, day: DayUsage, version: str) -> None:
        """Create the day (``version`` "") or replace it as read at ``version``; a conflict
        (changed or created meanwhile) raises CallFailed with status 409."""
        body = configmap(day, self.namespace, version)
        try:
            if version:
                self.core.replace_namespaced_config_map(
                    body["metadata"]["name"], self.namespace, body, _request_timeout=TIMEOUT_S
                )
            else:
                self.core.create_namespaced_config_map(
                    self.namespace, body, _request_timeout=TIMEOUT_S
                )
        except ApiException as err:
            raise call_failed(err) from err
