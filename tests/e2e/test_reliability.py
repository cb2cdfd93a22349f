"""Bugs users hit on the test bed (issue 19, items 5 and 6), each against the real servers:

- under the shipped default policy a user's ``spec.priority: 1000`` counts as the bound (0);
- a Job the member refuses (its own admission policy: 422) fails its attempts, with the
  member's one-line message, and frees its group's quota; annotations too big for any
  member are refused by the operator before any dispatch;
- ``spec.queue`` naming a queue the policy does not know is said (condition and Event);
- a broken policy plus a restart keeps the last good policy (saved in the cluster);
- two ``cpn run`` with default settings: one schedules; SIGTERM hands the Lease over.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.cli.devbed import stop_process, wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import (
    TEST_POLICY,
    Hub,
    aijob,
    apply,
    events_of,
    member_jobs_by_uid,
    new_namespace,
    running_hub,
    set_policy,
    wait_events_of,
    wait_status,
)
from tests.e2e.test_ha import cycles, leads

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

#: Group vision may use 1 GPU: what holds it is visible as the next job's Quota wait.
QUOTA_1 = TEST_POLICY + "quotas: {groups: {vision: {gpus: 1}}}\n"

REFUSE = "e2e.cpn.io/refuse"
#: The members' own admission policy: a Job whose pods carry REFUSE is Invalid (422).
ADMISSION = f"""
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: e2e-refuse-marked-jobs}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}}
  validations:
    - expression: >-
        !has(object.spec.template.metadata.annotations) ||
        !('{REFUSE}' in object.spec.template.metadata.annotations)
      message: jobs marked {REFUSE} are not admitted on this cluster
      reason: Invalid
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: e2e-refuse-marked-jobs}}
spec:
  policyName: e2e-refuse-marked-jobs
  validationActions: [Deny]
"""


def create_aijob(hub: Hub, namespace: str, body: dict[str, Any]) -> None:
    """Create through the API (kubectl apply would copy the body into an annotation)."""
    hub.custom.create_namespaced_custom_object("cpn.io", "v1alpha1", namespace, "aijobs", body)


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def policy_events(hub: Hub, reason: str) -> list[str]:
    events = hub.core.list_namespaced_event("cpn-system")
    return [e.message or "" for e in events.items if e.reason == reason]


# --- item 5: secure by default --------------------------------------------------------------


def test_default_policy_counts_a_users_priority_1000_as_0(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No max_priority in the policy: a later job asking priority 1000 ranks behind an earlier
    one asking 0 (both wait for the group's quota), its score without the 1,000,000-point
    priority term; its spec keeps what the user wrote."""
    policy = TEST_POLICY + "quotas: {groups: {vision: {gpus: 0}}}\n"
    with (
        running_hub(testbed, tmp_path_factory.mktemp("prio"), policy=policy) as hub,
        new_namespace(hub, "prio", user="mallory", group="vision") as ns,
    ):
        assert apply(hub, ns, aijob("early", priority=0)).returncode == 0
        wait_status(hub, ns, "early", reason="Quota", position=1)
        assert apply(hub, ns, aijob("pushy", priority=1000)).returncode == 0
        pushy = wait_status(hub, ns, "pushy", reason="Quota", position=2)
        assert wait_status(hub, ns, "early", reason="Quota")["position"] == 1
        assert pushy["score"] < 1_000_000, pushy["score"]
        assert hub.aijob(ns, "pushy")["spec"]["priority"] == 1000


# --- item 6: a member's refusal, sizes checked up front -------------------------------------


@pytest.fixture
def refusing_members(testbed: Testbed) -> Iterator[None]:
    """Both members refuse (422 Invalid) Jobs whose pods carry REFUSE, by their own
    ValidatingAdmissionPolicy; ready once a dry-run create of such a Job is refused."""
    docs = list(yaml.safe_load_all(ADMISSION))
    for member in testbed.members:
        with testbed.api_client(member) as api:
            admission: Any = client.AdmissionregistrationV1Api(api)
            admission.create_validating_admission_policy(docs[0])
            admission.create_validating_admission_policy_binding(docs[1])

            def refused(api: Any = api) -> bool:
                job = {
                    "metadata": {"name": "probe"},
                    "spec": {
                        "template": {
                            "metadata": {"annotations": {REFUSE: "yes"}},
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "c", "image": "i"}],
                            },
                        }
                    },
                }
                try:
                    client.BatchV1Api(api).create_namespaced_job("default", job, dry_run="All")
                except ApiException as err:
                    return err.status == 422
                return False

            wait_until(refused, timeout_s=60, what=f"{member} refuses marked Jobs")
    try:
        yield
    finally:
        for member in testbed.members:
            with testbed.api_client(member) as api:
                admission = client.AdmissionregistrationV1Api(api)
                admission.delete_validating_admission_policy_binding(docs[1]["metadata"]["name"])
                admission.delete_validating_admission_policy(docs[0]["metadata"]["name"])


def test_a_refused_job_fails_with_the_members_message_and_frees_its_quota(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory, refusing_members: None
) -> None:
    """The member refuses the job's Job on every create: after retry.max_attempts (2 here)
    it is Failed with the member's one-line Status message (no HTTP headers), it posts no
    DispatchFailed Event per cycle, and the group's next job gets the quota and runs."""
    with (
        running_hub(testbed, tmp_path_factory.mktemp("refused"), policy=QUOTA_1) as hub,
        new_namespace(hub, "refused", user="mallory", group="vision") as ns,
    ):
        assert apply(hub, ns, aijob("marked", annotations={REFUSE: "yes"})).returncode == 0
        status = wait_status(hub, ns, "marked", timeout_s=90, phase="Failed")
        message = status["message"]
        assert "refused its Job: 422 Invalid: " in message, message
        assert f"jobs marked {REFUSE} are not admitted on this cluster" in message, message
        assert "HTTP response headers" not in message and "\n" not in message, message
        assert status["attempts"] == 2
        assert "memberJob" not in status
        reasons = wait_events_of(hub, ns, "marked", "Retrying", "Failed")
        assert reasons.count("Retrying") == 1 and reasons.count("Failed") == 1, reasons
        assert "DispatchFailed" not in reasons, reasons
        uid = hub.aijob(ns, "marked")["metadata"]["uid"]
        assert member_jobs_by_uid(testbed)[uid] == 0
        assert apply(hub, ns, aijob("next")).returncode == 0
        wait_status(hub, ns, "next", timeout_s=120, phase="Succeeded")


@pytest.mark.parametrize("kib", [300, 900])
def test_annotations_too_big_for_a_member_are_invalid_before_any_dispatch(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory, kib: int
) -> None:
    """A pod template whose annotations exceed what a member takes (256 KiB in all) is
    marked Invalid with the sizes, never dispatched; the hub itself stores it."""
    with (
        running_hub(testbed, tmp_path_factory.mktemp("big")) as hub,
        new_namespace(hub, "big", user="mallory", group="vision") as ns,
    ):
        create_aijob(hub, ns, aijob("big", annotations={"notes.example.com/x": "x" * kib * 1024}))
        status = wait_status(hub, ns, "big", phase="Invalid", reason="InvalidSpec")
        assert "spec.template.metadata.annotations: " in status["message"], status["message"]
        assert "a member cluster takes at most 262144 bytes of annotations" in status["message"]
        wait_events_of(hub, ns, "big", "InvalidSpec", timeout_s=30)
        assert member_jobs_by_uid(testbed)[hub.aijob(ns, "big")["metadata"]["uid"]] == 0


# --- item 6: a queue the policy does not know -------------------------------------------------


def test_a_queue_the_policy_does_not_know_is_said_and_the_job_still_runs(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """spec.queue: no-such-queue gets QueueKnown=False (UnknownQueue, naming the policy's
    queues) and a Warning Event; a job of a known queue gets QueueKnown=True."""
    policy = TEST_POLICY + "levels: [{name: debug, queues: [debug]}, {name: rest}]\n"
    with (
        running_hub(testbed, tmp_path_factory.mktemp("queue"), policy=policy) as hub,
        new_namespace(hub, "queue") as ns,
    ):
        jobs = aijob("typo", queue="no-such-queue"), aijob("known", queue="debug")
        assert apply(hub, ns, *jobs).returncode == 0
        typo = wait_status(hub, ns, "typo", timeout_s=90, phase="Succeeded")
        said = condition(typo, "QueueKnown")
        assert said is not None and said["status"] == "False", typo["conditions"]
        assert said["reason"] == "UnknownQueue"
        assert (
            "'no-such-queue' is not a queue of the policy (its queues: debug, default)"
            in (said["message"])
        )
        wait_events_of(hub, ns, "typo", "UnknownQueue")
        known = wait_status(hub, ns, "known", timeout_s=90, phase="Succeeded")
        said = condition(known, "QueueKnown")
        assert said is not None and said["status"] == "True", known["conditions"]
        assert "UnknownQueue" not in events_of(hub, ns, "known")


# --- item 6: the last good policy survives a restart ------------------------------------------


def test_a_broken_policy_and_a_restart_keep_the_last_good_policy(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Quota 1 GPU accepted (and saved in cpn-policy-last-good); the operator stopped, the
    policy broken, the operator started again: it starts from the saved policy (Event
    PolicyRestored) and the group still gets 1 GPU: a second job waits for Quota."""
    with running_hub(testbed, tmp_path_factory.mktemp("lastgood"), policy=QUOTA_1) as hub:
        live = hub.core.read_namespaced_config_map("cpn-policy", "cpn-system")

        def saved() -> Any:
            try:
                found = hub.core.read_namespaced_config_map("cpn-policy-last-good", "cpn-system")
            except ApiException:
                return None
            version = (found.metadata.annotations or {}).get("cpn.io/policy-version")
            return found if version == live.metadata.resource_version else None

        copy = wait_until(saved, timeout_s=60, what="the accepted policy saved")
        assert copy.data["policy.yaml"] == QUOTA_1
        stop_process(hub.proc)
        set_policy(hub, "quotas: {groups: {vision: {gpus: -1}}}\n")

        def refused() -> int:  # Events of earlier tests may name the same field: count them
            return sum(
                "quotas.groups.vision.gpus" in m for m in policy_events(hub, "InvalidPolicy")
            )

        before = refused()
        hub.restart()
        # The saved version is this test's own (resourceVersions are never reused).
        version = f"version {live.metadata.resource_version} "
        wait_until(
            lambda: any(version in m for m in policy_events(hub, "PolicyRestored")),
            timeout_s=90,
            what=f"PolicyRestored naming {version}",
        )
        # Events go out through several writers: the refusal may land after PolicyRestored.
        wait_until(lambda: refused() > before, timeout_s=30, what="InvalidPolicy for the edit")
        with new_namespace(hub, "lastgood", user="mallory", group="vision") as ns:
            long = {"A100-80GB": "60s", "V100-32GB": "60s"}
            assert apply(hub, ns, aijob("first", durations=long)).returncode == 0
            wait_status(hub, ns, "first", timeout_s=60, phase="Running")
            assert apply(hub, ns, aijob("second", durations=long)).returncode == 0
            status = wait_status(hub, ns, "second", timeout_s=60, reason="Quota")
            assert "vision" in status["message"], status["message"]


# --- item 6: one active instance by default ----------------------------------------------------


def test_two_default_instances_schedule_one_at_a_time_and_sigterm_hands_over(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two `cpn run` with no election setting: only the one holding the Lease runs cycles.
    SIGTERM to it: it stops and gives the Lease up, and the other takes it at its next poll,
    long before the 30 s Lease could have expired; then it schedules."""
    folder = tmp_path_factory.mktemp("single")
    with running_hub(testbed, folder, lease_duration_s=30) as hub:
        first = hub.log
        wait_until(lambda: leads(first), timeout_s=60, what="the first instance leads")
        second_log = folder / "second.log"
        second = hub.start(second_log)
        try:
            wait_until(
                lambda: "standby: lease" in second_log.read_text(errors="replace"),
                timeout_s=60,
                what="the second instance stands by",
            )
            with new_namespace(hub, "single") as ns:
                assert apply(hub, ns, aijob("one")).returncode == 0
                wait_status(hub, ns, "one", timeout_s=90, phase="Succeeded")
                assert cycles(first) > 0
                assert cycles(second_log) == 0, "the standby must not schedule"
                stopped_at = time.monotonic()
                hub.proc.send_signal(signal.SIGTERM)
                assert hub.proc.wait(timeout=30) == 0
                assert "lease cpn-operator released" in first.read_text(errors="replace")
                wait_until(lambda: leads(second_log), timeout_s=60, what="the second leads")
                takeover_s = time.monotonic() - stopped_at
                print(f"takeover after SIGTERM: {takeover_s:.1f}s (lease 30 s, poll 10 s)")
                assert takeover_s < 20, takeover_s
                ran = cycles(first)
                assert apply(hub, ns, aijob("two")).returncode == 0
                wait_status(hub, ns, "two", timeout_s=90, phase="Succeeded")
                assert cycles(second_log) > 0 and cycles(first) == ran
        finally:
            stop_process(second)
