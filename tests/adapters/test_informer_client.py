"""The informer watches on a client of its own that never retries a request.

A member's API server hung just as a watch opens would otherwise be asked again by
urllib3 (a read timeout before the response is retried) and surface only after several
silences, as a failure instead of a silent watch (tests/e2e/test_member_probe.py
measures the silent watch on the test bed). No server is contacted here: the clients
are only built.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest
from kubernetes import client

from cpn.adapters.kube import Informer, JsonApi, _api_name


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


def test_a_json_api_lister_is_watched_on_a_client_without_retries() -> None:
    cfg = client.Configuration()
    cfg.host = "https://127.0.0.1:1"
    cfg.retries = 3
    api = client.ApiClient(configuration=cfg)
    lister = JsonApi(api).lister("/api/v1/nodes")
    informer = Informer("nodes", api, lister, lambda event, obj: None)
    watch_fn = informer._watch_fn
    assert isinstance(watch_fn, functools.partial) and watch_fn.args == ("/api/v1/nodes",)
    owner = watch_fn.func.__self__
    assert isinstance(owner, JsonApi) and owner.api_client is not api
    assert owner.api_client.configuration.retries is False
    assert owner.api_client.configuration.host == cfg.host
    assert informer._list is lister  # lists go through the shared client


@pytest.mark.parametrize(
    ("keyword", "query"),
    [
        ("label_selector", "labelSelector"),
        ("_continue", "continue"),
        ("allow_watch_bookmarks", "allowWatchBookmarks"),
        ("watch", "watch"),
        ("propagation_policy", "propagationPolicy"),
    ],
)
def test_keywords_go_out_under_the_apis_names(keyword: str, query: str) -> None:
    assert _api_name(keyword) == query


def test_the_operators_adapters_load_no_generated_core_or_batch_api() -> None:
    """The generated CoreV1Api and BatchV1Api import about 250 pydantic models (22 MB of
    the operator's memory): the hub and member adapters the operator builds go by path."""
    code = """
import sys
from kubernetes import client
from cpn.adapters.hub import KubeHub
from cpn.adapters.members import Member, MemberSpec
from cpn.adapters.usagestore import KubeUsageStore
from cpn.config import load_config
import cpn.handlers.lifecycle
api = client.ApiClient(client.Configuration())
KubeHub(api, load_config(leader_election=False), threads=2)
Member(MemberSpec(name="a", namespace="cpn-jobs"), api, "hub", lambda *a: None, None)
KubeUsageStore(api, "cpn-system")
print(" ".join(sorted(m for m in sys.modules if m.startswith("kubernetes.client.api."))))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    loaded = set(out.stdout.split())
    assert "kubernetes.client.api.custom_objects_api" in loaded  # the check sees the APIs
    assert not loaded & {"kubernetes.client.api.core_v1_api", "kubernetes.client.api.batch_v1_api"}
