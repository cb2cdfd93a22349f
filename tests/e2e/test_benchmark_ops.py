"""Operating GPU benchmarks on the bed: ``cpn benchmark run``, a user job preempting a
running benchmark, and the slow-node rule on the MemberCluster. The policy leaves
``benchmarks.enabled`` off: only the GPUBenchmarks the tests ask for run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from testbed.bed import Testbed
from testbed.spec import BENCHMARK_SECONDS_ANNOTATION, BENCHMARK_SPEED_ANNOTATION
from testbed.workloads import wait_for
from tests.e2e.hubkit import Hub, aijob, apply, free_port, new_namespace, running_hub, wait_status
from tests.e2e.test_gpubenchmark import MEMBER, add_node, added_nodes, benchmark, finished
from tests.test_json_output import run_json

pytestmark = pytest.mark.e2e
__all__ = ["added_nodes"]  # the fixture, shared


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(testbed, tmp_path_factory.mktemp("benchops")) as hub:
        hub.kubectl("delete", "gpubenchmarks", "--all")  # results of an earlier run count
        yield hub


def cpn_benchmark(hub: Hub, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "cpn",
            "benchmark",
            "run",
            "--kubeconfig",
            str(hub.kubeconfig),
            *list(args),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run(hub: Hub, *args: str) -> dict[str, Any]:
    """``cpn benchmark run ARGS --json``: its one JSON document."""
    doc: dict[str, Any] = run_json(
        *("-m", "cpn", "benchmark", "run", "--kubeconfig", str(hub.kubeconfig), *args, "--json")
    )
    return doc


def benchmark_events(hub: Hub, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events about the GPUBenchmark ``name``."""
    events = hub.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.kind=GPUBenchmark,involvedObject.name={name}"
    )
    return [(e.type, e.reason, e.message) for e in events.items]


def wait_event(hub: Hub, name: str, match: Any) -> list[tuple[str, str, str]]:
    """The Events about the GPUBenchmark ``name`` once one of them satisfies ``match``
    (the operator posts Events apart from its status and condition writes: either may land
    first)."""

    def seen() -> list[tuple[str, str, str]] | None:
        events = benchmark_events(hub, name)
        return events if any(match(*event) for event in events) else None

    found: list[tuple[str, str, str]] = wait_for(seen, timeout_s=60, what=f"event on {name}")
    return found


def annotate(tb: Testbed, node: str, **notes: str) -> None:
    with tb.api_client(MEMBER) as api:
        client.CoreV1Api(api).patch_node(node, {"metadata": {"annotations": notes}})


def bench_pod_running(tb: Testbed, name: str) -> bool:
    with tb.api_client(MEMBER) as api:
        pods = client.CoreV1Api(api).list_pod_for_all_namespaces(
            label_selector=f"job-name=cpn-bench-{name}"
        )
    return any(p.spec.node_name and p.status.phase == "Running" for p in pods.items)


@pytest.mark.timeout(300)
def test_cpn_benchmark_run_creates_one_and_says_what_is_wrong(
    testbed: Testbed, hub: Hub, added_nodes: list[str], tmp_path: Path
) -> None:
    """`cpn benchmark run --node`: one GPUBenchmark with the models and budget asked, run
    to Succeeded; an unknown cluster or node, or a hub that does not answer: one line on
    stderr naming it, exit 1, nothing created."""
    node = add_node(testbed, added_nodes)
    doc = run(
        hub, "--cluster", MEMBER, "--node", node, "--models", "resnet50", "--budget-seconds", "5"
    )
    (row,) = doc["created"]
    assert (row["cluster"], row["node"], row["gpuType"]) == (MEMBER, node, "H100-80GB")
    assert (row["models"], row["budgetSeconds"]) == (["resnet50"], 5)
    body = wait_for(lambda: finished(hub, row["name"]), timeout_s=120, what=f"{row['name']} done")
    assert body["status"]["phase"] == "Succeeded", body["status"]
    assert body["status"]["samplesPerSecond"] == 2710

    before = {b["metadata"]["name"] for b in listed(hub)}
    down = tmp_path / "down.kubeconfig"
    text = hub.kubeconfig.read_text()
    config = yaml.safe_load(text)
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    down.write_text(json.dumps(config))
    cases = [
        (("--cluster", "nope"), "no MemberCluster 'nope' (known: member-a, member-b)"),
        (("--cluster", MEMBER, "--node", "nope"), f"'nope' is not a GPU node of {MEMBER}"),
        (("--cluster", MEMBER, "--kubeconfig", str(down)), "cannot reach the hub at https://"),
    ]
    for args, words in cases:
        done = cpn_benchmark(hub, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("cpn benchmark run: "), done.stderr
        assert words in lines[0], (words, lines[0])
    assert {b["metadata"]["name"] for b in listed(hub)} == before


def listed(hub: Hub) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = hub.custom.list_cluster_custom_object(
        "cpn.io", "v1alpha1", "gpubenchmarks"
    )["items"]
    return items


@pytest.mark.timeout(400)
def test_a_user_job_preempts_a_running_benchmark_which_runs_again_later(
    testbed: Testbed, hub: Hub, added_nodes: list[str]
) -> None:
    """A long benchmark runs on a new H100 node; an AIJob that needs all 8 GPUs of an H100
    arrives: cpn deletes the benchmark's Job, marks it Pending (PreemptedByUserJob, an
    Event), the AIJob runs there, and the benchmark runs again after it, to Succeeded."""
    node = add_node(testbed, added_nodes)
    annotate(testbed, node, **{BENCHMARK_SECONDS_ANNOTATION: "3600"})
    (row,) = run(hub, "--cluster", MEMBER, "--node", node, "--models", "resnet50")["created"]
    name = row["name"]
    wait_for(lambda: bench_pod_running(testbed, name), timeout_s=120, what=f"{name}'s pod runs")
    with new_namespace(hub, "preempt") as namespace:
        job = aijob("needs-8", gpus=8, gpu_types=["H100-80GB"], durations={"H100-80GB": "4s"})
        assert apply(hub, namespace, job).returncode == 0

        def preempted() -> dict[str, Any] | None:
            body = benchmark(hub, name) or {}
            status = body.get("status") or {}
            return status if status.get("reason") == "PreemptedByUserJob" else None

        status = wait_for(preempted, timeout_s=120, what=f"{name} preempted")
        # its next run, once the AIJob is done, is short (the pod simulator reads this when
        # the next pod runs)
        annotate(testbed, node, **{BENCHMARK_SECONDS_ANNOTATION: "1"})
        assert status["phase"] == "Pending" and status["preemptions"] == 1, status
        assert f"AIJob {namespace}/needs-8" in status["message"]
        assert "memberJob" not in status
        wait_event(hub, name, lambda _t, r, m: r == "PreemptedByUserJob" and namespace in m)
        done = wait_status(hub, namespace, "needs-8", timeout_s=180, phase="Succeeded")
        assert done["cluster"] == MEMBER
        body = wait_for(lambda: finished(hub, name), timeout_s=180, what=f"{name} done")
        assert body["status"]["phase"] == "Succeeded", body["status"]
        assert body["status"]["preemptions"] == 1
        # it ran again only after the AIJob: its second start is not before the AIJob's end
        assert body["status"]["startTime"] >= done["completionTime"], (body["status"], done)


def slow_condition(hub: Hub, member: str) -> dict[str, Any] | None:
    body = hub.custom.get_cluster_custom_object("cpn.io", "v1alpha1", "memberclusters", member)
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "SlowNodes"), None)


@pytest.mark.timeout(400)
def test_a_node_well_below_its_peers_is_flagged_on_its_member(
    testbed: Testbed, hub: Hub, added_nodes: list[str]
) -> None:
    """Three new H100 nodes, one reporting half the truth; `cpn benchmark run` without
    --node measures every GPU node of member-a. The slow one gets a Warning Event SlowNode
    and member-a's SlowNodes condition turns True naming it (0.50x) and no other node;
    member-b stays False. Once the slow node is gone the condition is False again."""
    fast = [add_node(testbed, added_nodes) for _ in range(2)]
    slow = add_node(testbed, added_nodes)
    annotate(testbed, slow, **{BENCHMARK_SPEED_ANNOTATION: "0.5"})
    created = run(hub, "--cluster", MEMBER, "--models", "resnet50", "--budget-seconds", "5")
    by_node = {row["node"]: row["name"] for row in created["created"]}
    assert {*fast, slow, "a100-node-0", "a100-node-3"} <= set(by_node)
    for node, name in by_node.items():
        body = wait_for(lambda n=name: finished(hub, n), timeout_s=180, what=f"{name} done")
        assert body["status"]["phase"] == "Succeeded", (node, body["status"])
    assert benchmark(hub, by_node[slow])["status"]["samplesPerSecond"] == 1355

    def flagged() -> dict[str, Any] | None:
        found = slow_condition(hub, MEMBER)
        return found if found and found["status"] == "True" else None

    condition = wait_for(flagged, timeout_s=60, what="SlowNodes True on member-a")
    assert condition["reason"] == "SlowNodes"
    assert f"{slow} resnet50 1355/s, 0.50x the median 2710/s" in condition["message"]
    assert not any(n in condition["message"] for n in [*fast, "a100-node"]), condition
    wait_event(
        hub, by_node[slow], lambda t, r, m: t == "Warning" and r == "SlowNode" and "0.50x" in m
    )
    assert all(r != "SlowNode" for n in fast for _, r, _m in benchmark_events(hub, by_node[n]))
    other = slow_condition(hub, "member-b")
    assert other is not None and other["status"] == "False", other

    with testbed.api_client(MEMBER) as api:
        client.CoreV1Api(api).delete_node(slow)
    added_nodes.remove(slow)

    def cleared() -> dict[str, Any] | None:
        found = slow_condition(hub, MEMBER)
        return found if found and found["status"] == "False" else None

    wait_for(cleared, timeout_s=60, what="SlowNodes False on member-a again")
