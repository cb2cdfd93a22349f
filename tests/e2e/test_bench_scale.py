"""bench/bench_scale.py at its smallest (2 members x 20 nodes, 50 AIJobs): the harness
brings up its own bed, runs cpn on it, prints one JSON document whose figures add up, and
takes the bed down again. The full size (10 x 1,000) is run by hand.

The bench's bed gets its own state directory and the ports right after the session
bed's (that layout's clusters x 10 above ``CPN_TESTBED_PORT_BASE``), so it never meets
the bed the other e2e tests use, running or not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.bed import Testbed
from testbed.spec import PORT_BLOCK, load_spec
from tests.test_json_output import run_json

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_bench_scale_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = load_spec()
    state = tmp_path / "bed"
    monkeypatch.setenv("CPN_TESTBED_DIR", str(state))
    port_base = session.port_base + len(session.clusters) * PORT_BLOCK
    monkeypatch.setenv("CPN_TESTBED_PORT_BASE", str(port_base))
    doc = run_json(
        *("bench/bench_scale.py", "--members", "2", "--nodes", "20"),
        *("--jobs", "50", "--waiting", "50", "--steady-s", "8", "--json"),
    )
    assert doc["bench"] == "scale"
    bed = doc["bed"]
    assert (bed["members"], bed["nodes"], bed["gpus"]) == (2, 40, 320)
    assert bed["gpu_types"] == ["A100-80GB", "H100-80GB", "V100-32GB"]
    assert bed["up_s"] > 0

    startup = doc["startup"]
    assert 0 < startup["to_ready_s"] <= startup["to_first_cycle_all_members_s"]
    assert startup["operator_rss_mib"] > 50

    dispatch = doc["dispatch"]
    assert dispatch["dispatched"] == 50
    assert sum(dispatch["spread"].values()) == 50
    assert set(dispatch["spread"]) <= {"member-01", "member-02"}
    assert 0 < dispatch["apply_s"] <= dispatch["all_member_jobs_s"]
    assert dispatch["seen_s"]["p25"] <= dispatch["seen_s"]["p90"] <= dispatch["all_member_jobs_s"]
    assert dispatch["hub_requests_per_aijob"].get("POST aijobs", 0) >= 1
    started = dispatch["plan_cycle"]
    assert started["cycles"] >= 1 and 1 <= started["most_pending"] <= 50

    cycles = doc["cycles"]
    assert (cycles["waiting"], cycles["running"]) == (50, 50)
    plan = cycles["plan_cycle"]
    assert plan["cycles"] >= 1
    assert 0 < plan["p50_s"] <= plan["p99_s"] <= plan["max_s"]
    whole = cycles["whole_cycle"]
    assert whole["cycles"] >= 1 and whole["mean_s"] > 0
    assert whole["p50_at_most_s"] <= whole["p99_at_most_s"]

    kinds = doc["processes"]
    assert kinds["members/kube-apiserver"]["processes"] == 2
    assert kinds["members/kwok"]["processes"] == 2
    assert kinds["hub/etcd"]["processes"] == 1
    assert not {"members/prometheus", "members/dcgm"} & set(kinds)  # metrics: false
    assert all(row["rss_mib"] > 0 for row in kinds.values())
    assert kinds["operator"]["cpu_s"] > 0
    assert doc["processes_rss_gib"] > 0
    assert len(doc["machine"]["load_avg_1_5_15"]) == 3
    assert 0 < doc["machine"]["memory_available_gib"] < doc["machine"]["memory_gib"]

    # the bench took its bed down and removed its state
    assert not state.exists() or not Testbed(state_dir=state).status().any_running
