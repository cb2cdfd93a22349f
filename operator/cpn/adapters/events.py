"""Kubernetes Events about AIJobs and the policy, posted with the API client.

Events are how a researcher learns, in ``kubectl describe aijob``, why their
job waits or what happened to it. Posting is best effort: a failure is logged
and never disturbs scheduling.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.adapters.kube import JsonApi

log = logging.getLogger(__name__)

COMPONENT = "cpn"


def event_body(obj: Mapping[str, Any], reason: str, message: str, warning: bool) -> dict[str, Any]:
    """A core/v1 Event about ``obj``."""
    meta = obj.get("metadata") or {}
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {
            "name": f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:16]}",
            "namespace": meta.get("namespace") or "default",
        },
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def post_event(
    api: client.ApiClient, obj: Mapping[str, Any], reason: str, message: str, warning: bool = False
) -> None:
    """Create the Event (blocking; call it from a worker thread)."""
    body = event_body(obj, reason, message, warning)
    path = f"/api/v1/namespaces/{body['metadata']['namespace']}/events"
    try:
        JsonApi(api).call("POST", path, body, _request_timeout=10)
    except ApiException as err:
        log.debug("event %s not posted: %s", reason, err.reason)
