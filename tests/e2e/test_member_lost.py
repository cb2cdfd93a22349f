"""A member lost: the member timeout comes from the policy, and removing a member
requeues its jobs (issue 19, last point), on the test bed.

A member whose API server hangs (SIGSTOP) is ``Ready=False`` within 10 s; its running
AIJob is requeued the policy's ``retry.member_timeout_s`` after that (set through the
policy ConfigMap while the operator runs; the operator's own ``CPN_MEMBER_TIMEOUT_S`` is
300 s here, so only the policy can make it 15 s), not sooner; after the member resumes the
job runs there once more and is finished exactly once. A MemberCluster deleted while its
job runs there has that job requeued at once, with the reason in its status and an Event,
and its member Job deleted. The figures are printed (run with ``-s`` to see them).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from cpn.cli.devbed import stop_process
from testbed.bed import Testbed
from testbed.workloads import wait_for
from tests.e2e import hubkit
from tests.e2e.test_faults import uid_of
from tests.e2e.test_member_probe import MEMBER, member_written_hub, seconds_until_ready_is

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

#: The policy's timeout; the operator's fallback is far longer, so a requeue near 15 s
#: can only come from the policy.
TIMEOUT_S = 15.0
FALLBACK_S = 300.0
#: What the issue promises for a hung member (grace 5 s + a probe period and deadline).
NOT_READY_WITHIN_S = 10.0
#: Ready=False and the requeue are both seen by polling the hub (0.1 s and 0.2 s) after
#: the operator writes them (a cycle, then a status patch or an Event): either may be seen
#: up to this much late, so the gap between them is measured within it.
SEEN_LATE_S = 1.0
POLICY = "retry: {max_attempts: 2, backoff_s: 1, member_timeout_s: 15}\n"


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[hubkit.Hub]:
    """The operator with the shipped grace and a 300 s fallback timeout."""
    folder = tmp_path_factory.mktemp("member-lost")
    with member_written_hub(testbed, folder, FALLBACK_S) as hub:
        yield hub


@pytest.fixture
def namespace(hub: hubkit.Hub) -> Iterator[str]:
    with hubkit.new_namespace(hub, "mto", user="carol", group="speech") as name:
        yield name


def policy_events(hub: hubkit.Hub, reason: str) -> list[str]:
    events = hub.core.list_namespaced_event(
        "cpn-system", field_selector="involvedObject.name=cpn-policy"
    )
    return [e.message or "" for e in events.items if e.reason == reason]


def set_policy(hub: hubkit.Hub, text: str) -> None:
    """Edit the policy ConfigMap and wait until the operator accepts the new version."""
    before = len(policy_events(hub, "PolicyAccepted"))
    hubkit.set_policy(hub, text)
    wait_for(
        lambda: len(policy_events(hub, "PolicyAccepted")) > before,
        timeout_s=60,
        what="the new policy accepted",
    )


def requeued_message(hub: hubkit.Hub, namespace: str, name: str, *, timeout_s: float) -> str:
    """The message of the one ``Requeued`` Event about the AIJob ``name``, once posted
    (polled every 0.2 s)."""

    def told() -> list[str]:
        selector = f"involvedObject.name={name}"
        events = hub.core.list_namespaced_event(namespace, field_selector=selector)
        return [e.message or "" for e in events.items if e.reason == "Requeued"]

    (message,) = wait_for(told, timeout_s=timeout_s, what=f"{name} requeued", interval_s=0.2)
    return message


def deregister(hub: hubkit.Hub) -> dict[str, Any]:
    """Delete the member's MemberCluster; what it was, to register it again."""
    body = cast(
        dict[str, Any],
        hub.custom.get_cluster_custom_object("cpn.io", "v1alpha1", "memberclusters", MEMBER),
    )
    hub.custom.delete_cluster_custom_object("cpn.io", "v1alpha1", "memberclusters", MEMBER)
    return body


def register_again(hub: hubkit.Hub, body: dict[str, Any]) -> None:
    """Create the deleted MemberCluster ``body`` again (its spec and labels)."""
    again = {"apiVersion": body["apiVersion"], "kind": body["kind"], "spec": body["spec"]}
    again["metadata"] = {"name": MEMBER, "labels": body["metadata"].get("labels") or {}}
    hub.custom.create_cluster_custom_object("cpn.io", "v1alpha1", "memberclusters", again)


def running_on_member(hub: hubkit.Hub, namespace: str, name: str) -> str:
    """Apply a 45 s AIJob only the member's V100s can hold; wait until it runs; its UID."""
    slow = {"A100-80GB": "45s", "V100-32GB": "45s"}
    job = hubkit.aijob(name, gpus=4, gpu_types=["V100-32GB"], durations=slow)
    assert hubkit.apply(hub, namespace, job).returncode == 0
    status = hubkit.wait_status(hub, namespace, name, timeout_s=90, phase="Running")
    assert status["cluster"] == MEMBER
    return uid_of(hub, namespace, name)


def test_hung_member_requeues_after_the_policys_timeout_from_not_ready_and_runs_once(
    hub: hubkit.Hub, namespace: str
) -> None:
    set_policy(hub, POLICY)
    seconds_until_ready_is(hub, "True", timeout_s=30)
    with hubkit.JobCreations(hub.tb) as creations:
        uid = running_on_member(hub, namespace, "hung")
        with hub.tb.paused(MEMBER, "kube-apiserver"):
            began = time.monotonic()
            not_ready_s, cond = seconds_until_ready_is(hub, "False", timeout_s=60)
            assert cond["reason"] == "Unreachable"
            told = requeued_message(hub, namespace, "hung", timeout_s=90)
            requeued_s = time.monotonic() - began
        ready_again_s, _ = seconds_until_ready_is(hub, "True", timeout_s=60)
        done = hubkit.wait_status(hub, namespace, "hung", timeout_s=150, phase="Succeeded")
        wait_for(
            lambda: hubkit.member_jobs_by_uid(hub.tb)[uid] == 1,
            timeout_s=60,
            what="the stale attempt removed",
        )
        # The test's own watch of the member may see the completion after the hub did
        # (its stream was held up by the pause too): wait for it rather than read it once.
        wait_for(
            lambda: creations.runs()[uid] >= 1,
            timeout_s=60,
            what="the test's watch to see the member Job complete",
        )
        runs = creations.runs()[uid]
    after_not_ready_s = requeued_s - not_ready_s
    print(
        f"\nFIGURES SIGSTOP {MEMBER} kube-apiserver, policy retry.member_timeout_s "
        f"{TIMEOUT_S:.0f}s (CPN_MEMBER_TIMEOUT_S {FALLBACK_S:.0f}s): Ready=False after "
        f"{not_ready_s:.1f}s, requeued {requeued_s:.1f}s after SIGSTOP = "
        f"{after_not_ready_s:.1f}s after Ready=False; SIGCONT: Ready=True after "
        f"{ready_again_s:.1f}s; member Jobs completed {runs}"
    )
    assert not_ready_s <= NOT_READY_WITHIN_S
    assert f"member {MEMBER} not ready for 15s (policy retry.member_timeout_s)" in told
    # Counted from Ready=False, not from the first missed probe (5 s, the grace, earlier).
    assert TIMEOUT_S - SEEN_LATE_S <= after_not_ready_s <= TIMEOUT_S + 5.0
    assert done["cluster"] == MEMBER and done["attempts"] == 2
    assert hubkit.wait_events_of(hub, namespace, "hung", "Succeeded").count("Succeeded") == 1
    assert runs == 1  # the work was done once: attempt 1 never completed
    (job,) = hub.member_jobs(MEMBER, uid)
    assert job.metadata.labels["cpn.io/attempt"] == "2"


def test_deleting_a_ready_members_membercluster_requeues_its_job_with_the_reason(
    hub: hubkit.Hub, namespace: str
) -> None:
    """Its MemberCluster deleted while the job runs there: requeued at once (reason
    MemberRemoved, a Requeued Event saying why), its member Job deleted through the member
    before the connection went; registered again, the member runs it to the end, once."""
    seconds_until_ready_is(hub, "True", timeout_s=30)
    uid = running_on_member(hub, namespace, "removed")
    began = time.monotonic()
    body = deregister(hub)
    try:
        told = requeued_message(hub, namespace, "removed", timeout_s=60)
        requeued_s = time.monotonic() - began
        status = hubkit.wait_status(hub, namespace, "removed", timeout_s=30, cluster=None)
        wait_for(lambda: not hub.member_jobs(MEMBER, uid), timeout_s=30, what="its member Job gone")
    finally:
        register_again(hub, body)
    print(f"\nFIGURES MemberCluster {MEMBER} deleted: job requeued after {requeued_s:.1f}s")
    assert told.startswith(
        f"member cluster {MEMBER} was removed (its MemberCluster deleted) while the job was "
        "on it: requeued; its member Job "
    ), told
    assert told.endswith(" there is being deleted"), told
    told_events = hubkit.events_of(hub, namespace, "removed")
    assert "MemberJobNotDeleted" not in told_events
    assert "Retrying" not in told_events  # the Job's deletion was no failed attempt
    assert status["phase"] == "Queued" and requeued_s <= 10.0
    done = hubkit.wait_status(hub, namespace, "removed", timeout_s=150, phase="Succeeded")
    assert done["cluster"] == MEMBER and done["attempts"] == 2
    assert hubkit.wait_events_of(hub, namespace, "removed", "Succeeded").count("Succeeded") == 1
    assert hubkit.member_jobs_by_uid(hub.tb)[uid] == 1


def test_a_membercluster_deleted_while_the_operator_is_down_requeues_its_job_at_start(
    hub: hubkit.Hub, namespace: str
) -> None:
    """The operator stops, the MemberCluster its job runs on is deleted, the operator
    starts: the job is requeued (MemberRemoved) saying its member Job could not be deleted;
    registered again, the member runs it to the end, taken once."""
    seconds_until_ready_is(hub, "True", timeout_s=30)
    uid = running_on_member(hub, namespace, "orphaned")
    stop_process(hub.proc)
    body = deregister(hub)
    try:
        hub.restart()
        told = requeued_message(hub, namespace, "orphaned", timeout_s=90)
    finally:
        register_again(hub, body)
    assert told.startswith(
        f"member cluster {MEMBER} was removed (its MemberCluster deleted) while the job was "
        "on it: requeued; its member Job "
    ), told
    assert told.endswith(
        f"cannot be deleted (cpn holds no connection to {MEMBER}), so it may still run there "
        "as well"
    ), told
    done = hubkit.wait_status(hub, namespace, "orphaned", timeout_s=150, phase="Succeeded")
    assert done["cluster"] == MEMBER and done["attempts"] == 2
    assert hubkit.wait_events_of(hub, namespace, "orphaned", "Succeeded").count("Succeeded") == 1
    wait_for(
        lambda: hubkit.member_jobs_by_uid(hub.tb)[uid] == 1,
        timeout_s=60,
        what="the stale attempt removed once the member is back",
    )
