"""Issue 17 item 5 on the test bed: the first job of a model runs alone on its node, and a
running AIJob shows its GPUs' utilisation and memory.

member-a has 4 nodes of 8 A100s. A known model's job takes 7 GPUs of one node; a job of a
model the predictor has never seen (a fresh name) would, by best fit, go to the 1 GPU left
beside it: under ``placement.first_of_model_alone`` it lands on an empty node instead. A
second known job of 2 GPUs would, by best fit, go beside the new one (7 GPUs free there): it
goes to another node. The first job's pods are annotated so that the bed's simulated
dcgm-exporter reports 55 % utilisation and half the framebuffer on each of its GPUs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cpn.api.aijob import parse_time
from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import Hub, aijob, apply, new_namespace, running_hub, wait_status

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

POLICY = """
retry: {max_attempts: 2, backoff_s: 1}
placement: {first_of_model_alone: true}
"""
A100 = "A100-80GB"
A100_MIB = 81920  # the bed's A100 framebuffer (testbed/nodes.yaml), 0.75 % reserved


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(testbed, tmp_path_factory.mktemp("alone"), policy=POLICY) as h:
        yield h


def job(name: str, gpus: int, model: str, **annotations: str) -> dict[str, Any]:
    """A job on member-a's A100s that runs for 10 minutes (deleted at the end)."""
    return aijob(
        name,
        gpus=gpus,
        model=model,
        gpu_types=[A100],
        durations={A100: "600s"},
        annotations=annotations or None,
    )


def node_of(status: dict[str, Any]) -> str:
    (node,) = set(status["nodes"])
    return str(node)


def test_first_job_of_a_model_runs_alone_and_gpu_usage_shows(hub: Hub) -> None:
    new_model = f"mystery-net-{uuid.uuid4().hex[:6]}"  # never seen, whatever ran before
    with new_namespace(hub, "alone") as ns:
        usage = {"testbed.cpn.io/gpu-util": "55", "testbed.cpn.io/gpu-mem-fraction": "0.5"}
        assert apply(hub, ns, job("known-1", 7, "resnet50", **usage)).returncode == 0
        first = wait_status(hub, ns, "known-1", phase="Running", timeout_s=120)
        assert "runsAlone" not in first
        busy = node_of(first)

        assert apply(hub, ns, job("new-1", 1, new_model)).returncode == 0
        new = wait_status(hub, ns, "new-1", phase="Running", runsAlone=True, timeout_s=120)
        alone = node_of(new)
        assert alone != busy  # best fit alone would have put it in the 1 GPU beside known-1
        admitted = {c["type"]: c for c in new["conditions"]}["Admitted"]
        assert (
            f"first job of model {new_model}: runs alone on its node for a clean measurement"
            in admitted["message"]
        )

        assert apply(hub, ns, job("known-2", 2, "resnet50")).returncode == 0
        second = wait_status(hub, ns, "known-2", phase="Running", timeout_s=120)
        assert node_of(second) not in {alone, busy}  # best fit would have chosen `alone`
        assert "runsAlone" not in second
        on_alone = [
            a["metadata"]["name"]
            for a in hub.aijobs(ns)
            if alone in ((a.get("status") or {}).get("nodes") or ())
        ]
        assert on_alone == ["new-1"]

        # GPU usage of the running known-1: 7 GPUs at 55 % (+-3 % wobble), half of each
        # GPU's framebuffer, sampled moments ago.
        def with_usage() -> dict[str, Any] | None:
            status = hub.status(ns, "known-1")
            return status if "gpuUtilizationPercent" in status else None

        status = wait_until(with_usage, timeout_s=120, what="known-1 gpuUtilizationPercent")
        assert status["phase"] == "Running"
        assert 52.0 <= status["gpuUtilizationPercent"] <= 58.0
        per_gpu = round((A100_MIB - round(A100_MIB * 0.0075)) * 0.5)
        assert status["gpuMemoryUsedMiB"] == 7 * per_gpu
        sampled = parse_time(status["gpuMetricsTime"])
        assert sampled is not None and time.time() - sampled < 180
