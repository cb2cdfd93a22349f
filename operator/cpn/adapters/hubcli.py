"""What the one-shot commands that read the hub share (``cpn queue``, ``cpn explain``).

They find the kubeconfig and the namespace as kubectl does (:func:`kubeconfig_path`,
:func:`hub_namespace`), build a client for it (:func:`hub_api`), and run under
:func:`on_hub`, which turns a missing or broken kubeconfig, an unreachable hub or a
refusal into one line on stderr naming the file or the server, and exit code 1: never
a traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError, MaxRetryError

from cpn.adapters.kube import client_from_kubeconfig
from cpn.api.kubeconfig import context_namespace


class HubError(Exception):
    """A problem with the kubeconfig or the hub, already worded for the user."""


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


def _unreachable(err: MaxRetryError | HTTPError) -> str:
    pool = getattr(err, "pool", None)
    where = f"{pool.scheme}://{pool.host}:{pool.port}" if pool is not None else "the hub"
    reason = getattr(err, "reason", None) or err
    detail = str(reason).rsplit(": ", 1)[-1].strip()
    return f"cannot reach the hub at {where}: {detail}"


def _refused(err: ApiException) -> str:
    what = {401: "does not accept these credentials", 403: "refused the request"}
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
    except ApiException as err:
        message = _refused(err)
    print(f"{prog}: {message}", file=sys.stderr)
    return 1
