"""What ``cpn cancel|suspend|resume|rerun`` do on the hub: exactly the calls kubectl makes
(delete the AIJob, merge-patch its ``spec.suspend``, create a copy), as whoever the
kubeconfig (and ``--as``) names, so RBAC decides. A refusal is an :class:`ActionRefused`
carrying the API server's own message (e.g. its 403 naming the user, verb and namespace).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.api import constants as k
from cpn.api.rerun import rerun_body


class ActionRefused(Exception):
    """The hub refused the call: its HTTP status and its own message."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(f"{message} ({status})")
        self.status = status
        self.message = message

    @classmethod
    def of(cls, err: ApiException) -> ActionRefused:
        message = str(err.reason or "")
        try:
            body = json.loads(err.body or "{}")
        except (TypeError, ValueError):
            body = {}
        if isinstance(body, Mapping) and body.get("message"):
            message = str(body["message"])
        return cls(err.status, message)


def impersonate(api: client.ApiClient, user: str | None, group: str | None) -> None:
    """Act as ``user`` (and ``group``), as kubectl's ``--as`` and ``--as-group`` do."""
    if user:
        api.set_default_header("Impersonate-User", user)
    if group:
        api.set_default_header("Impersonate-Group", group)


class AIJobActions:
    """The four verbs on one hub."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom: Any = client.CustomObjectsApi(api)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(k.GROUP, k.VERSION, *args, **kwargs)
        except ApiException as err:
            raise ActionRefused.of(err) from err

    def cancel(self, namespace: str, name: str) -> None:
        """Delete the AIJob (cpn stops its member Job)."""
        self._call(self.custom.delete_namespaced_custom_object, namespace, k.AIJOB_PLURAL, name)

    def set_suspend(self, namespace: str, name: str, suspend: bool) -> None:
        """Merge-patch ``spec.suspend``."""
        self._call(
            self.custom.patch_namespaced_custom_object,
            namespace,
            k.AIJOB_PLURAL,
            name,
            {"spec": {"suspend": suspend}},
        )

    def rerun(self, namespace: str, name: str) -> str:
        """Create a copy of the AIJob (a new one, queued afresh); returns its name."""
        body = self._call(self.custom.get_namespaced_custom_object, namespace, k.AIJOB_PLURAL, name)
        created = self._call(
            self.custom.create_namespaced_custom_object,
            namespace,
            k.AIJOB_PLURAL,
            rerun_body(body),
        )
        return str(created["metadata"]["name"])
