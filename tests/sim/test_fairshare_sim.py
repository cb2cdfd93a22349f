"""Fair share in the simulator: the world feeds its own finished attempts to the same
cpn.core.fairshare sums the operator's cycle reads, so past usage reorders the queue."""

from __future__ import annotations

import json
from pathlib import Path

from simkit import clusters, tjob
from test_world import by_id, world

from cpn.api.policy import parse_policy
from cpn.core.cycle import plan_cycle
from cpn.sim.groups import by_group
from cpn.sim.runner import resolve_policy

# Without draining: here every job waits about as long as FIFO would make it (the 10 h
# job ahead), so draining past the FIFO due time would put them in submit order.
FAIR = parse_policy(
    "{fair_share: {half_life_h: 168, weight: 86400}, reservation: {drain_fifo: false}}"
)
OFF = parse_policy("reservation: {drain_fifo: false}")


def _trace():
    # One GPU. heavy runs 10 h; then heavy's short job and light's longer one both wait.
    return [
        tjob("heavy-long", submit_s=0.0, duration_s=36000.0, group="heavy", user="h"),
        tjob("heavy-short", submit_s=10.0, duration_s=100.0, group="heavy", user="h"),
        tjob("light", submit_s=20.0, duration_s=200.0, group="light", user="l"),
    ]


def _run(policy):
    one_gpu = clusters({"a": [(1, "V100", 1)]})
    return world(_trace(), one_gpu, plan=plan_cycle, policy=policy).run()


def test_heavy_past_usage_lets_the_light_group_go_first() -> None:
    """Without fair share the shorter job of the heavy group goes first; with it, the
    group that used nothing goes first although its job is longer."""
    off, on = by_id(_run(OFF)), by_id(_run(FAIR))
    assert off["heavy-short"].first_start_s < off["light"].first_start_s
    assert on["light"].first_start_s < on["heavy-short"].first_start_s
    assert on["light"].first_start_s == 36000.0


def test_by_group_names_the_dominant_group_and_the_others_wait() -> None:
    groups = by_group(_run(FAIR))
    assert groups["dominant"] == "heavy"
    assert groups["others_avg_wait_s"] == 36000.0 - 20.0
    assert groups["groups"]["light"]["jobs"] == 1


def test_the_example_policy_file_reads() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "policies" / "fair-share.yaml"
    name, policy = resolve_policy(str(path))
    assert name == "fair-share"
    assert policy.fair_share.weight == 86400.0


def test_cli_by_group_adds_the_groups_to_metrics_and_table(capsys) -> None:
    """``--by-group`` adds ``by_group`` to the JSON and a table of waits to the text."""
    from simkit import DATA

    from cpn.sim.cli import main

    base = ["--trace", str(DATA / "tiny.csv"), "--clusters", str(DATA / "small-clusters.yaml")]
    assert main([*base, "--policy", "fifo", "--by-group", "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)["by_group"]
    assert groups["dominant"] in groups["groups"]
    assert sum(g["jobs"] for g in groups["groups"].values()) == 40
    assert main([*base, "--policy", "fifo", "--by-group"]) == 0
    out = capsys.readouterr().out
    assert "waits by group" in out
    assert groups["dominant"] in out
