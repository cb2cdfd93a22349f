"""Fenced attempts on the test bed (issue 19, item 2): a partition cannot make two
attempts of one AIJob count.

A member is cut off (its kube-apiserver SIGSTOPped): the job is requeued and runs on the
other member as attempt 2, while attempt 1 carries on where the operator cannot see it.
The member comes back with attempt 1 finished; the operator is held (SIGSTOP) over that
moment, so the late ``Succeeded`` reaches it before its sweep can delete the Job, as
when the result is in flight when the member returns. The AIJob does not take it: Event
``StaleAttempt``, the stale Job deleted, the job ends by attempt 2 on the other member.
The member Jobs carry the fence and the checkpoint convention's environment.

The module's policy is ``retry.member_lost: at-most-once``: the job above checkpoints, so
it is requeued all the same; one that does not stays on its lost member (Event
``MemberLost``) and runs there once when the member answers again.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e import hubkit
from tests.e2e.test_faults import uid_of

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

TIMERS = {"member_grace_s": 2, "member_timeout_s": 20, "interval_s": 2}
POLICY = "retry: {max_attempts: 2, backoff_s: 1, member_lost: at-most-once}\n"
OTHER = {"member-a": "member-b", "member-b": "member-a"}


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[hubkit.Hub]:
    # The operator is SIGSTOPped for a while below: without leader election, so that it
    # carries on when it is resumed (a lost Lease would end it, with no supervisor here).
    folder = tmp_path_factory.mktemp("fence")
    args = ("--no-leader-elect",)
    with hubkit.running_hub(testbed, folder, policy=POLICY, args=args, **TIMERS) as hub:
        yield hub


@pytest.fixture
def namespace(hub: hubkit.Hub) -> Iterator[str]:
    with hubkit.new_namespace(hub, "fence", user="carol", group="speech") as name:
        yield name


def env_of(job: Any) -> dict[str, str]:
    container = job.spec.template.spec.containers[0]
    return {e.name: e.value for e in container.env or []}


def finished(job: Any) -> str:
    for cond in job.status.conditions or []:
        if cond.status == "True" and cond.type in {"Complete", "Failed"}:
            return str(cond.type)
    return ""


def event_messages(hub: hubkit.Hub, namespace: str, name: str, reason: str) -> list[str]:
    selector = f"involvedObject.name={name},reason={reason}"
    events = hub.core.list_namespaced_event(namespace, field_selector=selector)
    return [str(e.message) for e in events.items]


def member_job_or_none(hub: hubkit.Hub, cluster: str, uid: str) -> Any:
    try:
        jobs = hub.member_jobs(cluster, uid)
    except (ApiException, OSError):
        return None  # the member is still coming back
    return jobs[0] if jobs else None


def test_a_stale_attempts_late_success_is_not_taken(hub: hubkit.Hub, namespace: str) -> None:
    """Attempt 1 finishes on a member that was cut off after the job moved to attempt 2
    elsewhere: its Succeeded is ignored with a StaleAttempt Event, its Job deleted, and
    the AIJob succeeds by attempt 2 (one success, on the other member)."""
    durations = {"A100-80GB": "45s", "V100-32GB": "45s"}
    job = hubkit.aijob("split", gpus=4, durations=durations, checkpoint=True)
    assert hubkit.apply(hub, namespace, job).returncode == 0
    first = hubkit.wait_status(hub, namespace, "split", timeout_s=90, phase="Running")
    lost, other = first["cluster"], OTHER[first["cluster"]]
    uid = uid_of(hub, namespace, "split")
    assert first["attempts"] == 1 and first["fence"].startswith("1-")
    (stale,) = hub.member_jobs(lost, uid)
    env = env_of(stale)
    assert stale.metadata.labels["cpn.io/fence"] == env["CPN_FENCE"] == first["fence"]
    assert env["CPN_CHECKPOINT_DIR"] == f"/checkpoints/{uid}/attempt-1"
    assert "CPN_RESUME_DIRS" in env and not env["CPN_RESUME_DIRS"]  # set, empty

    try:
        with hub.tb.paused(lost, "kube-apiserver"):
            began = time.monotonic()
            second = hubkit.wait_status(
                hub, namespace, "split", timeout_s=90, cluster=other, attempts=2
            )
            moved_s = time.monotonic() - began
            assert second["fence"].startswith("2-") and second["fence"] != first["fence"]
            os.kill(hub.proc.pid, signal.SIGSTOP)  # the operator, until attempt 1 has ended
        late = wait_until(
            lambda: (j := member_job_or_none(hub, lost, uid)) is not None and finished(j) and j,
            timeout_s=120,
            what=f"attempt 1 finished on {lost}",
        )
        assert finished(late) == "Complete", late.status
    finally:
        os.kill(hub.proc.pid, signal.SIGCONT)
    told = wait_until(
        lambda: event_messages(hub, namespace, "split", "StaleAttempt"),
        timeout_s=60,
        what="a StaleAttempt Event",
        every_s=0.2,
    )
    now = hub.status(namespace, "split")
    print(f"\npartition of {lost}: moved to {other} after {moved_s:.1f}s; {told[0]}")
    assert now["phase"] != "Succeeded" and now["cluster"] == other, now
    assert f"on {lost} reported Succeeded for attempt 1 (fence {first['fence']})" in told[0]
    assert f"current attempt is 2 (fence {second['fence']})" in told[0]
    wait_until(
        lambda: member_job_or_none(hub, lost, uid) is None,
        timeout_s=60,
        what="the stale Job deleted",
    )
    done = hubkit.wait_status(hub, namespace, "split", timeout_s=120, phase="Succeeded")
    assert (done["cluster"], done["attempts"], done["fence"]) == (other, 2, second["fence"])
    (current,) = hub.member_jobs(other, uid)
    env = env_of(current)
    assert env["CPN_CHECKPOINT_DIR"] == f"/checkpoints/{uid}/attempt-2"
    assert env["CPN_RESUME_DIRS"] == f"/checkpoints/{uid}/attempt-1"
    assert current.metadata.labels["cpn.io/fence"] == env["CPN_FENCE"] == second["fence"]
    assert hubkit.wait_events_of(hub, namespace, "split", "Succeeded").count("Succeeded") == 1


def test_at_most_once_keeps_a_job_that_does_not_checkpoint_on_its_lost_member(
    hub: hubkit.Hub, namespace: str
) -> None:
    """Under at-most-once a job without checkpoint: true is not requeued when its member
    stops answering past the timeout (Event MemberLost, still attempt 1 there); when the
    member answers again it finishes there: one member Job, never a second attempt."""
    durations = {"A100-80GB": "40s", "V100-32GB": "40s"}
    assert (
        hubkit.apply(hub, namespace, hubkit.aijob("once", gpus=4, durations=durations)).returncode
        == 0
    )
    first = hubkit.wait_status(hub, namespace, "once", timeout_s=90, phase="Running")
    lost = first["cluster"]
    uid = uid_of(hub, namespace, "once")
    with hub.tb.paused(lost, "kube-apiserver"):
        began = time.monotonic()
        told = wait_until(
            lambda: event_messages(hub, namespace, "once", "MemberLost"),
            timeout_s=90,
            what="a MemberLost Event",
            every_s=0.2,
        )
        held_s = time.monotonic() - began
        now = hub.status(namespace, "once")
        assert (now["phase"], now["cluster"], now["attempts"]) == ("Running", lost, 1), now
        assert "Requeued" not in hubkit.events_of(hub, namespace, "once")
        assert "retry.member_lost: at-most-once" in told[0]
    print(f"\n{lost} silent: job held there after {held_s:.1f}s (timeout 20 s), not requeued")
    done = hubkit.wait_status(hub, namespace, "once", timeout_s=120, phase="Succeeded")
    assert (done["cluster"], done["attempts"]) == (lost, 1)
    assert hubkit.member_jobs_by_uid(hub.tb)[uid] == 1
    assert "Requeued" not in hubkit.events_of(hub, namespace, "once")
