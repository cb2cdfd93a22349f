"""Faults on the test bed: a member's API server or Prometheus stops, the hub's API server
restarts, a watch expires (410 Gone). Nothing is lost, nothing runs twice."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml
from kubernetes import client

from cpn.adapters.kube import Informer
from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import (
    Hub,
    aijob,
    apply,
    events_of,
    member_jobs_by_uid,
    new_namespace,
    running_hub,
    wait_events_of,
    wait_status,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

#: Short fault timers so the tests take seconds: NotReady after 2 s of failed watches,
#: jobs requeued after 20 s, Prometheus samples stale after 8 s, a cycle every 2 s.
TIMERS = {"member_grace_s": 2, "member_timeout_s": 20, "metrics_max_age_s": 8, "interval_s": 2}


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    # One operator and no supervisor here: with the Lease on, the hub API server's restart
    # (longer than the 6 s Lease) makes it give up leading and exit, as it should under a
    # Deployment that restarts it (tests/e2e/test_ha.py covers that). These tests are
    # about watches and members, so the operator runs without leader election.
    folder = tmp_path_factory.mktemp("faults")
    with running_hub(testbed, folder, args=("--no-leader-elect",), **TIMERS) as hub:
        yield hub


@pytest.fixture
def namespace(hub: Hub) -> Iterator[str]:
    with new_namespace(hub, "fault", user="carol", group="speech") as name:
        yield name


def member_condition(hub: Hub, member: str, kind: str) -> dict[str, Any]:
    body = hub.custom.get_cluster_custom_object("cpn.io", "v1alpha1", "memberclusters", member)
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: dict[str, Any] = cond
            return found
    return {}


def uid_of(hub: Hub, namespace: str, name: str) -> str:
    return str(hub.aijob(namespace, name)["metadata"]["uid"])


def test_member_apiserver_down_requeues_its_jobs_and_nothing_runs_twice(
    hub: Hub, namespace: str
) -> None:
    """A member whose API server stops turns NotReady with the reason; nothing new goes there;
    its jobs are requeued after the timeout and, when it returns, run once more there while
    their old member Jobs are removed: one member Job per AIJob in the end."""
    slow = {"A100-80GB": "25s", "V100-32GB": "25s"}
    pinned = [aijob(f"pinned-{i}", gpus=4, gpu_types=["V100-32GB"], durations=slow) for i in (0, 1)]
    assert apply(hub, namespace, *pinned).returncode == 0
    for i in (0, 1):
        status = wait_status(hub, namespace, f"pinned-{i}", timeout_s=90, phase="Running")
        assert status["cluster"] == "member-b"
    hub.tb.stop_component("member-b", "kube-apiserver")
    try:
        ready = wait_until(
            lambda: (
                (c := member_condition(hub, "member-b", "Ready")).get("status") == "False" and c
            ),
            timeout_s=60,
            what="member-b NotReady",
        )
        assert ready["reason"] == "Unreachable"
        assert "GET /readyz" in ready["message"]  # names the failing probe and its error
        # Nothing new goes to the dead member: a V100-only job waits, one that may use
        # either type runs on member-a.
        late = [
            aijob("late-v100", gpu_types=["V100-32GB"]),
            aijob("late-any", gpu_types=["V100-32GB", "A100-80GB"]),
        ]
        assert apply(hub, namespace, *late).returncode == 0
        done = wait_status(hub, namespace, "late-any", timeout_s=90, phase="Succeeded")
        assert done["cluster"] == "member-a"
        # After the timeout the pinned jobs are requeued, with the reason in an Event.
        for i in (0, 1):
            wait_events_of(hub, namespace, f"pinned-{i}", "Requeued", timeout_s=90)
            wait_status(hub, namespace, f"pinned-{i}", timeout_s=30, phase="Queued")
        assert hub.status(namespace, "late-v100").get("phase") == "Queued"
        assert "DispatchFailed" not in events_of(hub, namespace, "late-v100")
    finally:
        hub.tb.start_component("member-b", "kube-apiserver")
    for name in ("pinned-0", "pinned-1", "late-v100"):
        status = wait_status(hub, namespace, name, timeout_s=180, phase="Succeeded")
        assert status["cluster"] == "member-b"
    # The stale first attempts were removed: one member Job per AIJob, the live attempt.
    uids = {uid_of(hub, namespace, f"pinned-{i}") for i in (0, 1)}

    def one_job_each() -> bool:
        counts = member_jobs_by_uid(hub.tb)
        return all(counts[uid] == 1 for uid in uids)

    wait_until(one_job_each, timeout_s=60, what="stale member Jobs removed")
    for uid in uids:
        (job,) = hub.member_jobs("member-b", uid)
        assert job.metadata.labels["cpn.io/attempt"] == "2"
    assert hub.proc.poll() is None, "the operator kept running"


def test_prometheus_down_degrades_metrics_and_scheduling_goes_on(hub: Hub, namespace: str) -> None:
    """With a member's Prometheus stopped the MemberCluster says metrics are degraded, jobs
    are still placed from the API's accounting, and the condition recovers."""
    wait_until(
        lambda: member_condition(hub, "member-a", "MetricsFresh").get("status") == "True",
        timeout_s=60,
        what="member-a metrics fresh",
    )
    hub.tb.stop_component("member-a", "prometheus")
    try:
        degraded = wait_until(
            lambda: (
                (c := member_condition(hub, "member-a", "MetricsFresh")).get("status") == "False"
                and c
            ),
            timeout_s=90,
            what="member-a metrics degraded",
        )
        assert degraded["reason"] == "Degraded"
        assert "API's accounting" in degraded["message"]
        assert apply(hub, namespace, aijob("no-metrics", gpus=8)).returncode == 0
        status = wait_status(hub, namespace, "no-metrics", timeout_s=90, phase="Succeeded")
        assert status["cluster"] == "member-a"
    finally:
        hub.tb.start_component("member-a", "prometheus")
    wait_until(
        lambda: member_condition(hub, "member-a", "MetricsFresh").get("status") == "True",
        timeout_s=90,
        what="member-a metrics fresh again",
    )


def test_hub_apiserver_restart_loses_no_event(hub: Hub, namespace: str) -> None:
    """Jobs that finish while the hub's API server is down are recorded when it returns,
    and AIJobs applied afterwards are scheduled: the operator resumes its watches."""
    quick = {"A100-80GB": "4s", "V100-32GB": "4s"}
    docs = [aijob(f"h{i}", durations=quick) for i in range(3)]
    assert apply(hub, namespace, *docs).returncode == 0
    for i in range(3):
        wait_status(hub, namespace, f"h{i}", timeout_s=90, phase="Running")
    uids = {uid_of(hub, namespace, f"h{i}") for i in range(3)}
    hub.tb.stop_component("hub", "kube-apiserver")
    try:

        def finished_on_members() -> bool:
            done = 0
            for member in hub.tb.members:
                with hub.tb.api_client(member) as api:
                    for job in (
                        client.BatchV1Api(api)
                        .list_job_for_all_namespaces(label_selector="cpn.io/aijob-uid")
                        .items
                    ):
                        if job.metadata.labels["cpn.io/aijob-uid"] in uids:
                            done += bool(job.status.succeeded)
            return done == len(uids)

        wait_until(finished_on_members, timeout_s=90, what="member Jobs done while hub is down")
    finally:
        hub.tb.start_component("hub", "kube-apiserver")
    for i in range(3):
        wait_status(hub, namespace, f"h{i}", timeout_s=120, phase="Succeeded")
    assert apply(hub, namespace, aijob("after")).returncode == 0
    wait_status(hub, namespace, "after", timeout_s=90, phase="Succeeded")
    assert hub.proc.poll() is None, "the operator kept running"


def test_member_kubeconfig_that_runs_a_program_is_refused(hub: Hub) -> None:
    """A member Secret whose kubeconfig would run a program (an exec plugin) is never
    loaded: the MemberCluster is NotReady with the field named, the others keep working."""
    exec_kubeconfig = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": "x", "user": {"exec": {"command": "/bin/id"}}}],
            "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
            "current-context": "x",
        }
    )
    secret = {
        "metadata": {"name": "member-rogue", "namespace": "cpn-system"},
        "stringData": {"kubeconfig": exec_kubeconfig},
    }
    member = {
        "apiVersion": "cpn.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": "rogue"},
        "spec": {"kubeconfigSecret": {"name": "member-rogue"}},
    }
    hub.core.create_namespaced_secret("cpn-system", secret)
    hub.custom.create_cluster_custom_object("cpn.io", "v1alpha1", "memberclusters", member)
    try:
        ready = wait_until(
            lambda: (c := member_condition(hub, "rogue", "Ready")).get("status") == "False" and c,
            timeout_s=60,
            what="rogue member refused",
        )
        assert ready["message"].startswith("kubeconfig: ")
        assert "exec" in ready["message"]
        # The others keep working (run alone, the operator may have started just now, so
        # member-a's first condition may still be on its way: waited for, not assumed).
        wait_until(
            lambda: member_condition(hub, "member-a", "Ready").get("status") == "True",
            timeout_s=60,
            what="member-a Ready beside the refused member",
        )
    finally:
        hub.custom.delete_cluster_custom_object("cpn.io", "v1alpha1", "memberclusters", "rogue")
        hub.core.delete_namespaced_secret("member-rogue", "cpn-system")


class _StaleInformer(Informer):
    """An informer whose first watch starts from a resourceVersion long expired."""

    lists = 0

    def _relist(self) -> str:
        version = super()._relist()
        self.lists += 1
        return "1" if self.lists == 1 else version


def test_watch_expiry_410_relists_and_delivers_later_events(hub: Hub, namespace: str) -> None:
    """The real API server answers a watch from an expired version with 410 Gone; the
    informer lists again and goes on delivering events."""
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def record(event: str, obj: Mapping[str, Any] | None) -> None:
        if obj is not None and event in {"ADDED", "MODIFIED"}:
            with lock:
                seen.append((event, obj["metadata"]["name"]))

    core = client.CoreV1Api(hub.api)
    informer = _StaleInformer(
        "stale", hub.api, core.list_namespaced_config_map, record, namespace=namespace
    )
    informer.start()
    try:
        wait_until(lambda: informer.lists >= 2, timeout_s=30, what="a second list after 410")
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "after-410"}})
        wait_until(
            lambda: ("ADDED", "after-410") in seen, timeout_s=30, what="event after the re-list"
        )
    finally:
        informer.stop()
    assert informer.lists == 2


def test_faults_left_the_bed_whole(testbed: Testbed) -> None:
    """After the fault tests every component of the bed is running and healthy again."""
    assert testbed.status().healthy
