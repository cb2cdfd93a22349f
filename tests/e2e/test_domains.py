"""Issue 21 item 3 on the test bed: a logical domain over some of one member's nodes.

Two of member-a's four A100 nodes are labelled ``test.cpn.io/pool=fast``; the policy makes
them domain ``fast`` and binds queue ``fast`` to it. Three jobs of queue fast, each taking a
whole node, must run only on those two nodes (the third waits although two A100 nodes are
free), a job bound to no domain only on the other nodes, and each AIJob's status (and
``kubectl get aijobs -o wide``) names its domain; member-a's MemberCluster shows its free
GPUs per domain.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import Hub, aijob, apply, new_namespace, running_hub, wait_status

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

MEMBER, A100, LABEL = "member-a", "A100-80GB", "test.cpn.io/pool"
FAST_NODES = ("a100-node-0", "a100-node-1")
POLICY = f"""
retry: {{max_attempts: 2, backoff_s: 1}}
domains:
  fast: {{clusters: [{MEMBER}], labels: {{{LABEL}: fast}}, queues: [fast]}}
"""


def label(tb: Testbed, value: str | None) -> None:
    """Label (or, with None, unlabel) the fast nodes of member-a."""
    with tb.api_client(MEMBER) as api:
        for node in FAST_NODES:
            client.CoreV1Api(api).patch_node(node, {"metadata": {"labels": {LABEL: value}}})


@contextmanager
def fast_pool_hub(tb: Testbed, folder: Path, policy: str) -> Iterator[Hub]:
    """The hub running ``policy`` while the fast nodes are labelled (unlabelled after)."""
    label(tb, "fast")
    try:
        with running_hub(tb, folder, policy=policy) as h:
            yield h
    finally:
        label(tb, None)


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with fast_pool_hub(testbed, tmp_path_factory.mktemp("domains"), POLICY) as h:
        yield h


def whole_node(name: str, queue: str = "") -> dict[str, Any]:
    """8 A100s (a whole node of member-a) for 40 s, in ``queue`` (none when "")."""
    job = aijob(name, gpus=8, gpu_types=[A100], durations={A100: "40s"})
    if queue:
        job["spec"]["queue"] = queue
    return job


def test_jobs_bound_to_a_domain_run_only_on_its_nodes_and_say_so(hub: Hub) -> None:
    with new_namespace(hub, "domains") as ns:
        fast = [whole_node(f"fast-{i}", queue="fast") for i in range(3)]
        assert apply(hub, ns, *fast, whole_node("free")).returncode == 0
        for name in ("fast-0", "fast-1", "free"):
            wait_status(hub, ns, name, phase="Running", timeout_s=90)
        placed = {name: hub.status(ns, name) for name in ("fast-0", "fast-1", "free")}
        assert sorted(placed[n]["nodes"][0] for n in ("fast-0", "fast-1")) == list(FAST_NODES)
        assert {placed[n]["domain"] for n in ("fast-0", "fast-1")} == {"fast"}
        assert placed["free"]["nodes"][0] not in FAST_NODES and "domain" not in placed["free"]
        # the third waits for a fast node while two A100 nodes of no domain stay free
        waiting = hub.status(ns, "fast-2")
        assert waiting["phase"] == "Queued", waiting
        assert waiting["reason"] in {"Capacity", "Priority", "Reservation"}, waiting

        wide = hub.kubectl("get", "aijobs", "-n", ns, "-o", "wide").stdout
        header, *rows = wide.splitlines()
        # kubectl aligns each value under its header (an absent one is blank)
        start, end = header.index("DOMAIN"), header.index("MESSAGE")
        shown = {row.split()[0]: row[start:end].strip() for row in rows}
        assert (shown["fast-0"], shown["fast-1"], shown["free"]) == ("fast", "fast", "")

        def per_domain() -> Any:
            member = hub.custom.get_cluster_custom_object(
                "cpn.io", "v1alpha1", "memberclusters", MEMBER
            )
            status = member.get("status") or {}
            return status.get("domains"), status.get("domainsFree")

        full = ([{"domain": "fast", "nodes": 2, "gpusTotal": 16.0, "gpusFree": 0.0}], "fast 0/16")
        wait_until(lambda: per_domain() == full, timeout_s=30, what=f"{MEMBER} domains {full}")

        third = wait_status(hub, ns, "fast-2", phase="Running", timeout_s=120)
        assert third["nodes"][0] in FAST_NODES and third["domain"] == "fast"
        wait_until(
            lambda: hub.status(ns, "fast-2").get("phase") == "Succeeded",
            timeout_s=120,
            what="fast-2 Succeeded",
        )
