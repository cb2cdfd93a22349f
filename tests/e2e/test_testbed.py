"""The local test bed end to end: real control planes, kwok nodes, Prometheus, kubectl."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from typing import Any

import pytest
import requests
from kubernetes import client

from testbed.bed import Testbed
from testbed.spec import FINISH_AT_ANNOTATION, GPU_RESOURCE
from testbed.workloads import gpu_job, wait_for

pytestmark = pytest.mark.e2e

A100 = "NVIDIA-A100-SXM4-80GB"


def _job_condition(batch: Any, ns: str, name: str, kind: str) -> bool:
    job = batch.read_namespaced_job_status(name, ns)
    return any(c.type == kind and c.status == "True" for c in (job.status.conditions or []))


def _only_pod(core: Any, ns: str, job: str) -> Any:
    pods = core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items
    return pods[0] if len(pods) == 1 else None


def _promql(tb: Testbed, cluster: str, query: str) -> list[dict[str, Any]]:
    resp = requests.get(
        f"{tb.prometheus_url(cluster)}/api/v1/query", params={"query": query}, timeout=5
    )
    resp.raise_for_status()
    body = resp.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


# generous: the first test using the fixture also pays for bringing the bed up
@pytest.mark.timeout(240)
def test_status_reports_every_component_healthy(testbed: Testbed) -> None:
    """status() lists every component of every cluster, each running and healthy."""
    status = testbed.status()
    seen = {(c.cluster, c.component) for c in status.components}
    for spec in testbed.spec.clusters:
        for comp in spec.components:
            assert (spec.name, comp) in seen
    unhealthy = [c for c in status.components if not c.healthy]
    assert not unhealthy, unhealthy


@pytest.mark.timeout(60)
def test_up_is_idempotent(testbed: Testbed) -> None:
    """A second up() on a healthy bed starts nothing and keeps every process."""
    before = {p.pid for p in testbed.processes()}
    report = testbed.up()
    assert report.already_running
    assert report.started == []
    assert {p.pid for p in testbed.processes()} == before


@pytest.mark.timeout(60)
@pytest.mark.parametrize("member", ["member-a", "member-b"])
def test_kubectl_lists_fake_gpu_nodes(testbed: Testbed, member: str) -> None:
    """Real kubectl against each member lists its fake GPU nodes, Ready and GFD-labelled."""
    spec = testbed.spec.cluster(member)
    base = [str(testbed.kubectl), f"--kubeconfig={testbed.kubeconfig_merged}", "--context", member]
    table = subprocess.run(
        [*base, "get", "nodes"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    rows = {line.split()[0]: line.split()[1] for line in table.splitlines()[1:]}
    assert rows == {n.name: "Ready" for n in spec.nodes}
    raw = subprocess.run(
        [*base, "get", "nodes", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    nodes = {n["metadata"]["name"]: n for n in json.loads(raw)["items"]}
    for want in spec.nodes:
        got = nodes[want.name]
        labels = got["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == want.gpu_model.gfd_product
        assert labels["nvidia.com/gpu.memory"] == str(want.gpu_model.memory_mib)
        assert labels["nvidia.com/gpu.count"] == str(want.gpus)
        assert labels["nvidia.com/gpu.present"] == "true"
        assert got["status"]["allocatable"][GPU_RESOURCE] == str(want.gpus)
        assert not got["spec"].get("taints")


@pytest.mark.timeout(90)
def test_job_runs_its_duration_then_succeeds(testbed: Testbed, member_namespace: str) -> None:
    """A 2-GPU 20 s Job is bound to a matching node, runs, and is Succeeded ~20 s later."""
    ns, member = member_namespace, testbed.members[0]
    with testbed.api_client(member) as api:
        batch: Any = client.BatchV1Api(api)
        core: Any = client.CoreV1Api(api)
        batch.create_namespaced_job(ns, gpu_job("train", gpus=2, duration="20s", gpu_product=A100))

        def running_pod() -> Any:
            pod = _only_pod(core, ns, "train")
            return pod if pod is not None and pod.status.phase == "Running" else None

        pod = wait_for(running_pod, timeout_s=30, what="the Job's pod to run")
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels["nvidia.com/gpu.product"] == A100
        assert not _job_condition(batch, ns, "train", "Complete")

        wait_for(
            lambda: _job_condition(batch, ns, "train", "Complete"),
            timeout_s=45,
            what="the Job to complete",
        )
        done = core.read_namespaced_pod(pod.metadata.name, ns)
        assert done.status.phase == "Succeeded"
        started = done.status.start_time
        finished = done.status.container_statuses[0].state.terminated.finished_at
        ran_s = (finished - started).total_seconds()
        assert 19.0 <= ran_s <= 24.0, ran_s
        finish_at = dt.datetime.fromisoformat(done.metadata.annotations[FINISH_AT_ANNOTATION])
        assert abs((finish_at - started).total_seconds() - 20.0) < 1.5
        job = batch.read_namespaced_job_status("train", ns)
        assert job.status.succeeded == 1


@pytest.mark.timeout(60)
def test_job_asking_too_many_gpus_stays_pending_unschedulable(
    testbed: Testbed, member_namespace: str
) -> None:
    """A Job asking more GPUs than any node has gets a Pending, Unschedulable pod."""
    ns, member = member_namespace, testbed.members[0]
    most = max(n.gpus for n in testbed.spec.cluster(member).nodes)
    with testbed.api_client(member) as api:
        batch: Any = client.BatchV1Api(api)
        core: Any = client.CoreV1Api(api)
        batch.create_namespaced_job(ns, gpu_job("too-big", gpus=most + 1, duration="5s"))

        def unschedulable() -> Any:
            pod = _only_pod(core, ns, "too-big")
            if pod is None:
                return None
            conds = {c.type: c for c in (pod.status.conditions or [])}
            sched = conds.get("PodScheduled")
            if sched is not None and sched.status == "False" and sched.reason == "Unschedulable":
                return pod
            return None

        pod = wait_for(unschedulable, timeout_s=30, what="the pod to be Unschedulable")
        assert pod.status.phase == "Pending"
        assert not pod.spec.node_name
        assert "nvidia.com/gpu" in next(
            c.message for c in pod.status.conditions if c.type == "PodScheduled"
        )


@pytest.mark.timeout(90)
def test_prometheus_reports_gpu_util_of_running_pod(
    testbed: Testbed, member_namespace: str
) -> None:
    """While a pod runs, the member's Prometheus has DCGM_FI_DEV_GPU_UTIL for exactly its GPUs."""
    ns, member = member_namespace, testbed.members[0]
    with testbed.api_client(member) as api:
        batch: Any = client.BatchV1Api(api)
        core: Any = client.CoreV1Api(api)
        batch.create_namespaced_job(
            ns, gpu_job("busy", gpus=3, duration="1h", outcome="Hang", gpu_util_pct=70)
        )

        def running_pod() -> Any:
            pod = _only_pod(core, ns, "busy")
            return pod if pod is not None and pod.status.phase == "Running" else None

        pod = wait_for(running_pod, timeout_s=30, what="the pod to run")
        name, node = pod.metadata.name, pod.spec.node_name
        query = f'DCGM_FI_DEV_GPU_UTIL{{namespace="{ns}",pod="{name}"}}'
        series = wait_for(
            lambda: [s for s in _promql(testbed, member, query) if float(s["value"][1]) > 0],
            timeout_s=30,
            what=f"Prometheus to return {query}",
        )
        wait_for(
            lambda: len(_promql(testbed, member, query)) == 3,
            timeout_s=15,
            what="all three GPUs of the pod in Prometheus",
        )
        series = _promql(testbed, member, query)
        assert {s["metric"]["Hostname"] for s in series} == {node}
        assert {s["metric"]["container"] for s in series} == {"train"}
        assert len({s["metric"]["UUID"] for s in series}) == 3
        assert all(60 <= float(s["value"][1]) <= 80 for s in series)
        used = _promql(testbed, member, f'DCGM_FI_DEV_FB_USED{{pod="{name}"}}')
        assert len(used) == 3 and all(float(s["value"][1]) > 0 for s in used)
        idle = _promql(testbed, member, f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}",pod=""}}')
        gpus = int(core.read_node(node).status.capacity[GPU_RESOURCE])
        assert len(idle) == gpus - 3
        cpu = _promql(testbed, member, 'count by (instance) (node_cpu_seconds_total{mode="idle"})')
        assert {s["metric"]["instance"] for s in cpu} == {
            n.name for n in testbed.spec.cluster(member).nodes
        }


@pytest.mark.timeout(60)
def test_failed_outcome_fails_the_job(testbed: Testbed, member_namespace: str) -> None:
    """testbed.cpn.io/outcome: Failed makes the pod fail after its duration, and the Job fails."""
    ns, member = member_namespace, testbed.members[0]
    with testbed.api_client(member) as api:
        batch: Any = client.BatchV1Api(api)
        core: Any = client.CoreV1Api(api)
        batch.create_namespaced_job(ns, gpu_job("crash", gpus=1, duration="2s", outcome="Failed"))
        wait_for(
            lambda: _job_condition(batch, ns, "crash", "Failed"),
            timeout_s=40,
            what="the Job to fail",
        )
        pods = core.list_namespaced_pod(ns, label_selector="job-name=crash").items
        assert [p.status.phase for p in pods] == ["Failed"]
        assert pods[0].status.container_statuses[0].state.terminated.exit_code == 1


@pytest.mark.timeout(60)
def test_deleting_a_running_job_removes_its_pod(testbed: Testbed) -> None:
    """Deleting a running Job on member-b removes its pod (kwok plays the kubelet's part)."""
    from testbed.fixtures import delete_namespace, make_namespace

    member = testbed.members[1]
    v100 = testbed.spec.cluster(member).nodes[0].gpu_model.gfd_product
    ns = make_namespace(testbed, member)
    try:
        with testbed.api_client(member) as api:
            batch: Any = client.BatchV1Api(api)
            core: Any = client.CoreV1Api(api)
            batch.create_namespaced_job(
                ns, gpu_job("victim", gpus=4, duration="1h", gpu_product=v100, outcome="Hang")
            )

            def running_pod() -> Any:
                pod = _only_pod(core, ns, "victim")
                return pod if pod is not None and pod.status.phase == "Running" else None

            pod = wait_for(running_pod, timeout_s=30, what="the pod to run")
            assert (
                core.read_node(pod.spec.node_name).metadata.labels["nvidia.com/gpu.product"] == v100
            )
            batch.delete_namespaced_job("victim", ns, propagation_policy="Background")
            wait_for(
                lambda: not core.list_namespaced_pod(ns).items,
                timeout_s=30,
                what="the pod to be deleted",
            )
    finally:
        delete_namespace(testbed, member, ns)
