"""``cpn replay`` re-plans logged cycles: an honest log replays clean, a tampered one does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cpn.cli.main import main as cpn
from cpn.cli.replay import compare
from cpn.core.cycle import plan_cycle
from cpn.core.model import CyclePlan, Hold, Snapshot, SolveStats, WaitReason
from cpn.decisions import EVENT, DecisionLog, encode
from tests.builders import cluster, job, nodes, running, snapshot


def cycles() -> list[Snapshot]:
    """Three hand-made cycles: a fill, a full cluster with waiters, and a freed node."""
    east = cluster("east", nodes("east", 2), nodes("east", 1, gpu_type="V100-32GB", prefix="ev"))
    first = snapshot(
        now_s=100.0,
        jobs=[job("a", gpus=8), job("b", gpus=4, submitted_s=10.0), job("c", gpus=16)],
        clusters=[east],
    )
    full = cluster(
        "east",
        nodes("east", 2, free=[0.0, 0.0]),
        nodes("east", 1, gpu_type="V100-32GB", prefix="ev", free=[0.0]),
    )
    second = snapshot(
        now_s=200.0,
        jobs=[job("d", gpus=8, submitted_s=150.0), job("e", gpus=1, submitted_s=160.0)],
        running_jobs=[
            running(job("a", gpus=8), "east", "A100-80GB", ("east-0",), start_s=100.0, end_s=3700.0)
        ],
        clusters=[full],
    )
    third = snapshot(
        now_s=300.0,
        jobs=[job("d", gpus=8, submitted_s=150.0), job("e", gpus=1, submitted_s=160.0)],
        clusters=[east],
    )
    return [first, second, third]


def write_log(path: Path, plans: list[tuple[Snapshot, CyclePlan]]) -> None:
    log = DecisionLog(str(path))
    for number, (snap, plan) in enumerate(plans, start=1):
        log.write(number, 0.01, snap, plan)
    log.close()


def test_honest_log_replays_with_zero_differences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plans recorded from plan_cycle replay identically: exit 0 and nothing reported."""
    snaps = cycles()
    plans = [(s, plan_cycle(s)) for s in snaps]
    assert any(p.starts for _, p in plans) and any(p.holds for _, p in plans)
    path = tmp_path / "decisions.jsonl"
    write_log(path, plans)
    assert cpn(["replay", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cycles"] == 3 and report["differences"] == []


def test_tampered_plan_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A start moved to another node and a hold reason changed are both reported, exit 1."""
    plans = [(s, plan_cycle(s)) for s in cycles()]
    snap, plan = plans[0]
    start = plan.starts[0]
    moved = replace(start, nodes=("elsewhere",))
    hold = plan.holds[0]
    other = WaitReason.Quota if hold.reason != WaitReason.Quota else WaitReason.Capacity
    plans[0] = (
        snap,
        replace(
            plan,
            starts=(moved, *plan.starts[1:]),
            holds=(replace(hold, reason=other), *plan.holds[1:]),
        ),
    )
    path = tmp_path / "decisions.jsonl"
    write_log(path, plans)
    assert cpn(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"cycle 1: starts {start.job_key}: nodes" in out
    assert f"cycle 1: holds {hold.job_key}: reason" in out
    assert "3 cycles replayed, 1 with differences, 2 differing decisions" in out


def test_altered_snapshot_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recorded snapshot edited in the file (a node made full) no longer gives its plan."""
    snaps = cycles()
    plans = [(s, plan_cycle(s)) for s in snaps]
    path = tmp_path / "decisions.jsonl"
    write_log(path, plans)
    lines = path.read_text().splitlines()
    record = json.loads(lines[0])
    for node in record["snapshot"]["clusters"][0]["nodes"]:
        node["free_gpus"] = 0.0
    lines[0] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    assert cpn(["replay", str(path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert {d["cycle"] for d in report["differences"]} == {1}
    started = {s.job_key for s in plans[0][1].starts}
    gone = {
        d["job"] for d in report["differences"] if d["part"] == "starts" and d["replayed"] is None
    }
    assert gone == started


def test_order_within_a_part_is_not_a_difference() -> None:
    """Holds listed in another order are the same decisions."""
    holds = (
        Hold(job_key="x", reason=WaitReason.Capacity, message="m"),
        Hold(job_key="y", reason=WaitReason.Priority, message="n"),
    )
    assert compare(1, CyclePlan(holds=holds), CyclePlan(holds=holds[::-1])) == []


def test_unreadable_log_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file or a broken record is an error, not a clean replay."""
    assert cpn(["replay", str(tmp_path / "missing.jsonl")]) == 2
    broken = tmp_path / "broken.jsonl"
    broken.write_text(
        json.dumps(
            {"event": EVENT, "cycle": 1, "snapshot": {"now_s": 1.0}, "plan": encode(CyclePlan())}
        )
        + "\n"
    )
    assert cpn(["replay", str(broken)]) == 2
    assert "cannot read the log" in capsys.readouterr().err


def test_replay_in_another_process_with_another_hash_seed(tmp_path: Path) -> None:
    """Replay does not depend on the process: a fresh interpreter with another hash seed agrees."""
    path = tmp_path / "decisions.jsonl"
    write_log(path, [(s, plan_cycle(s)) for s in cycles()])
    env = {**os.environ, "PYTHONHASHSEED": "4242"}
    result = subprocess.run(
        [sys.executable, "-m", "cpn", "replay", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 cycles replayed, 0 with differences" in result.stdout


def test_differences_of_a_time_limited_solve_are_flagged() -> None:
    """A difference in a cycle whose recorded MILP stopped early says so; optimal ones do not."""
    hold = Hold(job_key="x", reason=WaitReason.Capacity, message="m")
    limited = CyclePlan(holds=(hold,), stats=SolveStats(method="milp", status="Not Solved"))
    (diff,) = compare(4, limited, CyclePlan())
    assert diff.time_limited and "time-limited" in diff.describe()
    optimal = replace(limited, stats=SolveStats(method="milp", status="Optimal"))
    (diff,) = compare(4, optimal, CyclePlan())
    assert not diff.time_limited and diff.as_dict()["solver"] == "milp/Optimal"
    (diff,) = compare(4, optimal, CyclePlan(), time_limited=True)
    assert diff.time_limited
