"""A paged informer against a real API server: a list is passed on page by page, in order,
then its end (issue 22: the hub's 100,000 AIJobs are taken while the server serves the
next page, not after the whole list)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.adapters import kube
from cpn.adapters.kube import Informer
from cpn.cli.devbed import wait_until
from testbed.bed import Testbed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

MEMBER = "member-a"


@pytest.mark.parametrize("paged", [True, False])
def test_a_paged_list_comes_page_by_page_then_its_end(
    testbed: Testbed, monkeypatch: pytest.MonkeyPatch, paged: bool
) -> None:
    """Five ConfigMaps listed two to a page: PAGE events of 2, 2 and 1 (the first marked),
    then LIST with no items and ``paged`` set, then SYNCED; unpaged, one LIST of five."""
    monkeypatch.setattr(kube, "LIST_PAGE", 2)
    events: list[tuple[str, Any]] = []
    lock = threading.Lock()

    def record(event: str, obj: Mapping[str, Any] | None) -> None:
        with lock:
            events.append((event, obj))

    namespace = f"pages-{time.monotonic_ns()}"
    with testbed.api_client(MEMBER) as api:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": namespace}})
        try:
            for i in range(5):
                core.create_namespaced_config_map(
                    namespace, {"metadata": {"name": f"cm-{i}", "labels": {"test": "pages"}}}
                )
            informer = Informer(
                "pages",
                api,
                core.list_namespaced_config_map,
                record,
                namespace=namespace,
                label_selector="test=pages",  # not the namespace's own kube-root-ca.crt
                paged=paged,
            )
            informer.start()
            try:
                wait_until(informer.synced.is_set, timeout_s=30, what="listed")
                with lock:
                    kinds = [event for event, _ in events]
                    listed = list(events)
            finally:
                informer.stop()
        finally:
            with contextlib.suppress(ApiException):
                core.delete_namespace(namespace)
    names = sorted(
        o["metadata"]["name"] for e, obj in listed if e in {"PAGE", "LIST"} for o in obj["items"]
    )
    assert names == [f"cm-{i}" for i in range(5)]
    if paged:
        assert kinds[:5] == ["PAGE", "PAGE", "PAGE", "LIST", "SYNCED"]
        assert [len(obj["items"]) for _, obj in listed[:3]] == [2, 2, 1]
        assert [obj["first"] for _, obj in listed[:3]] == [True, False, False]
        assert listed[3][1] == {"items": [], "paged": True}
    else:
        assert kinds[:2] == ["LIST", "SYNCED"]
        assert len(listed[0][1]["items"]) == 5 and not listed[0][1]["paged"]
