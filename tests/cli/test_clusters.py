"""`cpn clusters` rows and table from MemberClusters and AIJobs as the operator writes them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cpn.cli.clusters import render_table, rows_from

NOW = datetime(2026, 11, 27, 5, 0, 0, tzinfo=UTC).timestamp()


def member(name: str, *, ready: str = "True", message: str = "", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "lastProbeTime": "2026-11-27T04:59:30Z",
            "conditions": [{"type": "Ready", "status": ready, "message": message}],
            "inventory": [
                {"gpuType": "V100-32GB", "nodes": 1, "gpusTotal": 8, "gpusFree": 8},
                {"gpuType": "A100-80GB", "nodes": 2, "gpusTotal": 16, "gpusFree": 4},
            ],
            "gpusTotal": 24,
            "gpusFree": 12,
            "domains": [
                {"domain": "batch", "nodes": 1, "gpusTotal": 8, "gpusFree": 8},
                {"domain": "interactive", "nodes": 2, "gpusTotal": 16, "gpusFree": 4},
            ],
            **status,
        },
    }


def aijob(cluster: str, phase: str = "Running", domain: str = "interactive") -> dict[str, Any]:
    return {
        "metadata": {"name": "j"},
        "status": {"phase": phase, "cluster": cluster, "domain": domain},
    }


def test_a_row_carries_the_status_figures_their_age_and_the_running_jobs() -> None:
    jobs = [
        aijob("north"),
        aijob("north", domain="batch"),
        aijob("north", "Queued"),
        aijob("south"),
    ]
    (row,) = rows_from([member("north")], jobs, now_s=NOW)
    assert row["ready"] is True and row["notReadyReason"] == ""
    assert row["gpuTypes"] == ["A100-80GB", "V100-32GB"]
    assert (row["gpusFree"], row["gpusTotal"]) == (12, 24)
    assert [d["domain"] for d in row["domains"]] == ["batch", "interactive"]
    assert row["runningJobs"] == 2  # the Queued one and south's are not north's running jobs
    assert row["cache"] is None  # no status.cache: the operator keeps none
    assert (row["asOf"], row["ageSeconds"]) == ("2026-11-27T04:59:30Z", 30.0)


def test_a_domain_keeps_the_clusters_with_its_nodes_and_counts_only_its_jobs() -> None:
    south = member(
        "south", domains=[{"domain": "batch", "nodes": 1, "gpusTotal": 8, "gpusFree": 2}]
    )
    jobs = [aijob("north"), aijob("north", domain="batch")]
    rows = rows_from([south, member("north")], jobs, now_s=NOW, domain="interactive")
    assert [r["cluster"] for r in rows] == ["north"]
    assert rows[0]["domains"] == [
        {"domain": "interactive", "nodes": 2, "gpusTotal": 16, "gpusFree": 4}
    ]
    assert rows[0]["runningJobs"] == 1


def test_the_table_says_why_a_cluster_is_not_ready_and_how_old_the_figures_are() -> None:
    down = member("south", ready="False", message="cannot reach https://127.0.0.1:1: refused")
    del down["status"]["lastProbeTime"]
    rows = rows_from([member("north"), down], None, now_s=NOW)
    lines = render_table(rows).splitlines()
    assert lines[0].split() == [
        "CLUSTER",
        "READY",
        "TYPES",
        "GPUS-FREE",
        "DOMAINS-FREE",
        "JOBS",
        "CACHE",
        "AS-OF",
    ]
    assert lines[1].split() == [
        "north",
        "True",
        "A100-80GB,V100-32GB",
        "12/24",
        "batch",
        "8/8,",
        "interactive",
        "4/16",
        "?",
        "-",
        "30s",
        "ago",
    ]
    assert lines[2].split()[:2] == ["south", "False"] and lines[2].endswith("never")
    assert "south not ready: cannot reach https://127.0.0.1:1: refused" in lines
    assert "JOBS ?: you may not list AIJobs in every namespace" in lines
    assert "as of the operator's last probe" in lines[-1]


def test_the_cache_is_shown_when_the_status_carries_one() -> None:
    cache = {"usedBytes": 3 * 10**9, "capacityBytes": 100 * 10**9, "count": 2, "entries": []}
    (row,) = rows_from([member("north", cache=cache)], [], now_s=NOW)
    assert row["cache"] == {
        "usedBytes": 3 * 10**9,
        "capacityBytes": 100 * 10**9,
        "count": 2,
        "entries": [],
    }
    assert "2 in 3/100 GB" in render_table([row])
    unlimited = {"usedBytes": 0, "count": 0}
    (row,) = rows_from([member("north", cache=unlimited)], [], now_s=NOW)
    assert "0 in 0 GB" in render_table([row])


def test_a_member_never_probed_is_unknown_with_a_reason() -> None:
    (row,) = rows_from([{"metadata": {"name": "new"}}], [], now_s=NOW)
    assert row["ready"] is None
    assert row["notReadyReason"] == "the operator has not probed it yet"
    assert row["gpuTypes"] == [] and row["ageSeconds"] is None
    assert "new not ready: the operator has not probed it yet" in render_table([row])
