"""The decision log's codec is lossless, and its records carry what a cycle read and decided."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from hypothesis import HealthCheck, given, settings

from cpn.api.policy import parse_policy
from cpn.core.cycle import plan_cycle
from cpn.core.fairshare import FairShare
from cpn.core.model import Cached, CyclePlan, DataInput, Estimate, Snapshot, frozen_map
from cpn.decisions import EVENT, DecisionLog, decode, encode, open_log, read_log
from tests.builders import cluster, job, nodes, running, snapshot
from tests.core.test_properties import snapshots

POLICIES = Path(__file__).parent.parent / "data" / "policies"


def through_json(value: object) -> object:
    return json.loads(json.dumps(encode(value)))


def rich_snapshot() -> Snapshot:
    """A snapshot using every kind of field: full policy, sets, maps, None, inf, running jobs."""
    policy = parse_policy((POLICIES / "full.yaml").read_text(), version="v42")
    head = job(
        "ns/a",
        gpus=2,
        gpu_types=frozenset({"V100-32GB", "A100-80GB"}),
        features={"batch": 64.0, "layers": 50.0},
        data_cluster="east",
        data_gb=12.5,
        inputs=(DataInput(name="imagenet", version="v2", size_gb=150.0, location="west"),),
        user_estimate_s=None,
        queue="research",
        group="vision",
        user="alice",
    )
    shaped = job("ns/b", runtime_s={"A100-80GB": 10.0}, user_estimate_s=99.5, suspended=True)
    shaped = replace(
        shaped,
        estimate=Estimate(
            runtime_s=frozen_map({"A100-80GB": 10.0}),
            high_s=frozen_map({"A100-80GB": float("inf")}),
            unseen=True,
            source="prior",
        ),
    )
    busy = job("ns/r", gpus=8)
    return snapshot(
        now_s=1_700_000_000.123456,
        policy=policy,
        jobs=[head, shaped],
        clusters=[
            cluster("east", nodes("east", 2, free=[8.0, 0.5])),
            cluster("west", nodes("west", 1, gpu_type="V100-32GB", gpus=4), ready=False),
        ],
        running_jobs=[running(busy, "east", "A100-80GB", ("east-1",), start_s=1.5, end_s=7.25)],
        bandwidth_gbps=frozen_map({"east": frozen_map({"west": 10.0})}),  # type: ignore[dict-item]
        data_cache=MappingProxyType(
            {"east": MappingProxyType({"bert": Cached(size_gb=0.4, last_used_s=2.0, ready_s=1.0)})}
        ),
    )


def test_rich_snapshot_round_trips_to_an_equal_object() -> None:
    """Every field of a rich snapshot, the full policy included, survives JSON unchanged."""
    original = rich_snapshot()
    assert original.policy.levels, "the full policy should have levels to exercise"
    back = decode(Snapshot, through_json(original))
    assert back == original
    assert isinstance(back.pending[0].gpu_types, frozenset)
    assert back.pending[1].estimate.high_s["A100-80GB"] == float("inf")


def test_snapshot_with_fair_share_usage_round_trips() -> None:
    """Past usage (fair share, budgets) survives the log, so replay ranks the same."""
    usage = FairShare(7 * 86400.0, "week")
    usage.add_run("g", "u", 4, 0.0, 3600.0)
    original = replace(rich_snapshot(), usage=usage.view())
    back = decode(Snapshot, through_json(original))
    assert back == original and back.usage is not None
    assert back.usage.groups["g"] > 0


def test_plan_round_trips_to_an_equal_object() -> None:
    """A plan with starts and holds (enum reasons, optional times) survives JSON unchanged."""
    plan = plan_cycle(rich_snapshot())
    assert plan.starts or plan.holds
    assert decode(CyclePlan, through_json(plan)) == plan


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_generated_snapshots_and_their_plans_round_trip(snap: Snapshot) -> None:
    """Generated snapshots (every preset policy, quotas, running jobs) and plans round trip."""
    assert decode(Snapshot, through_json(snap)) == snap
    plan = plan_cycle(snap)
    assert decode(CyclePlan, through_json(plan)) == plan


def test_log_file_holds_one_json_record_per_cycle(tmp_path: Path) -> None:
    """Each write is one JSON line: cycle number, wall time, policy version and both halves."""
    path = tmp_path / "logs" / "decisions.jsonl"
    log = open_log(str(path))
    assert isinstance(log, DecisionLog)
    snap = rich_snapshot()
    plan = plan_cycle(snap)
    log.write(7, 0.25, snap, plan)
    log.write(8, 0.5, snap, plan)
    log.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["event"] == EVENT and first["cycle"] == 7 and first["wall_s"] == 0.25
    assert first["policy_version"] == "v42" and first["timestamp"].endswith("Z")
    decisions = list(read_log(path))
    assert [d.cycle for d in decisions] == [7, 8]
    assert decisions[0].snapshot == snap and decisions[0].plan == plan


def test_log_rotates_by_size(tmp_path: Path) -> None:
    """Past the size cap the file rotates and backups are kept; every record stays readable."""
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(str(path), max_bytes=4000, backups=2)
    snap = snapshot(jobs=[job("a")], clusters=[cluster("c", nodes("c", 1))])
    plan = plan_cycle(snap)
    for number in range(1, 30):
        log.write(number, 0.01, snap, plan)
    log.close()
    rotated = sorted(tmp_path.glob("decisions.jsonl.*"))
    assert [p.name for p in rotated] == ["decisions.jsonl.1", "decisions.jsonl.2"]
    assert path.stat().st_size <= 4000
    cycles = [d.cycle for d in read_log(rotated[1], rotated[0], path)]
    assert cycles == sorted(cycles) and cycles[-1] == 29


def test_log_files_are_private_to_their_owner(tmp_path: Path) -> None:
    """The log holds every namespace's jobs: the file and its rotations are mode 0600, even
    when the file existed with wider rights."""
    path = tmp_path / "decisions.jsonl"
    path.write_text("")
    path.chmod(0o644)
    log = DecisionLog(str(path), max_bytes=4000, backups=2)
    snap = snapshot(jobs=[job("a")], clusters=[cluster("c", nodes("c", 1))])
    plan = plan_cycle(snap)
    for number in range(1, 30):
        log.write(number, 0.01, snap, plan)
    log.close()
    files = [path, *tmp_path.glob("decisions.jsonl.*")]
    assert len(files) == 3
    assert {f.stat().st_mode & 0o777 for f in files} == {0o600}


def test_stdout_destination_and_off(capsys: object) -> None:
    """ "-" writes records to standard output; "" turns the log off."""
    assert open_log("") is None
    log = open_log("-")
    assert log is not None
    snap = snapshot(jobs=[job("a")])
    log.write(1, 0.0, snap, plan_cycle(snap))
    log.close()
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert json.loads(out.strip())["cycle"] == 1


def test_lines_that_are_not_decisions_are_skipped(tmp_path: Path) -> None:
    """Other log lines mixed into the file (e.g. stdout shared with kopf) do not break reading."""
    path = tmp_path / "mixed.log"
    snap = snapshot(jobs=[job("a")])
    record = {"event": EVENT, "cycle": 3, "snapshot": encode(snap), "plan": encode(CyclePlan())}
    path.write_text(
        "[2026] INFO kopf started\n"
        + json.dumps({"event": "other"})
        + "\n{not json\n"
        + json.dumps(record)
        + "\n"
    )
    assert [d.cycle for d in read_log(path)] == [3]


def test_reading_only_the_records_that_mention_a_job(tmp_path: Path) -> None:
    """``mentioning`` keeps the records whose line names one of the strings, as JSON writes
    it (escapes included), and skips the rest undecoded; none given: every record."""
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(str(path))
    east = cluster("east", nodes("east", 1))
    for number, key in enumerate(["ns/a", "ns/b", "équipe/c", "ns/a"], start=1):
        snap = snapshot(jobs=[job(key)], clusters=[east])
        log.write(number, 0.01, snap, plan_cycle(snap))
    log.close()
    assert [d.cycle for d in read_log(path, mentioning=["ns/a"])] == [1, 4]
    assert [d.cycle for d in read_log(path, mentioning=["ns/b", "équipe/c"])] == [2, 3]
    assert [d.cycle for d in read_log(path, mentioning=["ns/z"])] == []
    assert [d.cycle for d in read_log(path)] == [1, 2, 3, 4]
