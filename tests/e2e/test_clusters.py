"""``cpn clusters`` and per-domain quotas on the test bed (issue 21 item 3).

As in test_domains, two of member-a's A100 nodes are labelled ``test.cpn.io/pool=fast`` and
make domain ``fast``, bound to queue ``fast``; group ``vision`` may use at most 8 GPUs in it
(``quotas.groups.vision.domains.fast.gpus``). Of two whole-node jobs of queue fast, one runs
and the other waits for that quota although the domain's second node is free;
``cpn clusters --json`` then shows the real MemberClusters: member-a ready, 8 of 16 GPUs of
domain fast free, one cpn job running there, figures as of the operator's last probe.
Who may not list MemberClusters (or AIJobs) is told so, by the hub's real RBAC; the data
cache a staging leaves on member-a is shown as the operator wrote it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import Hub, aijob, apply, new_namespace, wait_status
from tests.e2e.test_domains import A100, FAST_NODES, LABEL, MEMBER, fast_pool_hub
from tests.e2e.test_security import token_kubeconfig
from tests.e2e.test_staging import reader
from tests.test_json_output import ROOT, run_json

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

POLICY = f"""
retry: {{max_attempts: 2, backoff_s: 1}}
domains:
  fast: {{clusters: [{MEMBER}], labels: {{{LABEL}: fast}}, queues: [fast]}}
quotas:
  groups:
    vision:
      domains:
        fast: {{gpus: 8}}
"""


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with fast_pool_hub(testbed, tmp_path_factory.mktemp("clusters"), POLICY) as h:
        yield h


def fast_job(name: str) -> dict[str, Any]:
    """8 A100s (a whole node) for 5 minutes, in queue fast."""
    job = aijob(name, gpus=8, gpu_types=[A100], durations={A100: "300s"})
    job["spec"]["queue"] = "fast"
    return job


def clusters(hub: Hub, *args: str) -> Any:
    return run_json("-m", "cpn", "clusters", "--json", "--kubeconfig", str(hub.kubeconfig), *args)


def test_a_domain_quota_holds_a_job_and_cpn_clusters_shows_the_domain(hub: Hub) -> None:
    with new_namespace(hub, "clusters", user="alice", group="vision") as ns:
        assert apply(hub, ns, fast_job("fast-0"), fast_job("fast-1")).returncode == 0
        wait_until(
            lambda: (
                {hub.status(ns, n).get("phase") for n in ("fast-0", "fast-1")}
                == {"Running", "Queued"}
            ),
            timeout_s=120,
            what="one fast job running, the other queued",
        )
        names = ("fast-0", "fast-1")
        states = {n: hub.status(ns, n) for n in names}
        ran = next(n for n in names if states[n]["phase"] == "Running")
        held = next(n for n in names if n != ran)
        assert states[ran]["domain"] == "fast" and states[ran]["nodes"][0] in FAST_NODES
        # the domain's other node is free: it is the group's quota in the domain that holds it
        waiting = wait_status(hub, ns, held, reason="Quota", timeout_s=60)
        assert "quota of group vision in domain fast: 8 of 8 GPUs in use" in waiting["message"]

        def member_a() -> dict[str, Any] | None:
            rows = {r["cluster"]: r for r in clusters(hub)}
            row = rows.get(MEMBER)
            fast = [d for d in (row or {}).get("domains", ()) if d["domain"] == "fast"]
            if row and fast and fast[0]["gpusFree"] == 8 and row["runningJobs"] == 1:
                return row
            return None

        row = wait_until(
            member_a, timeout_s=60, every_s=1, what=f"{MEMBER} with fast 8/16 free, 1 job"
        )
        truth = hub.custom.get_cluster_custom_object("cpn.io", "v1alpha1", "memberclusters", MEMBER)
        status = truth["status"]
        assert row["ready"] is True and row["notReadyReason"] == ""
        assert row["gpuTypes"] == sorted(r["gpuType"] for r in status["inventory"])
        assert A100 in row["gpuTypes"]
        assert row["domains"] == [{"domain": "fast", "nodes": 2, "gpusTotal": 16, "gpusFree": 8}]
        if "cache" in status:  # the operator keeps a data cache (branch staging)
            assert row["cache"]["count"] == status["cache"].get("count")
        else:
            assert row["cache"] is None
        assert row["asOf"] is not None and 0 <= row["ageSeconds"] < 120
        assert datetime.fromisoformat(row["asOf"].replace("Z", "+00:00"))

        only = clusters(hub, "--domain", "fast")
        assert [r["cluster"] for r in only] == [MEMBER]
        assert only[0]["runningJobs"] == 1
        assert clusters(hub, "--domain", "nowhere") == []

        table = subprocess.run(
            [sys.executable, "-m", "cpn", "clusters", "--kubeconfig", str(hub.kubeconfig)],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            timeout=120,
        ).stdout
        line = next(li for li in table.splitlines() if li.startswith(MEMBER))
        assert "fast 8/16" in line and " True " in line


def test_who_may_not_list_memberclusters_is_told_and_without_aijobs_jobs_are_unknown(
    hub: Hub, tmp_path: Path
) -> None:
    """RBAC as the hub's API server applies it: a ServiceAccount with no role is refused
    MemberClusters (one line, exit 1); one that may read MemberClusters but not AIJobs in
    every namespace sees the clusters with JOBS "?"."""
    with new_namespace(hub, "clusters-rbac") as ns:
        hub.kubectl("-n", ns, "create", "serviceaccount", "viewer")
        config = token_kubeconfig(hub.tb, "hub", ns, "viewer", tmp_path / "viewer.kc")

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "cpn", "clusters", "--kubeconfig", str(config), *args],
                capture_output=True,
                text=True,
                check=False,
                cwd=ROOT,
                timeout=120,
            )

        refused = run()
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr.strip() == (
            "cpn clusters: you may not list MemberClusters (the cpn-cluster-admin role may)"
        )
        role = f"cpn-test-members-{ns}"
        hub.kubectl(
            "create", "clusterrole", role, "--verb=list", "--resource=memberclusters.cpn.io"
        )
        try:
            hub.kubectl(
                "create", "clusterrolebinding", role, f"--clusterrole={role}",
                f"--serviceaccount={ns}:viewer",
            )  # fmt: skip

            def rows() -> Any:
                done = run("--json")
                return json.loads(done.stdout) if done.returncode == 0 else None

            seen = wait_until(rows, timeout_s=30, every_s=1, what="MemberClusters listed")
            assert MEMBER in {r["cluster"] for r in seen}
            assert {r["runningJobs"] for r in seen} == {None}
            table = run().stdout
            assert "JOBS ?: you may not list AIJobs in every namespace" in table
        finally:
            hub.kubectl("delete", "clusterrolebinding", role, check=False)
            hub.kubectl("delete", "clusterrole", role, check=False)


def test_the_data_cache_a_staging_leaves_is_shown(hub: Hub) -> None:
    """A job on member-a's A100s reading a dataset of member-b stages it first; member-a's
    cache (``status.cache``, written by the operator) is then what ``cpn clusters`` shows."""
    hub.tb.set_links({(MEMBER, "member-b"): 100.0})
    try:
        with new_namespace(hub, "clusters-cache") as ns:
            job = reader("cached", "tiny", "member-b", 2 * 10**9, gpu_types=[A100])
            assert apply(hub, ns, job).returncode == 0
            wait_status(hub, ns, "cached", phase="Succeeded", timeout_s=180)

            def cached() -> Any:
                row = {r["cluster"]: r for r in clusters(hub)}[MEMBER]
                return row if row["cache"] and row["cache"]["count"] else None

            row = wait_until(cached, timeout_s=60, every_s=1, what=f"{MEMBER} cache shown")
            truth = hub.custom.get_cluster_custom_object(
                "cpn.io", "v1alpha1", "memberclusters", MEMBER
            )["status"]["cache"]
            assert "tiny@v1" in {e["input"] for e in row["cache"]["entries"]}
            assert row["cache"]["usedBytes"] == truth["usedBytes"] >= 2 * 10**9
            assert row["cache"]["count"] == truth["count"]
    finally:
        hub.tb.set_links({})
