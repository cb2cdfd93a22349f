"""Multi-level queues: a job of an earlier level goes first even when the formula scores it lower.

Each case is built so that level order and score order disagree: a test that passed on
scores alone would fail here (issue 19 item 7).
"""

from __future__ import annotations

from cpn.core.cycle import plan_cycle
from cpn.core.policy import Level, QueuePolicy
from cpn.core.queue import level_of, order_jobs
from tests.builders import cluster, job, nodes, snapshot

BIG_FIRST = QueuePolicy(levels=(Level(name="big", min_gpus=8), Level(name="rest")))


def test_an_earlier_level_outranks_a_higher_score() -> None:
    """The short 1-GPU job scores far above the long 8-GPU one, yet ranks after it."""
    short = job("ns/short", gpus=1, runtime_s=60.0)
    long = job("ns/long", gpus=8, runtime_s=36000.0)
    ranked = order_jobs([short, long], snapshot(jobs=[short, long], policy=BIG_FIRST))
    assert [r.job.key for r in ranked] == ["ns/long", "ns/short"]
    assert ranked[1].score > ranked[0].score  # the scores alone say the opposite
    assert [r.level_name for r in ranked] == ["big", "rest"]


def test_within_a_level_the_score_decides_then_submit_time() -> None:
    a = job("ns/a", gpus=1, runtime_s=600.0, submitted_s=0.0)
    b = job("ns/b", gpus=1, runtime_s=60.0, submitted_s=10.0)
    c = job("ns/c", gpus=1, runtime_s=60.0, submitted_s=5.0)
    ranked = order_jobs([a, b, c], snapshot(jobs=[a, b, c], now_s=10.0, policy=BIG_FIRST))
    # b and c score alike except for aging: c, submitted earlier, has waited longer
    assert [r.job.key for r in ranked] == ["ns/c", "ns/b", "ns/a"]


def test_the_cycle_starts_the_earlier_levels_job_on_the_only_room() -> None:
    """One free 8-GPU node: the big level's job takes it although the other scores higher."""
    short = job("ns/short", gpus=8, runtime_s=60.0, group="g")
    long = job("ns/long", gpus=8, runtime_s=36000.0, group="vip")
    policy = QueuePolicy(levels=(Level(name="vip", groups=frozenset({"vip"})), Level(name="rest")))
    plan = plan_cycle(
        snapshot(
            jobs=[short, long], clusters=[cluster("a", nodes("a", 1))], policy=policy, now_s=1.0
        )
    )
    assert [s.job_key for s in plan.starts] == ["ns/long"]
    held = {h.job_key: h for h in plan.holds}
    assert held["ns/short"].position == 2 and held["ns/short"].level == "rest"


def test_the_first_level_whose_rules_all_match_takes_the_job() -> None:
    levels = (
        Level(name="vip-big", groups=frozenset({"vip"}), min_gpus=8),
        Level(name="vip", groups=frozenset({"vip"})),
        Level(name="rest"),
    )
    assert level_of(job("x", gpus=8, group="vip"), levels, 0) == 0
    assert level_of(job("x", gpus=1, group="vip"), levels, 0) == 1  # min_gpus fails
    assert level_of(job("x", gpus=8, group="other"), levels, 0) == 2  # group fails


def test_a_levels_own_formula_orders_only_that_level() -> None:
    """Level "fifo" scores by wait alone (oldest first) although the default formula would
    put the shorter job first; the other level keeps the default formula."""
    levels = (Level(name="fifo", groups=frozenset({"ops"}), formula="wait_s"), Level(name="rest"))
    policy = QueuePolicy(levels=levels)
    old_long = job("ns/old", runtime_s=36000.0, submitted_s=0.0, group="ops")
    new_short = job("ns/new", runtime_s=60.0, submitted_s=100.0, group="ops")
    other_long = job("ns/o-long", runtime_s=36000.0, submitted_s=0.0, group="x")
    other_short = job("ns/o-short", runtime_s=60.0, submitted_s=100.0, group="x")
    pending = [new_short, old_long, other_short, other_long]
    ranked = order_jobs(pending, snapshot(jobs=pending, now_s=200.0, policy=policy))
    assert [r.job.key for r in ranked] == ["ns/old", "ns/new", "ns/o-short", "ns/o-long"]
