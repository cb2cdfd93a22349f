"""Issue 19 item 4 on the test bed: a multi-worker AIJob is all or nothing on its member.

member-a has 4 nodes of 8 A100s, so a job of 4 workers x 8 GPUs takes one worker per node.
A NoSchedule taint on the fourth node (which cpn does not read, as it reads no taints) makes
the member place only 3 of them: the job must not be Running with 3 of 4 workers, and its
attempt must be removed and the job requeued after the policy's ``retry.start_timeout_s``;
once the fourth node is usable it must go Running, and only then.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import Hub, aijob, apply, new_namespace, running_hub, wait_status

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TIMEOUT_S, BACKOFF_S = 30, 8
POLICY = f"""
retry: {{max_attempts: 2, backoff_s: {BACKOFF_S}, start_timeout_s: {TIMEOUT_S}}}
reservation: {{enabled: false}}
"""
MEMBER, FOURTH, A100 = "member-a", "a100-node-3", "A100-80GB"
WAITING = (
    f"3 of 4 workers running; all must run within {TIMEOUT_S} s of the dispatch, else the "
    "attempt is removed and the job requeued"
)
TIMED_OUT = f"3 of 4 workers running after {TIMEOUT_S} s: attempt removed, requeued"


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(testbed, tmp_path_factory.mktemp("gang"), policy=POLICY) as h:
        yield h


def gang(name: str) -> dict[str, Any]:
    """4 workers x 8 A100s, each running until deleted (10 min)."""
    return aijob(name, workers=4, gpus=8, gpu_types=[A100], durations={A100: "600s"})


@contextmanager
def fourth_node_tainted(tb: Testbed) -> Iterator[None]:
    """member-a's fourth node refuses new pods while inside (and after, if untaint() ran)."""
    taint = {"key": "test.cpn.io/gang", "value": "closed", "effect": "NoSchedule"}
    with tb.api_client(MEMBER) as api:
        core = client.CoreV1Api(api)
        core.patch_node(FOURTH, {"spec": {"taints": [taint]}})
        try:
            yield
        finally:
            untaint(tb)


def untaint(tb: Testbed) -> None:
    with tb.api_client(MEMBER) as api:
        client.CoreV1Api(api).patch_node(FOURTH, {"spec": {"taints": None}})


def pods(hub: Hub, uid: str) -> list[Any]:
    """The member pods of an AIJob (any attempt)."""
    with hub.tb.api_client(MEMBER) as api:
        found = client.CoreV1Api(api).list_pod_for_all_namespaces(
            label_selector=f"cpn.io/aijob-uid={uid}"
        )
        return list(found.items)


def running_pods(hub: Hub, uid: str) -> list[Any]:
    return [p for p in pods(hub, uid) if p.status.phase == "Running"]


def events(hub: Hub, namespace: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the Events posted about an AIJob."""
    found = hub.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return [(e.reason, e.message) for e in found.items]


def reasons(hub: Hub, namespace: str, name: str) -> list[str]:
    return [reason for reason, _ in events(hub, namespace, name)]


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_gang_goes_running_only_when_all_four_workers_run(hub: Hub) -> None:
    """3 of 4 workers run (the fourth node is tainted): the AIJob stays Dispatched and says
    so. The taint is lifted within the timeout: the fourth worker starts and the AIJob is
    Running from then on, its startTime not before the lift, with one Started Event."""
    with fourth_node_tainted(hub.tb), new_namespace(hub, "gang") as ns:
        assert apply(hub, ns, gang("whole")).returncode == 0
        held = wait_status(hub, ns, "whole", phase="Dispatched", message=WAITING, timeout_s=60)
        uid = hub.aijob(ns, "whole")["metadata"]["uid"]
        assert len(running_pods(hub, uid)) == 3, held
        assert held["cluster"] == MEMBER and held["attempts"] == 1
        assert "startTime" not in held and "Started" not in reasons(hub, ns, "whole")

        lifted = time.time()
        untaint(hub.tb)
        running = wait_status(hub, ns, "whole", phase="Running", timeout_s=TIMEOUT_S)
        assert len(running_pods(hub, uid)) == 4
        assert running["attempts"] == 1 and running["reason"] == "Running"
        assert running["message"] == f"running on {MEMBER} ({A100}), all 4 workers running"
        assert epoch(running["startTime"]) >= int(lifted), (running["startTime"], lifted)
        assert reasons(hub, ns, "whole").count("Started") == 1
        print(
            f"Running {epoch(running['startTime']) - lifted:+.1f} s after the lift (whole seconds)",
            flush=True,
        )


def test_a_gang_that_cannot_all_start_is_removed_and_requeued(hub: Hub) -> None:
    """The taint stays: 3 of 4 workers run, never all. After start_timeout_s the attempt's
    member Job and its 3 running pods are deleted and the AIJob is requeued (Event
    StartTimeout; while it backs off its status says why); it never was Running. The
    timeout is a failed attempt: the retry times out the same way and, max_attempts (2)
    reached, the job is Failed."""
    with fourth_node_tainted(hub.tb), new_namespace(hub, "gang") as ns:
        applied = time.monotonic()
        assert apply(hub, ns, gang("partial")).returncode == 0
        wait_status(hub, ns, "partial", phase="Dispatched", message=WAITING, timeout_s=60)
        uid = hub.aijob(ns, "partial")["metadata"]["uid"]
        first = hub.status(ns, "partial")["memberJob"]["name"]

        # Requeued, backing off: the status says why (condition Admitted=False with it).
        backoff = wait_status(hub, ns, "partial", reason="Backoff", timeout_s=TIMEOUT_S + 30)
        waited = time.monotonic() - applied
        print(f"requeued {waited:.1f} s after the apply (timeout {TIMEOUT_S} s)", flush=True)
        assert waited >= TIMEOUT_S
        assert backoff["phase"] == "Queued" and backoff["attempts"] == 1, backoff
        assert backoff["message"].startswith("attempt 1 failed; retrying in "), backoff
        assert backoff["message"].endswith(f"s ({TIMED_OUT})"), backoff
        admitted = next(c for c in backoff["conditions"] if c["type"] == "Admitted")
        assert admitted["status"] == "False" and TIMED_OUT in admitted["message"], admitted
        assert ("StartTimeout", f"attempt 1 failed ({TIMED_OUT}); retrying in {BACKOFF_S}s") in (
            events(hub, ns, "partial")
        )
        # Nothing of the attempt holds GPUs: its Job and its running workers are gone.
        wait_until(
            lambda: (
                first not in {j.metadata.name for j in hub.member_jobs(MEMBER, uid)}
                and not any(p.metadata.labels["cpn.io/attempt"] == "1" for p in pods(hub, uid))
            ),
            timeout_s=30,
            what="attempt 1's member Job and pods deleted",
        )

        failed = wait_status(hub, ns, "partial", phase="Failed", timeout_s=TIMEOUT_S + 60)
        assert failed["attempts"] == 2
        assert failed["message"] == f"attempt 2 failed ({TIMED_OUT}); no retries left"
        wait_until(
            lambda: not hub.member_jobs(MEMBER, uid) and not pods(hub, uid),
            timeout_s=30,
            what="every member Job and pod of the failed job deleted",
        )
        posted = reasons(hub, ns, "partial")
        assert "Started" not in posted and posted.count("Dispatched") == 2, posted
