"""GPU benchmarks on the bed: the simulated benchmark pod, then cpn's whole loop (a node of a
GPU type the predictor never saw joins a member, its GPUBenchmark runs, the predictor learns)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from testbed.bed import Testbed
from testbed.spec import BENCHMARK_MESSAGE_ANNOTATION, GPU_RESOURCE, NodeSpec
from testbed.workloads import wait_for

pytestmark = pytest.mark.e2e

MEMBER = "member-a"


def h100_node(tb: Testbed, name: str, message: str | None = None) -> dict[str, Any]:
    gpu = next(g for g in tb.spec.gpu_models if g.key == "H100-80GB")
    manifest = NodeSpec(name=name, gpu_model=gpu, gpus=8, cpu=96, memory_gib=1024).manifest()
    if message is not None:
        manifest["metadata"]["annotations"][BENCHMARK_MESSAGE_ANNOTATION] = message
    return manifest


@pytest.fixture
def added_nodes(testbed: Testbed) -> Iterator[list[str]]:
    """Names of nodes a test adds to member-a; deleted afterwards."""
    names: list[str] = []
    yield names
    with testbed.api_client(MEMBER) as api:
        core: Any = client.CoreV1Api(api)
        for name in names:
            try:
                core.delete_node(name)
            except ApiException as err:
                if err.status != 404:
                    raise


def add_node(tb: Testbed, added: list[str], message: str | None = None) -> str:
    name = f"h100-{uuid.uuid4().hex[:6]}"
    with tb.api_client(MEMBER) as api:
        core: Any = client.CoreV1Api(api)
        core.create_node(h100_node(tb, name, message))
        added.append(name)

        def ready() -> bool:
            node = core.read_node(name)
            return any(
                c.type == "Ready" and c.status == "True" for c in node.status.conditions or []
            )

        wait_for(ready, timeout_s=30, what=f"node {name} Ready")
    return name


def terminated_message(core: Any, namespace: str, job: str) -> str | None:
    pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
    if len(pods) != 1 or pods[0].status.phase != "Succeeded":
        return None
    state = pods[0].status.container_statuses[0].state
    return str(state.terminated.message or "") if state.terminated else None


@pytest.mark.timeout(120)
def test_a_benchmark_pod_ends_with_the_beds_truth(
    testbed: Testbed, member_namespace: str, added_nodes: list[str]
) -> None:
    """A pod labelled cpn.io/benchmark on a fake H100 ends Succeeded, its termination message
    the workload's result document with the H100 truth of nodes.yaml."""
    node = add_node(testbed, added_nodes)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "bench"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"cpn.io/benchmark": "probe"}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "bench",
                            "image": "cpn-workloads:0.1.0",
                            "command": ["python", "-m", "cpn_workloads"],
                            "args": ["bench", "--models", "resnet50", "--budget-seconds", "300"],
                            "resources": {"limits": {GPU_RESOURCE: "1"}},
                        }
                    ],
                },
            },
        },
    }
    with testbed.api_client(MEMBER) as api:
        client.BatchV1Api(api).create_namespaced_job(member_namespace, job)
        core: Any = client.CoreV1Api(api)
        message = wait_for(
            lambda: terminated_message(core, member_namespace, "bench"),
            timeout_s=60,
            what="the benchmark pod's termination message",
        )
    doc = json.loads(message)
    assert doc["kind"] == "cpn.io/gpu-benchmark" and doc["node"] == node
    assert [(r["model"], r["batch_size"], r["samples_per_s"]) for r in doc["results"]] == [
        ("resnet50", 64, 2710)
    ]
