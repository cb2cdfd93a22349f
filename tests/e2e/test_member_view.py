"""The operator's view of a member, against the member's real API server: pods of other
workloads take room on their node; cpn's own pods (origin label) are never sent to the
operator's watch at all (they are counted from its records)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from cpn.adapters.kube import client_from_kubeconfig
from cpn.adapters.members import Member, MemberSpec
from cpn.api import constants as k
from cpn.cli.devbed import wait_until
from testbed.bed import Testbed

pytestmark = pytest.mark.e2e


@pytest.fixture
def member(testbed: Testbed) -> Iterator[Member]:
    name = testbed.members[0]
    api = client_from_kubeconfig(testbed.kubeconfig(name).read_text())
    view = Member(MemberSpec(name=name), api, "hub", lambda *_: None)
    view.start()
    wait_until(view.synced, timeout_s=60, what="member informers listed")
    yield view
    view.stop()


def _pod(name: str, node: str, gpus: int, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {
                        "requests": {k.GPU_RESOURCE: str(gpus)},
                        "limits": {k.GPU_RESOURCE: str(gpus)},
                    },
                }
            ],
        },
    }


def test_other_workloads_take_room_and_cpns_own_pods_are_not_watched(
    testbed: Testbed, member: Member, member_namespace: str
) -> None:
    """A foreign 2-GPU pod lowers its node's free GPUs by 2; a pod with cpn's origin label
    on the same node is not in the view and changes nothing."""
    view = member.cluster({}, ready=True)
    node = next(n for n in view.nodes if n.free_gpus >= 4)
    core: Any = client.CoreV1Api(
        client_from_kubeconfig(testbed.kubeconfig(member.name).read_text())
    )
    core.create_namespaced_pod(member_namespace, _pod("foreign", node.name, 2, {"app": "x"}))
    core.create_namespaced_pod(
        member_namespace, _pod("ours", node.name, 1, {k.LABEL_UID: "not-a-real-aijob"})
    )

    def free_now() -> float:
        return next(
            n.free_gpus for n in member.cluster({}, ready=True).nodes if n.name == node.name
        )

    wait_until(lambda: free_now() == node.free_gpus - 2, timeout_s=60, what="foreign pod counted")
    listed = core.list_namespaced_pod(member_namespace).items
    assert {p.metadata.name for p in listed} == {"foreign", "ours"}
    ours = next(p for p in listed if p.metadata.name == "ours")
    assert ours.metadata.uid not in member.pods
    assert free_now() == node.free_gpus - 2
