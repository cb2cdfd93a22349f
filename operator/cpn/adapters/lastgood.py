"""The last accepted policy, kept in a ConfigMap the operator owns.

The live policy ConfigMap is the admins'; when they break it the operator keeps
the last policy it accepted. So that this survives a restart, each accepted
document is copied (as written, with the version it had) into
``<policy ConfigMap>-last-good`` in the operator's namespace; an operator that
starts while the live one is broken or gone starts from that copy.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.adapters.kube import JsonApi
from cpn.api import constants as k
from cpn.api.policy import CONFIGMAP_KEY
from cpn.runtime.ports import SavedPolicy

ANNOTATION_VERSION = "cpn.io/policy-version"
ANNOTATION_ACCEPTED = "cpn.io/accepted-at"


#: The saved copy (the document, its version when accepted, when, and the ConfigMap).
Saved = SavedPolicy


def save(api: client.ApiClient, namespace: str, name: str, text: str, version: str) -> None:
    """Write the copy (create it, or replace what is there). Blocking: call from a thread."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {k.LABEL_MANAGED: k.MANAGED_BY},
            "annotations": {
                ANNOTATION_VERSION: version,
                ANNOTATION_ACCEPTED: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        },
        "data": {CONFIGMAP_KEY: text},
    }
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    JsonApi(api).put_or_create(configmaps, name, body, _request_timeout=10)


def load(api: client.ApiClient, namespace: str, name: str) -> Saved | None:
    """The saved copy, or None when there is none. Blocking: call from a thread."""
    path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
    try:
        body = JsonApi(api).call("GET", path, _request_timeout=10)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    text = (body.get("data") or {}).get(CONFIGMAP_KEY)
    if not isinstance(text, str):
        return None
    return Saved(
        text=text,
        version=str(annotations.get(ANNOTATION_VERSION, "")),
        accepted_at=str(annotations.get(ANNOTATION_ACCEPTED, "")),
        body={"apiVersion": "v1", "kind": "ConfigMap", **body},
    )
