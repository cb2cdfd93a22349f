"""Issue 20 on the test bed: staging as a real, timed, cached step on the members.

cpn's static figure for the link member-a <-> member-b is 0.5 Gbit/s (the MemberClusters'
``spec.bandwidthGbps``); the bed's true link is 100 Gbit/s (testbed/staging.py: staging
pods end after bytes / the true link). A job's dataset lives on member-b (V100s); member-a's
A100s run it much faster. The tests run in this order, each building on the last:

1. slow link: the job stays on member-b, nothing moves, ``cpn explain`` shows member-a's
   transfer estimate (8h53m for 2 TB at 0.5 Gbit/s, more than the A100s save);
2. a staging that fails is retried after its back-off, then the AIJob fails
   (``StagingFailed``), no training Job is created and nothing is marked present;
3. five jobs pinned to A100s stage their datasets from member-b: cpn learns the link's true
   bandwidth (within 20%), shown in member-a's MemberCluster status, and each AIJob's status
   has its staging's predicted and actual seconds;
4. fast link (as learned): a job like the first now goes to member-a, ``Staging`` first then
   Running, the transfer estimate in ``cpn explain``; a second job reading the same dataset
   there stages nothing;
5. the operator killed and started again reads member-a's cache back from its MemberCluster
   status: a third reader of that dataset there stages nothing either;
6. an input declared without ``sizeBytes``: its staging reports the bed's true size, which
   member-a's cache then lists as the input's size.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import (
    Hub,
    aijob,
    apply,
    events_of,
    new_namespace,
    running_hub,
    wait_events_of,
    wait_status,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

A, B = "member-a", "member-b"  # A: A100s (fast), B: V100s, where the datasets of 1-3 live
A100, V100 = "A100-80GB", "V100-32GB"
GB = 10**9
POLICY = """
retry: {max_attempts: 2, backoff_s: 1}
data: {staging_attempts: 2, staging_backoff_s: 1}
"""
STAGING_OUTCOME = "testbed.cpn.io/staging-outcome"
STATIC_GBPS, TRUE_GBPS = 0.5, 100.0


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    testbed.set_links({(A, B): TRUE_GBPS})
    folder = tmp_path_factory.mktemp("staging")
    try:
        with running_hub(testbed, folder, policy=POLICY, bandwidth_gbps=STATIC_GBPS) as h:
            for member in (A, B):  # both must be candidates from the first job on
                wait_until(lambda m=member: ready(h, m), timeout_s=60, what=f"{member} ready")
            yield h
    finally:
        testbed.set_links({})
        fail_stagings(testbed, B, None)


def fail_stagings(tb: Testbed, member: str, outcome: str | None) -> None:
    with tb.api_client(member) as api:
        core = client.CoreV1Api(api)
        for node in core.list_node().items:
            patch = {"metadata": {"annotations": {STAGING_OUTCOME: outcome}}}
            core.patch_node(node.metadata.name, patch)


def reader(
    name: str,
    dataset: str,
    location: str,
    size: int,
    gpu_types: list[str] | None = None,
    runs: str = "5s",
    model: str = "resnet50",
    epochs: int = 20,
) -> dict[str, Any]:
    """A one-GPU job of ``model`` reading ``dataset`` (``size`` bytes, on ``location``); it
    runs ``runs`` on the bed."""
    job = aijob(
        name,
        model=model,
        gpu_types=gpu_types or [A100, V100],
        durations={A100: runs, V100: runs},
        inputs=[
            {
                "name": dataset,
                "version": "v1",
                "uri": f"s3://datasets/{dataset}",
                "sizeBytes": size,
                "location": location,
            }
        ],
    )
    job["spec"]["model"]["epochs"] = epochs
    return job


def bert(name: str, dataset: str, size: int, **kw: Any) -> dict[str, Any]:
    """A reader of a dataset on member-b whose predicted runtime no earlier test teaches the
    predictor (the others run resnet50 for seconds): bert-large, 2 epochs, much faster on
    an A100 than on a V100 as the benchmark table predicts."""
    return reader(name, dataset, B, size, model="bert-large", epochs=2, **kw)


def explain(hub: Hub, key: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "cpn", "explain", key, "--json"]
    command += ["--kubeconfig", str(hub.kubeconfig)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    view: dict[str, Any] = json.loads(done.stdout)
    return view


def ready(hub: Hub, member: str) -> bool:
    conditions = member_status(hub, member).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def member_status(hub: Hub, name: str) -> dict[str, Any]:
    done = hub.kubectl("get", "membercluster", name, "-o", "json")
    status: dict[str, Any] = json.loads(done.stdout).get("status") or {}
    return status


def staging_jobs(tb: Testbed, member: str) -> list[str]:
    with tb.api_client(member) as api:
        jobs = client.BatchV1Api(api).list_job_for_all_namespaces(label_selector="cpn.io/staging")
    return [j.metadata.name for j in jobs.items]


def test_slow_link_keeps_the_job_with_its_data_and_explain_shows_the_transfer(hub: Hub) -> None:
    with new_namespace(hub, "stage-slow") as ns:
        slow = bert("slow", "corpus", 2000 * GB, runs="300s")  # still running when explained
        assert apply(hub, ns, slow).returncode == 0
        status = wait_status(hub, ns, "slow", timeout_s=90, phase="Running")
        predicted = status["predictedRuntimeSeconds"]
        assert predicted[V100] - predicted[A100] > 100, predicted  # member-a is much faster
        assert status["cluster"] == B and not status.get("staging"), json.dumps(status)
        assert "Staging" not in events_of(hub, ns, "slow")
        runner_up = status["placement"]["runnerUp"]
        assert (runner_up["cluster"], runner_up["transferSeconds"]) == (A, 32000.0), runner_up
        text = explain(hub, f"{ns}/slow")["explanation"]
        assert B in text and A in text and "transfer 8h53m" in text, text


def test_a_failing_staging_is_retried_then_fails_the_aijob(hub: Hub) -> None:
    fail_stagings(hub.tb, B, "Failed")
    try:
        with new_namespace(hub, "stage-fail") as ns:
            doomed = reader("doomed", "broken", A, GB, gpu_types=[V100])
            assert apply(hub, ns, doomed).returncode == 0
            status = wait_status(hub, ns, "doomed", timeout_s=120, phase="Failed")
            assert status["reason"] == "StagingFailed", json.dumps(status)
            assert "failed 2 time(s)" in status["message"], status["message"]
            wait_events_of(hub, ns, "doomed", "StagingRetry", "StagingFailed")
            uid = hub.aijob(ns, "doomed")["metadata"]["uid"]
            assert not hub.member_jobs(B, uid)  # no training Job was ever created
            entries = (member_status(hub, B).get("cache") or {}).get("entries") or []
            assert "broken@v1" not in [e["input"] for e in entries]
    finally:
        fail_stagings(hub.tb, B, None)


def test_five_stagings_teach_cpn_the_true_link(hub: Hub) -> None:
    """250 GB each over the true 100 Gbit/s: 20 s per staging (cpn predicts 4000 s)."""
    with new_namespace(hub, "stage-learn") as ns:
        jobs = [reader(f"learn-{i}", f"shard-{i}", B, 250 * GB, gpu_types=[A100]) for i in range(5)]
        assert apply(hub, ns, *jobs).returncode == 0
        for i in range(5):
            wait_status(hub, ns, f"learn-{i}", timeout_s=240, phase="Succeeded")

        def learned() -> dict[str, Any] | None:
            links = (member_status(hub, A).get("cache") or {}).get("links") or []
            row = next((r for r in links if r["from"] == B), None)
            return row if row is not None and row["stagings"] >= 5 else None

        row = wait_until(learned, timeout_s=60, what="member-a's learned link from member-b")
        assert row["gbps"] == pytest.approx(TRUE_GBPS, rel=0.2), row
        done = hub.status(ns, "learn-0")["staging"]
        assert done["predictedSeconds"] == pytest.approx(4000.0, rel=0.01), done
        assert done["actualSeconds"] == pytest.approx(20.0, rel=0.5), done


def test_fast_link_moves_the_job_to_the_faster_cluster_after_staging(hub: Hub) -> None:
    """The link as learned: 200 GB in about 16 s, so member-a's A100s win."""
    with new_namespace(hub, "stage-fast") as ns:
        fast = bert("fast", "imagenet", 200 * GB, runs="300s")
        assert apply(hub, ns, fast).returncode == 0
        staging = wait_status(hub, ns, "fast", timeout_s=90, phase="Staging")
        assert staging["cluster"] == A and staging["staging"]["inputs"] == ["imagenet@v1"]
        status = wait_status(hub, ns, "fast", timeout_s=90, phase="Running")
        assert status["staging"]["predictedSeconds"] < 30, json.dumps(status)
        assert status["staging"]["actualSeconds"] > 0, json.dumps(status)
        wait_events_of(hub, ns, "fast", "Staging", "Staged")
        text = explain(hub, f"{ns}/fast")["explanation"]
        assert A in text and "transfer" in text, text
        cache = wait_until(
            lambda: member_status(hub, A).get("cache") or None, timeout_s=30, what="A's cache"
        )
        assert "imagenet@v1" in [e["input"] for e in cache["entries"]], cache

        # a second job reading the same dataset, placed on member-a, stages nothing
        again = bert("again", "imagenet", 200 * GB, gpu_types=[A100])
        assert apply(hub, ns, again).returncode == 0
        second = wait_status(hub, ns, "again", timeout_s=90, phase="Running")
        assert second["cluster"] == A and not second.get("staging"), json.dumps(second)
        assert "Staging" not in events_of(hub, ns, "again")
        assert staging_jobs(hub.tb, A) == []  # the one staging Job was removed once done


def test_the_cache_survives_an_operator_restart(hub: Hub) -> None:
    entries = (member_status(hub, A).get("cache") or {}).get("entries") or []
    assert "imagenet@v1" in [e["input"] for e in entries], entries
    hub.proc.send_signal(signal.SIGKILL)
    hub.proc.wait(timeout=10)
    hub.restart()
    with new_namespace(hub, "stage-restart") as ns:
        after = bert("after", "imagenet", 200 * GB, gpu_types=[A100])
        assert apply(hub, ns, after).returncode == 0
        status = wait_status(hub, ns, "after", timeout_s=120, phase="Running")
        assert status["cluster"] == A and not status.get("staging"), json.dumps(status)
        assert "Staging" not in events_of(hub, ns, "after")


def test_an_input_without_a_size_learns_it_from_its_first_staging(hub: Hub) -> None:
    """No ``sizeBytes``: the staging copies the bed's true 50 GB and reports it; cpn keeps
    it as the input's size in member-a's cache."""
    hub.tb.set_links({(A, B): TRUE_GBPS}, sizes={"unsized@v1": 50 * GB})
    with new_namespace(hub, "stage-unsized") as ns:
        job = reader("unsized", "unsized", B, 0, gpu_types=[A100])
        del job["spec"]["inputs"][0]["sizeBytes"]
        assert apply(hub, ns, job).returncode == 0
        wait_status(hub, ns, "unsized", timeout_s=120, phase="Succeeded")

        def entry() -> dict[str, Any] | None:
            entries = (member_status(hub, A).get("cache") or {}).get("entries") or []
            return next((e for e in entries if e["input"] == "unsized@v1"), None)

        row = wait_until(entry, timeout_s=60, what="member-a's cache entry of unsized@v1")
        assert row["sizeBytes"] == 50 * GB, row
