"""The live operator's fair share and budgets fed from its accounting (runtime/fairfeed.py):
from the usage store at start-up, then each ended run once, and the same standing after a
restart."""

from __future__ import annotations

import asyncio
import json

import pytest

from cpn import decisions
from cpn.api.usage import encode
from cpn.core.accounting import DAY_S, DayUsage, Total, day_of
from cpn.core.cycle import plan_cycle
from cpn.core.fairshare import FairShare, standing
from cpn.core.model import Snapshot, Usage, WaitReason
from cpn.core.policy import FairSharePolicy, GroupQuota, QueuePolicy, Quotas
from cpn.runtime import lifecycle
from cpn.runtime.accounting import Accounting
from cpn.runtime.metrics import OperatorMetrics
from tests.builders import cluster, job, nodes, snapshot
from tests.runtime.test_accounting import T0, MemoryStore, direct, ended, running

H = 3600.0
POLICY = QueuePolicy(
    fair_share=FairSharePolicy(half_life_h=1.0, weight=1e6),
    quotas=Quotas(groups={"vision": GroupQuota(gpu_hours=1.0)}, over_budget="hold"),
)


def accounting(store: MemoryStore | None) -> Accounting:
    made = Accounting(OperatorMetrics().gpu_hours, retention_s=7 * 86400)
    made.store = store
    return made


def started(store: MemoryStore, now_s: float) -> Accounting:
    """A new operator process: policy known, the store read before its first cycle."""
    made = accounting(store)
    made.fair.configure(POLICY)
    asyncio.run(made.load(direct, now_s))
    return made


def view_at(acc: Accounting, now_s: float) -> Usage:
    usage = acc.usage(POLICY, now_s)
    assert usage is not None
    return usage


def test_a_run_counts_while_pending_a_write_and_once_written() -> None:
    store = MemoryStore()
    acc = started(store, T0)
    assert view_at(acc, T0).groups == {}  # nothing yet
    ended(acc, "a", 30)  # 1 GPU for 30 minutes
    now = T0 + 3600
    pending = view_at(acc, now).decayed_gpu_s("vision", now)
    assert pending > 0
    assert asyncio.run(acc.flush(direct, now)) == 1 and not acc.pending
    assert view_at(acc, now).decayed_gpu_s("vision", now) == pytest.approx(pending)
    assert acc.fair.fed == 1


def test_a_restart_rebuilds_the_same_standing_from_the_store() -> None:
    store = MemoryStore()
    first = started(store, T0)
    for uid, minutes in (("a", 30), ("b", 50), ("c", 70)):
        ended(first, uid, minutes)
    now = T0 + 2 * 3600
    asyncio.run(first.flush(direct, now))
    restarted = started(store, now)
    pending_job = job("ns/next", group="vision", user="ada", gpus=1)
    before = standing(
        snapshot(jobs=[pending_job], policy=POLICY, now_s=now, usage=view_at(first, now))
    )
    after = standing(
        snapshot(jobs=[pending_job], policy=POLICY, now_s=now, usage=view_at(restarted, now))
    )
    assert after.group_factor == pytest.approx(before.group_factor)
    assert after.period_gpu_s == pytest.approx(before.period_gpu_s)
    assert after.period_gpu_s["vision"] == pytest.approx((30 + 50 + 70) * 60.0)
    assert after.over_budget == before.over_budget == frozenset({"vision"})


def test_the_same_run_seen_again_after_a_restart_counts_once() -> None:
    store = MemoryStore()
    first = started(store, T0)
    ended(first, "a", 60)
    asyncio.run(first.flush(direct, T0 + 3600))
    again = started(store, T0 + 3600)
    ended(again, "a", 60)  # seen again from its member Job: the store has it
    asyncio.run(again.flush(direct, T0 + 3600))
    assert view_at(again, T0 + 3600).period_gpu_s["vision"] == pytest.approx(3600.0)


def test_rolled_up_totals_count_as_runs_spread_over_their_day() -> None:
    """A day's total of 2 GPU-hours is fed as 2/24 GPUs over that day: its budget share is
    exact and its decayed value that of a constant rate."""
    store = MemoryStore()
    yesterday = day_of(T0 - DAY_S)
    totals = {("vision", "ada", "A100-80GB", "batch"): Total(2 * 3600.0, 3)}
    store.write("cpn-usage-x", encode(DayUsage(yesterday, {}, totals)), "")
    acc = started(store, T0)
    expected = FairShare(H, POLICY.quotas.budget_period)
    begins = T0 - 3600.0 - DAY_S  # T0 is 01:00 UTC
    expected.add_run("vision", "ada", 2 * 3600.0 / DAY_S, begins, begins + DAY_S)
    got = view_at(acc, T0)
    assert got.decayed_gpu_s("vision", T0) == pytest.approx(
        expected.view().decayed_gpu_s("vision", T0), rel=1e-9
    )
    assert got.period_gpu_s["vision"] == pytest.approx(2 * 3600.0)  # same month


def test_feeding_is_proportional_to_the_new_runs_only() -> None:
    """A cycle with no run ended since the last one reuses the same view (no copy)."""
    store = MemoryStore()
    acc = started(store, T0)
    for i in range(50):
        ended(acc, f"r{i}", 1 + i % 5)
    asyncio.run(acc.flush(direct, T0 + 600))
    first = view_at(acc, T0 + 600)
    assert view_at(acc, T0 + 601) is first
    assert acc.fair.fed == 50


def test_no_usage_before_the_store_was_read() -> None:
    """A snapshot without usage has every factor 1: better than a partial sum."""
    acc = accounting(MemoryStore())
    assert acc.usage(POLICY, T0) is None


def test_a_new_half_life_refeeds_from_the_store() -> None:
    store = MemoryStore()
    acc = started(store, T0)
    ended(acc, "a", 60)
    asyncio.run(acc.flush(direct, T0 + 3600))
    longer = QueuePolicy(
        fair_share=FairSharePolicy(half_life_h=10.0, weight=1.0), quotas=POLICY.quotas
    )
    assert acc.usage(longer, T0 + 3600) is None  # emptied until refed
    asyncio.run(acc.flush(direct, T0 + 3600))
    usage = acc.usage(longer, T0 + 3600)
    assert usage is not None and usage.half_life_s == 10 * H
    assert usage.period_gpu_s["vision"] == pytest.approx(3600.0)


def test_a_group_past_its_budget_waits_live_and_another_group_starts() -> None:
    store = MemoryStore()
    acc = started(store, T0)
    ended(acc, "a", 70)  # 1 GPU-hour 10 minutes: past vision's 1 GPU-hour
    now = T0 + 2 * 3600
    jobs = [
        job("ns/v", group="vision", user="ada", runtime_s=60.0),
        job("ns/o", group="other", user="bob", runtime_s=60.0),
    ]
    c = cluster("north", nodes("north", 1, gpus=2))
    plan = plan_cycle(
        snapshot(jobs=jobs, clusters=[c], policy=POLICY, now_s=now, usage=view_at(acc, now))
    )
    assert [s.job_key for s in plan.starts] == ["ns/o"]
    (hold,) = plan.holds
    assert (hold.job_key, hold.reason) == ("ns/v", WaitReason.Budget)
    assert acc.fair.newly_over(
        snapshot(jobs=jobs, policy=POLICY, now_s=now, usage=view_at(acc, now))
    ) == ["vision"]
    assert (
        acc.fair.newly_over(
            snapshot(jobs=jobs, policy=POLICY, now_s=now + 1, usage=view_at(acc, now + 1))
        )
        == []
    )  # told once


def test_a_live_snapshot_with_usage_goes_through_the_decision_log() -> None:
    """``cpn replay`` reads back what the live operator now logs: the snapshot's usage."""
    store = MemoryStore()
    acc = started(store, T0)
    ended(acc, "a", 30)
    usage = view_at(acc, T0 + 3600)
    taken = snapshot(policy=POLICY, now_s=T0 + 3600, usage=usage)
    back = decisions.decode(Snapshot, json.loads(json.dumps(decisions.encode(taken))))
    assert back.usage is not None
    assert dict(back.usage.groups) == dict(usage.groups)
    assert back.usage.period_start_s == usage.period_start_s
    assert standing(back) == standing(taken)


@pytest.mark.parametrize("was_written", [True, False])
def test_a_recovered_run_counts_once_whether_or_not_the_store_has_it(was_written: bool) -> None:
    """After a kill, a recent success is recovered from its status: counted from the store
    when it was written before the kill, from the pending write when it was not; once
    either way, before and after the next flush."""
    store = MemoryStore()
    first = started(store, T0)
    before = running("a", gpus=1, workers=1)
    done = lifecycle.succeeded(before, T0 + 3600).record
    first.saw(before, done, forgotten=False, now_s=T0 + 3600)
    if was_written:
        asyncio.run(first.flush(direct, T0 + 3600))
    restarted = accounting(store)
    restarted.fair.configure(POLICY)
    assert restarted.recover([done], T0 + 3700) == 1
    asyncio.run(restarted.load(direct, T0 + 3700))
    assert view_at(restarted, T0 + 3700).period_gpu_s["vision"] == pytest.approx(3600.0)
    asyncio.run(restarted.flush(direct, T0 + 3700))
    assert not restarted.pending
    assert view_at(restarted, T0 + 3700).period_gpu_s["vision"] == pytest.approx(3600.0)
