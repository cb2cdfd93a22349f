"""``--json`` / ``-o json`` of the commands that need a running cluster: one JSON document
on stdout and nothing else (the offline ones are in tests/test_json_output.py).

The benchmarks run at their smallest on the session's bed and leave it up (--keep-bed).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from cpn.cli.devbed import stop_process
from testbed.bed import Testbed
from testbed.workloads import wait_for
from tests.e2e.hubkit import Hub, aijob, apply, new_namespace, orphans, running_hub, wait_status
from tests.test_json_output import run_json

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(testbed, tmp_path_factory.mktemp("json")) as hub:
        yield hub


def test_queue_json(hub: Hub) -> None:
    """`cpn queue -o json`: the rows of the namespace, as one document."""
    with new_namespace(hub, "json") as namespace:
        assert apply(hub, namespace, aijob("one")).returncode == 0
        wait_status(hub, namespace, "one", timeout_s=120, phase="Succeeded")
        config = str(hub.kubeconfig)
        rows = run_json(
            *("-m", "cpn", "queue", "--kubeconfig", config, "-n", namespace, "--all", "-o", "json")
        )
        assert [r["aijob"] for r in rows] == [f"{namespace}/one"]
        every = run_json("-m", "cpn", "queue", "--kubeconfig", config, "-A", "--all", "-o", "json")
        assert f"{namespace}/one" in {r["aijob"] for r in every}


def test_testbed_status_json(testbed: Testbed) -> None:
    doc = run_json("-m", "cpn", "testbed", "status", "--json")
    assert {c["component"] for c in doc} >= {"kube-apiserver", "etcd"}
    assert all(c["healthy"] for c in doc)


def namespaces(tb: Testbed, cluster: str) -> set[str]:
    with tb.api_client(cluster) as api:
        return {n.metadata.name for n in client.CoreV1Api(api).list_namespace().items}


@pytest.mark.parametrize(
    ("script", "args", "key"),
    [
        ("bench_dispatch.py", ("--n", "4", "--workers", "2"), "direct"),
        ("bench_latency.py", ("--rate", "2", "--seconds", "2"), "latency_s"),
        (
            "bench_memory.py",
            ("--n", "4", "--finished", "3", "--steady-s", "2", "--restart"),
            "restart",
        ),
        (
            "bench_peer.py",
            ("--n", "4", "--latency-n", "2", "--rate", "2", "--modes", "direct"),
            "direct",
        ),
    ],
)
def test_bench_json(hub: Hub, script: str, args: tuple[str, ...], key: str) -> None:
    """Each bench starts its own operator: the module's is stopped while it runs. The
    namespaces a bench made are deleted after it, AIJobs first (the operator removes their
    member Jobs), and the metrics stack it stopped is started again, so later tests find
    the bed as it was."""
    before = {c: namespaces(hub.tb, c) for c in hub.tb.clusters}
    stop_process(hub.proc)
    try:
        doc = run_json(f"bench/{script}", *args, "--keep-bed", "--json")
    finally:
        hub.tb.up()  # the benches stop the bed's metrics stack (dcgm, prometheus)
        hub.restart()
        for made in namespaces(hub.tb, "hub") - before["hub"]:
            hub.kubectl("delete", "aijobs", "--all", "-n", made, "--timeout=120s", check=False)
            hub.kubectl("delete", "namespace", made, "--wait=false", check=False)
        for member in hub.tb.members:  # bench_dispatch's direct Jobs
            with hub.tb.api_client(member) as api:
                for made in namespaces(hub.tb, member) - before[member]:
                    client.CoreV1Api(api).delete_namespace(made)
        # The bench's AIJobs may be deleted before the restarted operator listed them (or
        # while none ran): its sweep must remove their member Jobs, which would otherwise
        # hold the members' GPUs for every later test (bench_memory's run for hours).
        wait_for(
            lambda: not orphans(hub.tb), timeout_s=120, interval_s=1, what="no orphaned member Job"
        )
    assert key in doc and doc["bench"] == script.removeprefix("bench_").removesuffix(".py")
    if script == "bench_dispatch.py":  # the hub's own count of calls: the bench's creates
        assert doc["cpn"]["hub_requests_per_aijob"].get("POST aijobs", 0) >= 1
    if script == "bench_memory.py":  # the finished ones are not counted as waiting
        assert doc["aijobs"]["pending"] + doc["aijobs"]["running"] == 4
        assert doc["restart"]["to_first_full_cycle_s"] > 0
        assert doc["restart"]["hub_list_alone_s"] > 0
