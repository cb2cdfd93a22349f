"""Kubernetes clients and informers (list + watch) for the hub and member clusters.

The sync ``kubernetes`` client is used from worker threads; an :class:`Informer`
keeps a watch open in a daemon thread, re-lists on 410 Gone and on any error
(with backoff), and hands each event to a callback. Callbacks are expected to
hop onto the asyncio loop themselves (``loop.call_soon_threadsafe``).

Informers read the API's JSON as plain dicts: the client's typed models would be built
for every object of every event and turned back into dicts at once, which cost most of
the operator's CPU with thousands of pods and Jobs. The operator's other calls to the
core and batch APIs go by path through :class:`JsonApi`, in the same JSON.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ReadTimeoutError

from cpn.runtime.ports import CallFailed, describe

log = logging.getLogger(__name__)

#: Objects per page when an informer lists.
LIST_PAGE = 500

#: Seconds a watch asks the server to keep it open (``timeoutSeconds``); the server then
#: ends it and it is opened again from the last version seen.
WATCH_TIMEOUT_S = 60
#: A watch that delivers nothing (no event, no bookmark, not its end) for its
#: ``timeoutSeconds`` and this much more is suspect: it is dropped and opened again from
#: the last version seen. kube-apiserver sends a bookmark about every minute (59-60 s apart
#: on the test bed), but none when nothing of the kind changed since the watch began, and it
#: always ends a watch at its ``timeoutSeconds`` (at 60.0 s): past that a silent watch is a
#: dead connection or a hung server, not a quiet cluster.
WATCH_SILENCE_SLACK_S = 10
#: Seconds to connect (TCP and TLS) when a watch starts.
CONNECT_S = 10

#: (event type: "PAGE"|"LIST"|"ADDED"|"MODIFIED"|"DELETED"|"SYNCED"|"ERROR", object as dict
#: or None)
EventFn = Callable[[str, Mapping[str, Any] | None], None]


#: 4xx answers that a retry may turn into a success: 401 and 403 (the credentials, or a
#: member ResourceQuota or admission check that may pass once room frees), 408 (timeout),
#: 409 (AlreadyExists: a create that happened) and 429 (throttled). Any other 4xx refuses
#: the request itself, and sending it again cannot change that.
RETRYABLE_4XX = frozenset({401, 403, 408, 409, 429})


def refused(err: BaseException) -> bool:
    """Whether ``err`` is an API server's refusal that retrying cannot change."""
    status = err.status if isinstance(err, ApiException) else None
    return status is not None and 400 <= status < 500 and status not in RETRYABLE_4XX


def error_line(err: BaseException, limit: int = 400) -> str:
    """An API call's failure in one line: ``422 Invalid: <the Status message>`` from the
    Kubernetes Status body (never the client's HTTP headers), else the exception's text."""
    if not isinstance(err, ApiException):
        return describe(err, limit)
    status: Any = {}
    with contextlib.suppress(TypeError, ValueError):
        status = json.loads(err.body or "{}")
    status = status if isinstance(status, Mapping) else {}
    reason = status.get("reason") or err.reason or "Error"
    message = status.get("message") or ""
    return describe(
        CallFailed(f"{err.status} {reason}" + (f": {message}" if message else "")), limit
    )


def call_failed(err: ApiException) -> CallFailed:
    """The client's exception as the runtime's :class:`~cpn.runtime.ports.CallFailed`."""
    return CallFailed(error_line(err), status=err.status, refused=refused(err))


def client_from_kubeconfig(kubeconfig: Mapping[str, Any] | str) -> client.ApiClient:
    """An API client for a kubeconfig given as a mapping or YAML text."""
    data = yaml.safe_load(kubeconfig) if isinstance(kubeconfig, str) else dict(kubeconfig)
    cfg = client.Configuration()
    loader = config.kube_config.KubeConfigLoader(config_dict=data)
    loader.load_and_set(cfg)
    cfg.retries = 1
    return client.ApiClient(configuration=cfg)


def client_without_retries(api: client.ApiClient) -> client.ApiClient:
    """A client of its own (its own connection pool) on ``api``'s configuration that never
    retries a request: for calls whose caller times them and tries again itself (probes,
    watches), where urllib3's retry of a read timeout would only hide a hung server."""
    cfg = copy.deepcopy(api.configuration)
    cfg.retries = False
    return client.ApiClient(configuration=cfg)


class JsonApi:
    """Calls to an API server by path, in its JSON: no generated API class, no client model.

    The client's generated ``CoreV1Api`` and ``BatchV1Api`` import about 250 pydantic models
    to check their arguments and build answers nothing in the operator reads: 22 MB of a
    process's memory (measured 7 Dec 2026; docs/results.md, "Speed: the operator on the test
    bed"). Keyword arguments are the generated methods' (``label_selector``, ``_continue``,
    ``_preload_content``, ``_request_timeout``...), sent under the API's names; an answer
    other than 2xx raises ApiException as theirs do.
    """

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        _preload_content: bool = True,
        _request_timeout: Any = None,
        **query: Any,
    ) -> Any:
        """The answer's JSON (None when empty); with ``_preload_content=False`` the unread
        response (a watch's stream)."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=[(_api_name(k), v) for k, v in query.items() if v is not None],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(*request, _request_timeout=_request_timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        if not _preload_content:
            return response.response
        response.read()
        return json.loads(response.data) if response.data else None

    def put_or_create(
        self, collection: str, name: str, body: Mapping[str, Any], **kwargs: Any
    ) -> Any:
        """Replace object ``name`` of ``collection`` with ``body``, or create it there when
        there is none (404)."""
        try:
            return self.call("PUT", f"{collection}/{name}", body, **kwargs)
        except ApiException as err:
            if err.status != 404:
                raise
        return self.call("POST", collection, body, **kwargs)

    def list(self, path: str, **kwargs: Any) -> Any:
        """GET a collection (or watch it: ``watch=True``)."""
        return self.call("GET", path, **kwargs)

    def lister(self, path: str) -> Callable[..., Any]:
        """:meth:`list` of ``path``, as an :class:`Informer` takes it."""
        return functools.partial(self.list, path)


def _api_name(name: str) -> str:
    """A generated method's keyword as the API's query parameter: ``_continue`` is
    ``continue``, ``label_selector`` is ``labelSelector``."""
    head, *rest = name.lstrip("_").split("_")
    return head + "".join(word.capitalize() for word in rest)


def member_kubeconfig(api: JsonApi, spec: Mapping[str, Any], namespace: str) -> str:
    """The kubeconfig text of a MemberCluster ``spec`` from its Secret in ``namespace``
    (``spec.kubeconfigSecret``: name, key default ``kubeconfig``), checked to need no exec
    plugin and no local file. Raises ApiException when the Secret cannot be read, and
    ValueError saying why its content is unusable."""
    from cpn.api.kubeconfig import kubeconfig_problems

    ref = spec.get("kubeconfigSecret") or {}
    name, key = str(ref.get("name", "")), str(ref.get("key") or "kubeconfig")
    if not name:
        raise ValueError("spec.kubeconfigSecret.name is not set")
    secret = api.call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    raw = (secret.get("data") or {}).get(key)
    if not raw:
        raise ValueError(f"secret {name} has no key {key!r}")
    try:
        text = base64.b64decode(raw).decode()
    except (binascii.Error, UnicodeDecodeError) as err:
        raise ValueError(f"secret {name} key {key!r} is not base64 text: {err}") from None
    problems = kubeconfig_problems(text)
    if problems:
        raise ValueError("; ".join(problems))
    return text


def hub_client() -> client.ApiClient:
    """Client for the hub: in-cluster config when running in a pod, else KUBECONFIG."""
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        config.load_kube_config(client_configuration=cfg)
    return client.ApiClient(configuration=cfg)


class Informer:
    """List, then watch, one kind of object forever (until stopped).

    ``list_fn`` is a client list method (e.g. ``CoreV1Api.list_node``, or
    ``JsonApi(api).lister("/api/v1/nodes")``) and ``kwargs`` its arguments (label
    selectors, namespace...). Objects are
    passed as the API server's JSON (dicts), never as client models.

    ``paged``: a (re-)list is passed on page by page as it comes (``PAGE`` events,
    :data:`cpn.runtime.ports.WatchFn`), so the receiver takes one page while the server
    serves the next, then ``LIST`` with no items and ``paged`` set; otherwise as one ``LIST``.
    """

    def __init__(
        self,
        name: str,
        api: client.ApiClient,
        list_fn: Callable[..., Any],
        on_event: EventFn,
        *,
        timeout_s: int = WATCH_TIMEOUT_S,
        silence_s: float | None = None,
        paged: bool = False,
        **kwargs: Any,
    ) -> None:
        self.name = name
        self._paged = paged
        self._api = api
        self._list = list_fn
        self._watch_fn = _without_retries(list_fn)
        self._on_event = on_event
        self._kwargs = kwargs
        self._timeout_s = timeout_s
        self.silence_s = silence_s if silence_s is not None else timeout_s + WATCH_SILENCE_SLACK_S
        self.watches = 0  # watches opened
        self.silent_watches = 0  # watches dropped for delivering nothing for silence_s
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self.synced = threading.Event()
        self.healthy = False
        self.last_ok = 0.0
        self.failed_at = 0.0  # when it last went from healthy to failing
        self.last_error = ""
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                version = self._relist()
                backoff = 0.5
                self._watch_from(version)
            except ApiException as err:
                if err.status == 410:  # our version expired: re-list at once
                    continue
                self._fail(f"HTTP {err.status}: {err.reason}")
            except Exception as err:  # noqa: BLE001 - network errors of every kind: _fail logs, retry with backoff
                self._fail(f"{type(err).__name__}: {err}")
            if not self._stop.is_set():
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _fail(self, message: str) -> None:
        if self.healthy or message != self.last_error:
            log.warning("informer %s failed: %s", self.name, message)
        if self.healthy:
            self.failed_at = time.monotonic()
        self.healthy = False
        self.last_error = message
        self._on_event("ERROR", None)

    def _relist(self) -> str:
        """List in pages (one answer of 10,000 objects is a transient 100 MB of dicts)."""
        items: list[Any] = []
        token = None
        first = True
        while True:
            response = self._list(
                **self._kwargs,
                limit=LIST_PAGE,
                _continue=token,
                _preload_content=False,
                _request_timeout=30,
            )
            result = json.loads(response.data)
            del response
            page = [_slim(item) for item in result.get("items") or []]
            token = (result.get("metadata") or {}).get("continue")
            if self._paged:
                self._on_event("PAGE", {"items": page, "first": first})
                first = False
            else:
                items.extend(page)
            if not token:
                break
        self._on_event("LIST", {"items": items, "paged": self._paged})
        self.healthy = True
        self.last_ok = time.monotonic()
        self.last_error = ""
        self.synced.set()
        self._on_event("SYNCED", None)
        return str(result["metadata"]["resourceVersion"])

    def _watch_from(self, version: str) -> None:
        while not self._stop.is_set():
            self._watch = watch.Watch()
            self.watches += 1
            stream = self._watch.stream(
                self._watch_fn,
                resource_version=version,
                timeout_seconds=self._timeout_s,
                allow_watch_bookmarks=True,
                deserialize=False,  # the server's JSON, no client models
                # (connect, read): the read timeout is the longest silence between bytes
                _request_timeout=(CONNECT_S, self.silence_s),
                **self._kwargs,
            )
            try:
                for event in stream:
                    kind = event["type"]
                    data = event["object"]
                    if kind == "ERROR":
                        if data.get("code") == 410:
                            return  # expired: re-list
                        raise RuntimeError(f"watch error: {data}")
                    version = str((data.get("metadata") or {}).get("resourceVersion") or version)
                    self.last_ok = time.monotonic()
                    self.healthy = True
                    if kind == "BOOKMARK":
                        continue
                    self._on_event(kind, _slim(data))
            except ReadTimeoutError:
                # Silent past any bookmark and past its own end: open it again from the
                # last version (a list only if that fails too).
                self.silent_watches += 1
                log.warning(
                    "watch %s delivered nothing for %.0fs: suspect; watching again from %s",
                    self.name,
                    self.silence_s,
                    version,
                )
                continue
            self.last_ok = time.monotonic()
            # stream ended by timeout: resume from the last version seen


def _without_retries(list_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``list_fn`` on a client of its own that never retries a request, for watches: a
    server hung just as a watch opens would otherwise be asked again (urllib3 retries a
    read timeout before the response) and surface only after several silences, as a
    failure instead of a silent watch. The informer opens its watches again itself.
    ``list_fn`` as it is when it is not a method of a generated API class or of a
    :class:`JsonApi` (or a partial of one)."""
    if isinstance(list_fn, functools.partial):
        inner = _without_retries(list_fn.func)
        if inner is list_fn.func:
            return list_fn
        return functools.partial(inner, *list_fn.args, **list_fn.keywords)
    owner: Any = getattr(list_fn, "__self__", None)
    api_client = getattr(owner, "api_client", None)
    if not isinstance(api_client, client.ApiClient):
        return list_fn
    fresh: Callable[..., Any] = getattr(
        type(owner)(client_without_retries(api_client)), list_fn.__name__
    )
    return fresh


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without ``metadata.managedFields`` (server-side apply's bookkeeping,
    often the largest part of an object, which nothing here reads: client-go's informers
    are advised to drop it with a transform for the same reason)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj
