"""Concurrent-job limits (``jobs`` in a quota): a group, user or domain holds at most that many
jobs at once (staging, dispatched or running: the snapshot's ``running``); a start that would
pass it is not made, by the greedy walk nor by the MILP, and the job waits with the limit as
its reason."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from cpn.api.policy import parse_policy
from cpn.core.check import check_plan
from cpn.core.cycle import plan_cycle
from cpn.core.errors import PolicyError
from cpn.core.explain import explain
from cpn.core.model import WaitReason
from cpn.core.policy import GroupQuota, Limit, Placement, Preemption, QueuePolicy, Quotas
from cpn.core.quota import QuotaLedger
from tests.builders import cluster, job, nodes, running, snapshot


def _policy(
    group: int | None = None, alice: int | None = None, default: int | None = None
) -> QueuePolicy:
    quota = GroupQuota(
        limit=Limit(jobs=group),
        users=MappingProxyType({"alice": Limit(jobs=alice)}),
        default_user=Limit(jobs=default) if default is not None else None,
    )
    return QueuePolicy(quotas=Quotas(groups=MappingProxyType({"vision": quota})))


def _mine(key: str, user: str = "alice", submitted_s: float = 0.0, gpus: int = 1):
    return job(key, gpus=gpus, group="vision", user=user, submitted_s=submitted_s)


# --- the policy ------------------------------------------------------------------------


def test_jobs_is_read_in_every_quota_the_policy_takes() -> None:
    policy = parse_policy(
        """
quotas:
  groups:
    vision:
      gpus: 8
      jobs: 4
      users: {alice: {jobs: 2}, bob: {gpus: 2}}
      default_user: {jobs: 1}
      domains: {batch: {jobs: 3}}
domains:
  batch: {default: true}
"""
    )
    quota = policy.quotas.groups["vision"]
    assert quota.limit == Limit(gpus=8, jobs=4)
    assert quota.users["alice"].jobs == 2
    assert quota.users["bob"].jobs is None  # unlimited unless written
    assert quota.default_user is not None and quota.default_user.jobs == 1
    assert quota.domains["batch"].jobs == 3


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("-1", "alice.jobs: must be between 0 and 1000000, got -1", id="neg"),
        pytest.param("2.5", "alice.jobs: expected an integer", id="fraction"),
        pytest.param("two", "alice.jobs: expected an integer", id="text"),
        pytest.param("5", "alice.jobs: 5 concurrent jobs exceeds the group's 4", id="above"),
    ],
)
def test_a_bad_jobs_figure_is_refused_at_its_field(value: str, message: str) -> None:
    doc = f"quotas: {{groups: {{vision: {{jobs: 4, users: {{alice: {{jobs: {value}}}}}}}}}}}"
    with pytest.raises(PolicyError) as err:
        parse_policy(doc)
    assert f"quotas.groups.vision.users.{message}" in str(err.value)


def test_a_bad_group_jobs_figure_names_the_group_field() -> None:
    with pytest.raises(PolicyError, match=r"quotas\.groups\.vision\.jobs: must be between 0"):
        parse_policy("quotas: {groups: {vision: {jobs: -3}}}")


# --- the ledger ------------------------------------------------------------------------


def test_the_ledger_counts_running_jobs_not_gpus() -> None:
    busy = [
        running(_mine("r1", gpus=4), "north", "A100-80GB", ("north-0",)),
        running(_mine("r2", gpus=1), "north", "A100-80GB", ("north-0",)),
    ]
    ledger = QuotaLedger(_policy(alice=2), busy)
    assert ledger.exceeds(_mine("next")) == (
        "user alice in vision: concurrent-job limit 2 reached (2 running)"
    )
    assert ledger.exceeds(_mine("other", user="bob")) == ""  # bob has no job limit


def test_the_groups_job_limit_counts_all_its_users() -> None:
    busy = [running(_mine("r1", user="bob"), "north", "A100-80GB", ("north-0",))]
    ledger = QuotaLedger(_policy(group=2), busy)
    assert ledger.exceeds(_mine("a1")) == ""
    ledger.take(_mine("a1"), "A100-80GB")
    assert ledger.exceeds(_mine("a2")) == (
        "group vision: concurrent-job limit 2 reached (2 running)"
    )


def test_the_default_users_limit_applies_to_users_not_named() -> None:
    busy = [running(_mine("r1", user="carol"), "north", "A100-80GB", ("north-0",))]
    ledger = QuotaLedger(_policy(default=1), busy)
    assert "user carol in vision: concurrent-job limit 1" in ledger.exceeds(_mine("c", "carol"))
    assert ledger.exceeds(_mine("d", user="dave")) == ""  # none of dave's running


# --- the cycle -------------------------------------------------------------------------


def _free_for_all() -> list:
    return [cluster("north", nodes("north", 2, gpus=8))]


def test_the_greedy_walk_starts_one_and_holds_the_other_with_the_limit() -> None:
    snap = snapshot(
        jobs=[_mine("a1", submitted_s=0.0), _mine("a2", submitted_s=1.0), _mine("b1", "bob")],
        clusters=_free_for_all(),
        policy=_policy(alice=1),
    )
    plan = plan_cycle(snap)
    started = {s.job_key for s in plan.starts}
    assert "b1" in started
    assert len(started & {"a1", "a2"}) == 1
    (hold,) = plan.holds
    assert hold.reason == WaitReason.Quota
    assert hold.message == "user alice in vision: concurrent-job limit 1 reached (1 running)"
    assert check_plan(plan, snap) == ()


def test_a_running_or_staging_job_holds_its_slot() -> None:
    """Jobs in the snapshot's running (staging and dispatched ones are there too) count."""
    snap = snapshot(
        jobs=[_mine("a2")],
        running_jobs=[running(_mine("a1"), "north", "A100-80GB", ("north-0",))],
        clusters=_free_for_all(),
        policy=_policy(alice=1),
    )
    plan = plan_cycle(snap)
    assert plan.starts == ()
    assert plan.holds[0].reason == WaitReason.Quota


def test_a_policy_without_job_limits_starts_them_all() -> None:
    snap = snapshot(
        jobs=[_mine(f"a{i}", submitted_s=float(i)) for i in range(4)],
        clusters=_free_for_all(),
        policy=_policy(),
    )
    assert len(plan_cycle(snap).starts) == 4


def test_the_milp_keeps_the_limit_with_a_row_per_limited_key() -> None:
    """Room for three of alice's four 1-GPU jobs beside a 6-GPU job that contends with them: the
    MILP solves the window, and its row lets at most two of alice's start."""
    policy = replace(_policy(alice=2), placement=Placement(method="milp"))
    jobs = [_mine(f"a{i}", submitted_s=float(i)) for i in range(4)]
    jobs.append(job("big", gpus=6, group="other", user="zed", submitted_s=0.0))
    snap = snapshot(
        jobs=jobs, clusters=[cluster("north", nodes("north", 1, gpus=8))], policy=policy
    )
    plan = plan_cycle(snap)
    assert plan.stats.method == "milp"
    alices = [s.job_key for s in plan.starts if s.job_key.startswith("a")]
    assert len(alices) == 2
    assert check_plan(plan, snap) == ()
    held = [h for h in plan.holds if h.job_key.startswith("a")]
    assert held and all(h.reason == WaitReason.Quota for h in held)
    assert all("concurrent-job limit 2 reached (2 running)" in h.message for h in held)


def test_a_reservation_is_not_made_for_a_job_at_its_limit() -> None:
    """A big job over its job limit takes no reservation: it could not start on the room."""
    big = job("big", gpus=8, workers=2, group="vision", user="alice")
    busy = running(_mine("a1"), "north", "A100-80GB", ("north-0",), end_s=600.0)
    room = [cluster("north", nodes("north", 2, gpus=8, free=[7.0, 8.0]))]
    unlimited = snapshot(jobs=[big], running_jobs=[busy], clusters=room, policy=_policy())
    (hold,) = plan_cycle(unlimited).holds
    assert hold.reserved_start_s == 600.0  # without the limit it reserves the room
    limited = replace(unlimited, policy=_policy(alice=1))
    (hold,) = plan_cycle(limited).holds
    assert hold.reason == WaitReason.Quota
    assert hold.reserved_start_s is None


def test_lending_lends_idle_gpus_but_never_job_slots() -> None:
    """With lending, alice may go over her GPUs while they idle, not over her job limit."""
    quota = GroupQuota(users=MappingProxyType({"alice": Limit(gpus=1, jobs=2)}))
    policy = QueuePolicy(quotas=Quotas(groups=MappingProxyType({"vision": quota}), lending=True))
    snap = snapshot(
        jobs=[_mine(f"a{i}", submitted_s=float(i)) for i in range(3)],
        clusters=_free_for_all(),
        policy=policy,
    )
    plan = plan_cycle(snap)
    assert len(plan.starts) == 2  # one within her GPU quota, one lent
    (hold,) = plan.holds
    assert hold.message == "user alice in vision: concurrent-job limit 2 reached (2 running)"
    assert check_plan(plan, snap) == ()


def test_explain_shows_the_job_limit_in_use() -> None:
    snap = snapshot(
        jobs=[_mine("a2")],
        running_jobs=[running(_mine("a1"), "north", "A100-80GB", ("north-0",))],
        clusters=_free_for_all(),
        policy=_policy(group=4, alice=1),
    )
    found = explain(snap, plan_cycle(snap), "a2")
    assert found.quotas == (
        "group vision: 1 of 4 jobs running",
        "user alice in vision: 1 of 1 jobs running",
    )
    assert found.message == "user alice in vision: concurrent-job limit 1 reached (1 running)"


def test_no_preemption_is_made_for_a_job_that_could_not_start_for_its_job_limit() -> None:
    """Two urgent jobs of alice (one slot) over two preemptible jobs: one preemption only. Without
    the limit both are made."""
    room = [cluster("m", nodes("m", 2, gpus=4, free=[0.0, 0.0]))]
    veterans = [
        running(
            job(f"v{i}", gpus=4, runtime_s=40_000.0, checkpoint=True, group="other"),
            "m",
            "A100-80GB",
            (f"m-{i}",),
            end_s=40_000.0,
        )
        for i in range(2)
    ]
    urgent = [
        job(f"u{i}", gpus=4, submitted_s=1000.0, priority=5, group="vision", user="alice")
        for i in range(2)
    ]
    base = _policy()
    policy = replace(
        base,
        preemption=Preemption(enabled=True),
        quotas=replace(base.quotas, max_priority=None),
    )
    snap = snapshot(jobs=urgent, clusters=room, running_jobs=veterans, now_s=1000.0, policy=policy)
    assert len(plan_cycle(snap).preemptions) == 2
    limited = replace(
        snap, policy=replace(policy, quotas=replace(_policy(alice=1).quotas, max_priority=None))
    )
    (only,) = plan_cycle(limited).preemptions
    assert only.for_key in {"u0", "u1"}
