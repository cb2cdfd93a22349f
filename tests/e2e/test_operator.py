"""The operator end to end on the test bed: AIJobs applied with kubectl run where cpn chose."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from cpn.adapters.kube import client_from_kubeconfig
from cpn.devbed import bootstrap, start_operator, wait_until
from testbed.bed import Testbed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


class Hub:
    """The hub with the operator running: helpers to apply and read AIJobs."""

    def __init__(self, tb: Testbed, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.tb = tb
        self.proc = proc
        self.log = log
        self.kubeconfig = tb.kubeconfig("hub")
        self.api = client_from_kubeconfig(self.kubeconfig.read_text())
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    def kubectl(
        self, *args: str, input_: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.tb.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
            input=input_,
            text=True,
            capture_output=True,
            check=check,
        )

    def aijob(self, namespace: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(
            "cpn.io", "v1alpha1", namespace, "aijobs", name
        )

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        return self.aijob(namespace, name).get("status") or {}

    def member_jobs(self, cluster: str, uid: str) -> list[Any]:
        with self.tb.api_client(cluster) as api:
            jobs = client.BatchV1Api(api).list_job_for_all_namespaces(
                label_selector=f"cpn.io/aijob-uid={uid}"
            )
            return list(jobs.items)


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    members = {m: testbed.kubeconfig(m) for m in testbed.members}
    bootstrap(
        testbed.kubectl,
        testbed.kubeconfig("hub"),
        members,
        prometheus={m: testbed.prometheus_url(m) for m in testbed.members},
    )
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = start_operator(testbed.kubeconfig("hub"), log, interval_s=5, debounce_s=0.1)
    hub = Hub(testbed, proc, log)
    try:
        yield hub
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(log.read_text()[-5000:])


@pytest.fixture
def namespace(hub: Hub) -> Iterator[str]:
    name = f"team-{uuid.uuid4().hex[:6]}"
    hub.core.create_namespace(
        {"metadata": {"name": name, "labels": {"cpn.io/user": "alice", "cpn.io/group": "vision"}}}
    )
    yield name
    hub.kubectl("delete", "aijobs", "--all", "-n", name, "--wait=false", check=False)


def aijob(
    name: str,
    *,
    gpus: int = 1,
    model: str = "resnet50",
    workers: int = 1,
    durations: dict[str, str] | None = None,
    gpu_types: list[str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """An AIJob manifest whose simulated runtime on the test bed depends on the GPU type."""
    durations = durations or {"A100-80GB": "6s", "V100-32GB": "15s"}
    notes = {
        "cpn.io/per-gpu-type": json.dumps({"testbed.cpn.io/duration": durations}),
        **(annotations or {}),
    }
    resources: dict[str, Any] = {"gpus": gpus, "cpu": "2", "memory": "8Gi"}
    if gpu_types:
        resources["gpuTypes"] = gpu_types
    return {
        "apiVersion": "cpn.io/v1alpha1",
        "kind": "AIJob",
        "metadata": {"name": name},
        "spec": {
            "workers": workers,
            "resources": resources,
            "model": {"name": model, "batchSize": 64, "datasetSamples": 50000, "epochs": 1},
            "template": {
                "metadata": {"annotations": notes},
                "spec": {"containers": [{"name": "train", "image": "trainer:1"}]},
            },
            **spec,
        },
    }


def apply(hub: Hub, namespace: str, *docs: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return hub.kubectl(
        "apply", "-n", namespace, "-f", "-", input_=yaml.safe_dump_all(docs), check=False
    )


def test_aijobs_run_where_planned_and_succeed(hub: Hub, namespace: str) -> None:
    """Applied AIJobs become member Jobs on the chosen cluster, run, and end Succeeded."""
    result = apply(hub, namespace, aijob("a"), aijob("b", gpus=4), aijob("c", gpus=8))
    assert result.returncode == 0, result.stderr
    for name in ("a", "b", "c"):
        status = wait_until(
            lambda n=name: (s := hub.status(namespace, n)).get("phase") == "Succeeded" and s,
            timeout_s=120,
            what=f"{name} Succeeded",
        )
        assert status["actualRuntimeSeconds"] > 0
        assert status["cluster"] in hub.tb.members
        uid = hub.aijob(namespace, name)["metadata"]["uid"]
        jobs = hub.member_jobs(status["cluster"], uid)
        assert len(jobs) == 1
        assert jobs[0].metadata.labels["cpn.io/aijob-name"] == name
        # The A100s finish these models sooner: cpn should have chosen them.
        assert status["gpuType"] == "A100-80GB"
