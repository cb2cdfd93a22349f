"""What the one-shot commands that read the hub share (``cpn queue``, ``cpn explain``,
``cpn clusters``).

They find the kubeconfig and the namespace as kubectl does (:func:`kubeconfig_path`,
:func:`hub_namespace`), build a client for it (:func:`hub_api`), read AIJobs with
:func:`get_aijob` and :func:`list_aijobs` and MemberClusters with :func:`list_memberclusters`
(a refusal is a :class:`HubAnswer`), and run under :func:`on_hub`, which turns a missing
or broken kubeconfig, an unreachable hub or a refusal into one line on stderr naming the
file or the server, and exit code 1: never a traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError, MaxRetryError

from cpn.adapters.kube import client_from_kubeconfig
from cpn.api import constants as k
from cpn.api.kubeconfig import context_namespace


class HubError(Exception):
    """A problem with the kubeconfig or the hub, already worded for the user."""


class HubAnswer(Exception):
    """The hub refused or failed one request: its HTTP status and reason."""

    def __init__(self, status: int | None, reason: str | None) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason

    @classmethod
    def of(cls, err: ApiException) -> HubAnswer:
        return cls(err.status, err.reason)


def kubeconfig_path(given: str | None) -> Path:
    """``--kubeconfig``, else the first file of ``$KUBECONFIG``, else ``~/.kube/config``."""
    if given:
        return Path(given)
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    return Path(first) if first else Path.home() / ".kube" / "config"


def _text(given: str | None) -> tuple[Path, str]:
    path = kubeconfig_path(given)
    try:
        return path, path.read_text(encoding="utf-8")
    except OSError as err:
        raise HubError(f"cannot read the kubeconfig {path}: {err.strerror or err}") from None


def hub_namespace(given: str | None) -> str:
    """The namespace of the kubeconfig's current context ("default" when it names none)."""
    return context_namespace(_text(given)[1])


def hub_api(given: str | None) -> client.ApiClient:
    """A client for the hub the kubeconfig's current context points at."""
    path, text = _text(given)
    try:
        api = client_from_kubeconfig(text)
    except (config.ConfigException, yaml.YAMLError, ValueError, TypeError, AttributeError) as err:
        why = " ".join(str(err).split()) or type(err).__name__
        raise HubError(f"the kubeconfig {path} is not usable: {why}") from None
    return api


def get_aijob(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The AIJob ``namespace/name`` as the hub stores it."""
    custom: Any = client.CustomObjectsApi(api)
    try:
        body: dict[str, Any] = custom.get_namespaced_custom_object(
            k.GROUP, k.VERSION, namespace, k.AIJOB_PLURAL, name
        )
    except ApiException as err:
        raise HubAnswer.of(err) from err
    return body


def list_aijobs(api: client.ApiClient, namespace: str | None) -> list[dict[str, Any]]:
    """The AIJobs of ``namespace``, or of every namespace when it is None."""
    return _list(api, k.AIJOB_PLURAL, namespace)


def list_memberclusters(api: client.ApiClient) -> list[dict[str, Any]]:
    """Every MemberCluster (they are cluster-scoped)."""
    return _list(api, k.MEMBER_PLURAL, None)


def _list(api: client.ApiClient, plural: str, namespace: str | None) -> list[dict[str, Any]]:
    custom: Any = client.CustomObjectsApi(api)
    try:
        if namespace:
            result = custom.list_namespaced_custom_object(k.GROUP, k.VERSION, namespace, plural)
        else:
            result = custom.list_cluster_custom_object(k.GROUP, k.VERSION, plural)
    except ApiException as err:
        raise HubAnswer.of(err) from err
    items: list[dict[str, Any]] = result.get("items") or []
    return items


def _unreachable(err: MaxRetryError | HTTPError) -> str:
    pool = getattr(err, "pool", None)
    where = f"{pool.scheme}://{pool.host}:{pool.port}" if pool is not None else "the hub"
    reason = getattr(err, "reason", None) or err
    detail = str(reason).rsplit(": ", 1)[-1].strip()
    return f"cannot reach the hub at {where}: {detail}"


def _refused(err: HubAnswer) -> str:
    what: dict[int | None, str] = {
        401: "does not accept these credentials",
        403: "refused the request",
    }
    return f"the hub {what.get(err.status, 'answered')} ({err.status} {err.reason})"


def on_hub(prog: str, run: Callable[[], int]) -> int:
    """``run()``'s exit code, or 1 after one line ``PROG: what went wrong`` on stderr."""
    try:
        return run()
    except HubError as err:
        message = str(err)
    except MaxRetryError as err:
        message = _unreachable(err)
    except HTTPError as err:
        message = _unreachable(err)
    except HubAnswer as err:
        message = _refused(err)
    except ApiException as err:
        message = _refused(HubAnswer.of(err))
    print(f"{prog}: {message}", file=sys.stderr)
    return 1
