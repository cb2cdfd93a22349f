"""The informer watches on a client of its own that never retries a request.

A member's API server hung just as a watch opens would otherwise be asked again by
urllib3 (a read timeout before the response is retried) and surface only after several
silences, as a failure instead of a silent watch (tests/e2e/test_member_probe.py
measures the silent watch on the test bed). No server is contacted here: the clients
are only built.
"""

from __future__ import annotations

from kubernetes import client

from cpn.adapters.kube import Informer


def test_the_watch_uses_a_copy_of_the_client_without_retries() -> None:
    cfg = client.Configuration()
    cfg.host = "https://127.0.0.1:1"
    cfg.retries = 3
    api = client.ApiClient(configuration=cfg)
    core = client.CoreV1Api(api)
    informer = Informer("nodes", api, core.list_node, lambda event, obj: None)
    watch_fn = informer._watch_fn
    owner = watch_fn.__self__
    assert isinstance(owner, client.CoreV1Api) and watch_fn.__name__ == "list_node"
    assert owner.api_client is not api
    assert owner.api_client.configuration.retries is False
    assert owner.api_client.configuration.host == cfg.host
    assert api.configuration.retries == 3  # the shared client keeps its retry
    assert informer._list == core.list_node  # lists go through the shared client


def test_a_plain_function_is_watched_as_it_is() -> None:
    def list_things(**kwargs: object) -> None:
        return None

    api = client.ApiClient(configuration=client.Configuration())
    informer = Informer("things", api, list_things, lambda event, obj: None)
    assert informer._watch_fn is list_things
