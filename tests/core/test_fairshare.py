"""Fair share over time and GPU-hour budgets (cpn.core.fairshare): the decayed sums, the
factor, budgets in the cycle, and the policy's fields."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from cpn.api.policy import parse_policy
from cpn.core.cycle import plan_cycle
from cpn.core.errors import PolicyError
from cpn.core.fairshare import LN2, FairShare, lowest_level, period_start_s, standing
from cpn.core.model import WaitReason
from cpn.core.policy import FairSharePolicy, GroupQuota, Limit, QueuePolicy, Quotas
from tests.builders import cluster, job, nodes, running, snapshot

H = 3600.0
FAIR = QueuePolicy(fair_share=FairSharePolicy(half_life_h=1.0, weight=1e6))


def at(usage: FairShare, t: float, group: str = "a") -> float:
    return usage.view().decayed_gpu_s(group, t)


def test_a_run_counts_half_after_one_half_life() -> None:
    """Usage measured one half-life later is exactly half; two, a quarter."""
    usage = FairShare(H)
    usage.add_run("a", "u", 2.0, 0.0, 600.0)
    now = at(usage, 600.0)
    assert at(usage, 600.0 + H) == pytest.approx(now / 2, rel=1e-12)
    assert at(usage, 600.0 + 2 * H) == pytest.approx(now / 4, rel=1e-12)


def test_a_run_counts_its_exact_decayed_integral() -> None:
    """A run of g GPUs over d seconds is worth g*H/ln2*(1 - 2^(-d/H)) at its end, less
    than g*d (its early seconds have decayed) and close to it for a short run."""
    usage = FairShare(H)
    usage.add_run("a", "u", 4.0, 100.0, 100.0 + H)
    assert at(usage, 100.0 + H) == pytest.approx(4.0 * H / LN2 * 0.5, rel=1e-12)
    short = FairShare(H)
    short.add_run("a", "u", 1.0, 0.0, 1.0)
    assert at(short, 1.0) == pytest.approx(1.0, rel=1e-3)
    assert at(short, 1.0) < 1.0


def test_order_of_runs_does_not_matter_and_the_frame_may_move() -> None:
    """Runs added in any order, even across a rebase of the frame, give the same sums."""
    runs = [("a", "u", 1.0, 0.0, 50.0), ("a", "v", 3.0, 20.0, 80.0), ("b", "w", 2.0, 10.0, 90.0)]
    forward, backward = FairShare(H), FairShare(H)
    for run in runs:
        forward.add_run(*run)
    for run in reversed(runs):
        backward.add_run(*run)
    for group in ("a", "b"):
        assert at(forward, 100.0, group) == pytest.approx(at(backward, 100.0, group), rel=1e-12)
    far = 600 * H  # exponent 600 > 512: the frame is rebased before this run is added
    expected = at(forward, far)
    forward.add_run("b", "w", 1.0, far - 1.0, far)
    assert forward.view().origin_s == far
    assert at(forward, far) == pytest.approx(expected, rel=1e-9)


def test_a_run_of_thousands_of_half_lives_does_not_overflow() -> None:
    """A 10-day run under a 6-minute half-life is worth g*H/ln2 (its last hours) at its end."""
    usage = FairShare(360.0)
    usage.add_run("a", "u", 2.0, 0.0, 10 * 86400.0)
    assert at(usage, 10 * 86400.0) == pytest.approx(2.0 * 360.0 / LN2, rel=1e-9)


def test_view_is_reused_until_something_changes() -> None:
    usage = FairShare(H)
    usage.add_run("a", "u", 1.0, 0.0, 10.0)
    first = usage.view()
    assert usage.view() is first
    usage.add_run("a", "u", 1.0, 10.0, 20.0)
    assert usage.view() is not first


def _factor(group_gpu_s: float, other_gpu_s: float = 100.0) -> float:
    usage = FairShare(H)
    usage.add_run("heavy", "x", 1.0, 0.0, group_gpu_s)
    usage.add_run("light", "y", 1.0, 0.0, other_gpu_s)
    jobs = [job("h", group="heavy", user="x"), job("l", group="light", user="y")]
    snap = snapshot(jobs=jobs, policy=FAIR, usage=usage.view(), now_s=group_gpu_s)
    return standing(snap).factors(jobs[0])[0]


def test_the_factor_falls_as_usage_grows() -> None:
    values = [_factor(seconds) for seconds in (100.0, 200.0, 400.0, 800.0, 1600.0)]
    assert all(a > b for a, b in itertools.pairwise(values))
    assert all(0 < v <= 1 for v in values)


def test_a_group_that_used_its_share_gets_one_half_and_an_idle_one_gets_one() -> None:
    usage = FairShare(H)
    usage.add_run("a", "x", 1.0, 0.0, 100.0)
    usage.add_run("b", "y", 1.0, 0.0, 100.0)
    jobs = [job("a1", group="a", user="x"), job("c1", group="c", user="z")]
    snap = snapshot(jobs=jobs, policy=FAIR, usage=usage.view(), now_s=100.0)
    fair = standing(snap)
    # three active groups with equal shares; a used half of all usage: r = 0.5 / (1/3) = 1.5
    assert fair.factors(jobs[0])[1] == pytest.approx(2**-1.5)
    assert fair.factors(jobs[1]) == (1.0, 1.0, 1.0)


def test_quota_gpus_set_the_shares() -> None:
    """A group whose quota is three times another's may use three times as much."""
    quotas = Quotas(
        groups={"big": GroupQuota(limit=Limit(gpus=30)), "small": GroupQuota(limit=Limit(gpus=10))}
    )
    policy = QueuePolicy(fair_share=FairSharePolicy(weight=1.0), quotas=quotas)
    usage = FairShare(H)
    usage.add_run("big", "x", 3.0, 0.0, 100.0)
    usage.add_run("small", "y", 1.0, 0.0, 100.0)
    jobs = [job("b", group="big", user="x"), job("s", group="small", user="y")]
    fair = standing(snapshot(jobs=jobs, policy=policy, usage=usage.view(), now_s=100.0))
    assert fair.factors(jobs[0])[1] == pytest.approx(0.5)
    assert fair.factors(jobs[1])[1] == pytest.approx(0.5)


def test_running_jobs_count_as_they_run() -> None:
    """With nothing finished, the group running a job now ranks below the one that is not."""
    policy = FAIR
    c = cluster("c", nodes("c", 1, gpus=2, free=[1]))
    busy = running(job("r", group="heavy"), "c", "A100-80GB", ("c-0",), start_s=0.0, end_s=9e9)
    jobs = [job("h", group="heavy", runtime_s=10.0), job("l", group="light", runtime_s=500.0)]
    snap = snapshot(
        jobs=jobs,
        clusters=[c],
        running_jobs=[busy],
        policy=policy,
        usage=FairShare(H).view(),
        now_s=1800.0,
    )
    plan = plan_cycle(snap)
    assert [s.job_key for s in plan.starts] == ["l"]
    without = plan_cycle(snapshot(jobs=jobs, clusters=[c], running_jobs=[busy], now_s=1800.0))
    assert [s.job_key for s in without.starts] == ["h"]


def test_without_usage_data_every_factor_is_one() -> None:
    jobs = [job("a", group="a")]
    assert standing(snapshot(jobs=jobs, policy=FAIR)).factors(jobs[0]) == (1.0, 1.0, 1.0)


def test_the_weight_counts_in_level_formulas_too() -> None:
    """``weight`` adds to every formula's score, a level's own formula included."""
    from cpn.core.policy import Level

    levels = (Level(name="all", formula="0 - gpu_time_s"),)
    policy = QueuePolicy(levels=levels, fair_share=FairSharePolicy(half_life_h=1.0, weight=1e6))
    usage = FairShare(H)
    usage.add_run("heavy", "x", 1.0, 0.0, 100.0)
    jobs = [
        job("h", group="heavy", user="x", runtime_s=10.0),
        job("l", group="light", user="y", runtime_s=500.0),
    ]
    c = cluster("c", nodes("c", 1, gpus=1))
    plan = plan_cycle(
        snapshot(jobs=jobs, clusters=[c], policy=policy, usage=usage.view(), now_s=100.0)
    )
    assert [s.job_key for s in plan.starts] == ["l"]
    plain = replace(policy, fair_share=FairSharePolicy())
    plan = plan_cycle(
        snapshot(jobs=jobs, clusters=[c], policy=plain, usage=usage.view(), now_s=100.0)
    )
    assert [s.job_key for s in plan.starts] == ["h"]


# --- budgets -------------------------------------------------------------------------

MONTH = datetime(2026, 3, 10, tzinfo=UTC).timestamp()


def _budget_policy(over: str) -> QueuePolicy:
    return QueuePolicy(
        quotas=Quotas(
            groups={"a": GroupQuota(gpu_hours=2.0)}, budget_period="month", over_budget=over
        )
    )


def _budget_snapshot(over: str, used_h: float, *, free_gpus: int = 2):
    usage = FairShare(H, "month")
    usage.add_run("a", "x", 1.0, MONTH - used_h * H, MONTH)
    jobs = [
        job("a1", group="a", user="x", priority=0, runtime_s=10.0, submitted_s=MONTH - 100),
        job("b1", group="b", user="y", runtime_s=5000.0, submitted_s=MONTH),
    ]
    c = cluster("c", nodes("c", 1, gpus=free_gpus))
    return snapshot(
        jobs=jobs, clusters=[c], policy=_budget_policy(over), usage=usage.view(), now_s=MONTH + 10
    )


def test_a_group_past_its_budget_is_held_with_the_reason() -> None:
    plan = plan_cycle(_budget_snapshot("hold", used_h=3.0))
    assert [s.job_key for s in plan.starts] == ["b1"]
    (hold,) = plan.holds
    assert hold.job_key == "a1"
    assert hold.reason == WaitReason.Budget
    assert "group a used 3.0 of its 2 GPU-hour budget this month" in hold.message


def test_a_group_under_its_budget_runs() -> None:
    plan = plan_cycle(_budget_snapshot("hold", used_h=1.5))
    assert sorted(s.job_key for s in plan.starts) == ["a1", "b1"]


def test_over_budget_lowest_ranks_below_everyone_and_says_why() -> None:
    """Room for one: the over-budget group's shorter job yields, and its hold says why."""
    plan = plan_cycle(_budget_snapshot("lowest", used_h=3.0, free_gpus=1))
    assert [s.job_key for s in plan.starts] == ["b1"]
    (hold,) = plan.holds
    assert hold.job_key == "a1"
    assert hold.level == "over-budget"
    assert "past its GPU-hour budget: its jobs run at the lowest level" in hold.message
    assert lowest_level(_budget_policy("lowest")) == 1
    under = plan_cycle(_budget_snapshot("lowest", used_h=1.0, free_gpus=1))
    assert [s.job_key for s in under.starts] == ["a1"]


def test_usage_of_last_period_does_not_count() -> None:
    """A month later the budget is fresh: last month's GPU-hours are not this month's."""
    snap = _budget_snapshot("hold", used_h=3.0)
    next_month = datetime(2026, 4, 2, tzinfo=UTC).timestamp()
    plan = plan_cycle(replace(snap, now_s=next_month))
    assert sorted(s.job_key for s in plan.starts) == ["a1", "b1"]


def test_running_time_in_the_period_counts_toward_the_budget() -> None:
    c = cluster("c", nodes("c", 1, gpus=2))
    busy = running(
        job("r", group="a"), "c", "A100-80GB", ("c-0",), start_s=MONTH - 10 * H, end_s=9e9
    )
    snap = snapshot(
        jobs=[job("a1", group="a")],
        clusters=[c],
        running_jobs=[busy],
        policy=_budget_policy("hold"),
        usage=FairShare(H).view(),
        now_s=MONTH + 10,
    )
    # the month began on March 1st: the run has used 9 days of it, far over 2 GPU-hours
    assert plan_cycle(snap).holds[0].reason == WaitReason.Budget


@pytest.mark.parametrize(
    ("when", "period", "start"),
    [
        pytest.param((2026, 3, 10, 15), "day", (2026, 3, 10), id="day"),
        pytest.param((2026, 3, 12, 15), "week", (2026, 3, 9), id="week from Monday"),
        pytest.param((2026, 3, 31, 23), "month", (2026, 3, 1), id="month"),
    ],
)
def test_periods_follow_the_utc_calendar(when, period, start) -> None:
    moment = datetime(*when, tzinfo=UTC).timestamp()
    assert period_start_s(moment, period) == datetime(*start, tzinfo=UTC).timestamp()


# --- the policy ---------------------------------------------------------------------


def test_policy_reads_fair_share_and_budgets() -> None:
    policy = parse_policy(
        """
fair_share: {half_life_h: 24, weight: 86400}
quotas:
  budget_period: week
  over_budget: hold
  groups: {team-a: {gpus: 8, gpu_hours: 1000}}
"""
    )
    assert policy.fair_share == FairSharePolicy(half_life_h=24.0, weight=86400.0)
    assert policy.quotas.budget_period == "week"
    assert policy.quotas.over_budget == "hold"
    assert policy.quotas.groups["team-a"].gpu_hours == 1000.0
    assert parse_policy("{}").fair_share == FairSharePolicy()


@pytest.mark.parametrize(
    ("doc", "path", "words"),
    [
        ("fair_share: {half_life_h: 0}", "fair_share.half_life_h", "greater than 0"),
        ("fair_share: {half_life_h: '24'}", "fair_share.half_life_h", "without quotes"),
        ("fair_share: {weight: -1}", "fair_share.weight", "at least 0"),
        ("fair_share: {wieght: 1}", "fair_share.wieght", "did you mean 'weight'"),
        ("fair_share: 3", "fair_share", "mapping"),
        ("quotas: {budget_period: year}", "quotas.budget_period", "day, week, month"),
        ("quotas: {over_budget: stop}", "quotas.over_budget", "lowest, hold"),
        ("quotas: {groups: {a: {gpu_hours: -2}}}", "quotas.groups.a.gpu_hours", "at least 0"),
        ("quotas: {groups: {a: {gpu_hour: 2}}}", "quotas.groups.a.gpu_hour", "gpu_hours"),
    ],
)
def test_policy_errors_name_the_field(doc: str, path: str, words: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(doc)
    found = {e.path: e.message for e in caught.value.errors}
    assert path in found, found
    assert words in found[path]


def test_the_formula_may_name_the_factors() -> None:
    policy = parse_policy('formula: "aging * wait_s + 1000 * fair_share * group_fair_share"')
    assert "fair_share" in policy.formula
    assert math.isfinite(policy.fair_share.half_life_h)
