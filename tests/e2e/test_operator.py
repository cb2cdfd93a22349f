"""The operator end to end on the test bed: AIJobs applied with kubectl run where cpn chose."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import (
    TEST_POLICY,
    Hub,
    aijob,
    apply,
    event_marks,
    new_events,
    new_namespace,
    printed_table,
    running_hub,
    wait_events_of,
    wait_status,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(testbed, tmp_path_factory.mktemp("operator")) as hub:
        yield hub


@pytest.fixture
def namespace(hub: Hub) -> Iterator[str]:
    with new_namespace(hub, "team", user="alice", group="vision") as name:
        yield name


def test_aijobs_run_where_planned_and_succeed(hub: Hub, namespace: str) -> None:
    """Applied AIJobs become member Jobs on the chosen cluster, run, and end Succeeded."""
    result = apply(hub, namespace, aijob("a"), aijob("b", gpus=4), aijob("c", gpus=8))
    assert result.returncode == 0, result.stderr
    for name in ("a", "b", "c"):
        status = wait_status(hub, namespace, name, timeout_s=120, phase="Succeeded")
        assert status["actualRuntimeSeconds"] > 0
        assert status["cluster"] in hub.tb.members
        uid = hub.aijob(namespace, name)["metadata"]["uid"]
        jobs = hub.member_jobs(status["cluster"], uid)
        assert len(jobs) == 1
        assert jobs[0].metadata.labels["cpn.io/aijob-name"] == name
        # The A100s finish these models sooner: cpn should have chosen them.
        assert status["gpuType"] == "A100-80GB"


def test_data_on_the_cluster_that_sorts_last_brings_the_job_there(hub: Hub, namespace: str) -> None:
    """5,000 GB of data on member-b: moving it to member-a's faster A100s (10 Gbps, ~4,000 s)
    costs more than the V100s' longer runtime, so cpn picks member-b, the cluster a
    first-fit placer (name order) would not pick; the runner-up carries the transfer."""
    doc = aijob("near-data", data={"sizeGB": 5000, "cluster": "member-b"})
    assert apply(hub, namespace, doc).returncode == 0
    # status.placement is shown while the job is placed (Dispatched or Running)
    status = wait_status(hub, namespace, "near-data", timeout_s=120, phase="Running")
    assert (status["cluster"], status["gpuType"]) == ("member-b", "V100-32GB")
    assert status["transferSeconds"] == 0
    runner_up = status["placement"]["runnerUp"]
    assert runner_up["cluster"] == "member-a"
    assert runner_up["transferSeconds"] == pytest.approx(5000 * 8 / 10, rel=0.01)
    chosen = status["placement"]["chosen"]
    assert chosen["completionSeconds"] < runner_up["completionSeconds"]
    wait_status(hub, namespace, "near-data", timeout_s=120, phase="Succeeded")


def test_waiting_jobs_show_position_eta_and_reason(hub: Hub, namespace: str) -> None:
    """When the clusters are full, waiting AIJobs show a position, an ETA and why they wait."""
    long = {"A100-80GB": "40s", "V100-32GB": "60s"}
    docs = [aijob(f"fill-{i}", gpus=8, durations=long) for i in range(4)]
    docs += [aijob(f"wait-{i}", gpus=8, durations=long, gpu_types=["A100-80GB"]) for i in range(2)]
    assert apply(hub, namespace, *docs).returncode == 0

    def waiting() -> list[dict[str, Any]]:
        # the fills placed first (a fresh bed's nodes may read not ready for a cycle or two)
        if any(hub.status(namespace, f"fill-{i}").get("phase") == "Queued" for i in range(4)):
            return []
        out = []
        for i in range(2):
            status = hub.status(namespace, f"wait-{i}")
            if status.get("phase") == "Queued" and status.get("position") and status.get("eta"):
                out.append(status)
        return out if len(out) == 2 else []

    statuses = wait_until(waiting, timeout_s=60, what="two waiting jobs with ETAs")
    assert sorted(s["position"] for s in statuses) == [1, 2]
    assert all(s["reason"] in {"Capacity", "Priority", "Reservation"} for s in statuses)
    rows = printed_table(hub.kubectl("get", "aijobs", "-n", namespace).stdout)
    assert list(rows[0])[:11] == [
        "NAME",
        "QUEUE",
        "POSITION",
        "PHASE",
        "CLUSTER",
        "GPUS",
        "GPU-TYPE",
        "PREDICTED",
        "START",
        "FINISH",
        "AGE",
    ]
    row = next(r for r in rows if r["NAME"] == "wait-0")
    assert row["PHASE"] == "Queued" and row["POSITION"]
    instant = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # with its date: never ambiguous
    assert instant.fullmatch(row["FINISH"]), row
    assert instant.fullmatch(row["START"]) or not row["START"], row  # empty when imminent
    assert row["GPUS"] == "8" and row["PREDICTED"]
    queue = subprocess.run(
        [
            sys.executable,
            "-m",
            "cpn",
            "queue",
            "-n",
            namespace,
            "-o",
            "json",
            "--kubeconfig",
            str(hub.kubeconfig),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    by_job = {r["aijob"]: r for r in json.loads(queue.stdout)}
    waiting = by_job[f"{namespace}/wait-0"]
    assert waiting["position"] in {1, 2} and waiting["eta"] and waiting["reason"]
    assert waiting["user"] == "alice" and waiting["group"] == "vision"
    hub.kubectl("delete", "aijobs", "--all", "-n", namespace, "--wait=false")


def test_delete_cancels_and_removes_the_member_job(hub: Hub, namespace: str) -> None:
    """Deleting a running AIJob deletes its member Job."""
    doc = aijob("forever", annotations={"testbed.cpn.io/outcome": "Hang"})
    assert apply(hub, namespace, doc).returncode == 0
    status = wait_status(hub, namespace, "forever", timeout_s=60, phase="Running")
    uid = hub.aijob(namespace, "forever")["metadata"]["uid"]
    assert len(hub.member_jobs(status["cluster"], uid)) == 1
    hub.kubectl("delete", "aijob", "forever", "-n", namespace, "--timeout=60s")
    wait_until(
        lambda: not hub.member_jobs(status["cluster"], uid), timeout_s=60, what="member Job deleted"
    )


def test_suspend_holds_and_release_runs(hub: Hub, namespace: str) -> None:
    """A suspended AIJob is held with no member Job; clearing suspend lets it run."""
    assert apply(hub, namespace, aijob("held", suspend=True)).returncode == 0
    status = wait_status(hub, namespace, "held", timeout_s=30, phase="Suspended")
    assert "cluster" not in status
    uid = hub.aijob(namespace, "held")["metadata"]["uid"]
    assert all(not hub.member_jobs(m, uid) for m in hub.tb.members)
    hub.kubectl(
        "patch",
        "aijob",
        "held",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"suspend": false}}',
    )
    wait_until(
        lambda: hub.status(namespace, "held").get("phase") == "Succeeded",
        timeout_s=60,
        what="held Succeeded after release",
    )


def test_failing_job_is_retried_then_failed_with_reason(hub: Hub, namespace: str) -> None:
    """A job whose pods fail is retried up to the policy's limit, then Failed, saying why."""
    doc = aijob(
        "broken",
        durations={"A100-80GB": "1s", "V100-32GB": "1s"},
        annotations={"testbed.cpn.io/outcome": "Failed"},
    )
    assert apply(hub, namespace, doc).returncode == 0
    status = wait_status(hub, namespace, "broken", timeout_s=90, phase="Failed")
    assert status["attempts"] == 2
    assert status["failedAttempts"] == 2  # kept by the hub's schema (not pruned), read back
    assert "no retries left" in status["message"]
    finished = next(c for c in status["conditions"] if c["type"] == "Finished")
    assert finished["status"] == "True" and finished["reason"] == "Failed"
    wait_events_of(hub, namespace, "broken", "Retrying")


def test_schema_refuses_a_malformed_aijob(hub: Hub, namespace: str) -> None:
    """The API server refuses what the schema forbids, naming the field."""
    doc = aijob("bad")
    doc["spec"]["resources"]["gpus"] = "lots"
    result = apply(hub, namespace, doc)
    assert result.returncode != 0
    assert "spec.resources.gpus" in result.stderr
    doc = aijob("shared")
    doc["spec"]["resources"].update({"gpus": 2, "gpuShare": 0.5})
    result = apply(hub, namespace, doc)
    assert result.returncode != 0 and "gpuShare" in result.stderr


def test_impossible_aijobs_are_marked_and_never_dispatched(hub: Hub, namespace: str) -> None:
    """Too many GPUs per worker, or an unknown GPU type: a condition says so; no member Job."""
    docs = [aijob("too-big", gpus=16), aijob("no-such-gpu", gpu_types=["Z9000"])]
    assert apply(hub, namespace, *docs).returncode == 0
    big = wait_status(hub, namespace, "too-big", timeout_s=30, reason="Infeasible")
    valid = next(c for c in big["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "False" and "16" in valid["message"]
    unknown = wait_status(hub, namespace, "no-such-gpu", timeout_s=30, phase="Invalid")
    valid = next(c for c in unknown["conditions"] if c["type"] == "Valid")
    assert valid["reason"] == "InvalidSpec" and "gpuTypes[0]" in valid["message"]
    for name in ("too-big", "no-such-gpu"):
        uid = hub.aijob(namespace, name)["metadata"]["uid"]
        assert all(not hub.member_jobs(m, uid) for m in hub.tb.members)


def test_policy_edit_changes_the_next_decision_and_bad_policy_is_refused(
    hub: Hub, namespace: str
) -> None:
    """A quota edit holds new jobs at once; a broken policy is refused and the old one stays."""
    cm = ["get", "configmap", "cpn-policy", "-n", "cpn-system", "-o", "json"]
    original = json.loads(hub.kubectl(*cm).stdout)["data"]["policy.yaml"]

    def set_policy(text: str) -> None:
        patch = json.dumps({"data": {"policy.yaml": text}})
        hub.kubectl(
            "patch", "configmap", "cpn-policy", "-n", "cpn-system", "--type=merge", "-p", patch
        )

    def since(marks: dict[str, int]) -> list[str]:  # Events of this test's edits only
        return new_events(hub, "cpn-system", "cpn-policy", marks)

    try:
        marks = event_marks(hub, "cpn-system", "cpn-policy")
        set_policy(TEST_POLICY + "quotas: {groups: {vision: {gpus: 0}}}\n")
        wait_until(
            lambda: "PolicyAccepted" in since(marks),
            timeout_s=30,
            what="policy accepted",
        )
        assert apply(hub, namespace, aijob("capped")).returncode == 0
        status = wait_status(hub, namespace, "capped", timeout_s=30, reason="Quota")
        assert "vision" in status["message"]
        marks = event_marks(hub, "cpn-system", "cpn-policy")
        set_policy(TEST_POLICY + "formula: '1 +'\n")
        wait_until(
            lambda: "InvalidPolicy" in since(marks),
            timeout_s=30,
            what="InvalidPolicy event",
        )
        assert hub.status(namespace, "capped")["reason"] == "Quota"  # the quota stays
    finally:
        set_policy(original)
    wait_until(
        lambda: hub.status(namespace, "capped").get("phase") == "Succeeded",
        timeout_s=60,
        what="capped runs once the quota is lifted",
    )


def test_member_clusters_report_inventory_and_fresh_metrics(hub: Hub) -> None:
    """Each MemberCluster shows Ready, its GPU inventory, and metrics read from its Prometheus."""

    def reported() -> list[dict[str, Any]]:
        items = hub.custom.list_cluster_custom_object("cpn.io", "v1alpha1", "memberclusters")
        statuses = [i.get("status") or {} for i in items["items"]]
        fresh = [s for s in statuses if (s.get("metrics") or {}).get("fresh")]
        return statuses if len(fresh) == len(hub.tb.members) else []

    statuses = wait_until(reported, timeout_s=90, what="fresh metrics on every member")
    totals = sorted(s["gpusTotal"] for s in statuses)
    assert totals == [24, 32]  # member-b: 6 x 4 V100, member-a: 4 x 8 A100
    for status in statuses:
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
    rows = printed_table(hub.kubectl("get", "memberclusters").stdout)
    assert list(rows[0])[:5] == ["NAME", "READY", "GPUS-FREE", "GPUS-TOTAL", "TYPES"]
    assert {r["TYPES"] for r in rows[1:]} == {"A100-80GB", "V100-32GB"}
