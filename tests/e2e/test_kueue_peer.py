"""Kueue's MultiKueue as a peer on the bed (testbed/kueue.py): a plain batch/v1 Job with the
queue label, created on the hub, is run by a member and reported finished on the hub."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.adapters.kube import client_from_kubeconfig
from testbed import kueue
from testbed.bed import Testbed
from testbed.workloads import WaitTimeout, gpu_job, wait_for
from tests.e2e.hubkit import orphans

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def multikueue(testbed: Testbed) -> Iterator[Testbed]:
    # Kueue admits by its own quota and does not see pods it did not admit: GPUs an earlier
    # module left held would keep the copy's pod Pending (two CI runs timed out that way).
    left = orphans(testbed)
    assert not left, f"member Jobs left running by an earlier test hold GPUs: {left}"
    kueue.start(testbed, root=kueue.build())
    yield testbed
    kueue.stop(testbed)  # also unregisters its webhooks, which would refuse Jobs


def _batch(tb: Testbed, cluster: str) -> Any:
    return client.BatchV1Api(client_from_kubeconfig(tb.kubeconfig(cluster).read_text()))


def _job_or_none(batch: Any, namespace: str, name: str) -> Any:
    try:
        return batch.read_namespaced_job(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _member_view(tb: Testbed, member: str, namespace: str) -> str:
    """The member's copy, its pods, and who holds the member's GPUs, in a few lines (a
    long dump is cut short in CI's output)."""
    api = client_from_kubeconfig(tb.kubeconfig(member).read_text())
    found = _job_or_none(client.BatchV1Api(api), namespace, "train")
    conditions = (
        [(c.type, c.status, c.reason) for c in found.status.conditions or []] if found else None
    )
    succeeded = found.status.succeeded if found else None
    pods = client.CoreV1Api(api).list_pod_for_all_namespaces().items
    mine = [
        (p.metadata.name, p.status.phase, p.spec.node_name)
        for p in pods
        if p.metadata.namespace == namespace
    ]
    held: dict[str, int] = {}
    for p in pods:
        if p.status.phase in ("Pending", "Running"):
            gpus = sum(
                int((c.resources.requests or {}).get("nvidia.com/gpu", 0))
                for c in p.spec.containers
            )
            held[p.metadata.namespace] = held.get(p.metadata.namespace, 0) + gpus
    return (
        f"copy on {member}: succeeded={succeeded} conditions={conditions}; its pods {mine}; "
        f"GPUs requested by pending or running pods, by namespace: {held}"
    )


def test_labelled_job_on_the_hub_runs_on_one_member_and_finishes(multikueue: Testbed) -> None:
    tb = multikueue
    namespace = f"mk-{uuid.uuid4().hex[:6]}"
    kueue.queue_namespace(tb, namespace)
    try:
        hub = _batch(tb, "hub")
        body = gpu_job("train", gpus=1, duration="2s", labels={kueue.QUEUE_LABEL: kueue.QUEUE})
        hub.create_namespaced_job(namespace, body)
        created = hub.read_namespaced_job("train", namespace)
        # Kueue's webhook on the hub took the Job: suspended, and MultiKueue manages it
        assert created.spec.suspend is True
        assert created.spec.managed_by == "kueue.x-k8s.io/multikueue"

        members = {m: _batch(tb, m) for m in tb.members}

        seen_on: set[str] = set()

        def copies() -> dict[str, Any]:
            found = {m: _job_or_none(b, namespace, "train") for m, b in members.items()}
            placed = {m: j for m, j in found.items() if j is not None}
            seen_on.update(placed)
            return placed

        placed = wait_for(copies, timeout_s=120, what="the Job's copy on a member")
        assert len(placed) == 1, f"copies on {sorted(placed)}"
        (member,) = placed

        def member_succeeded() -> bool:
            job = copies().get(member)
            return job is not None and (job.status.succeeded or 0) == 1

        try:
            wait_for(member_succeeded, timeout_s=120, what=f"the copy on {member} to succeed")
        except WaitTimeout:  # say what the member saw (a CI run once timed out here)
            raise AssertionError(_member_view(tb, member, namespace)) from None
        assert "succeeded=1 " in _member_view(tb, member, namespace)  # the view reads the copy

        def hub_finished() -> bool:
            conds = {
                c.type: c.status
                for c in hub.read_namespaced_job("train", namespace).status.conditions or []
            }
            return conds.get("Complete") == "True"

        wait_for(hub_finished, timeout_s=120, what="the hub Job to show Complete")
        # the hub ran nothing itself: no pod of the Job exists there
        hub_core = client.CoreV1Api(client_from_kubeconfig(tb.kubeconfig("hub").read_text()))
        assert hub_core.list_namespaced_pod(namespace).items == []
        # no other member ever had a copy while it ran (MultiKueue removes the copy after)
        assert seen_on == {member}
    finally:
        kueue.delete_namespace(tb, namespace)
