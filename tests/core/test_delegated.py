"""Delegated quotas (GroupQuota objects) folded into the policy: the group's bound wins, a
GroupQuota's user replaces the policy's user, the strictest of several GroupQuotas holds."""

from __future__ import annotations

from types import MappingProxyType

from cpn.api.policy import parse_policy
from cpn.core.delegated import Delegated, above_bound, clamp, strictest, with_delegated
from cpn.core.policy import Limit
from cpn.core.quota import QuotaLedger
from tests.builders import job, running

POLICY = parse_policy(
    """
quotas:
  groups:
    vision:
      gpus: 8
      per_type: {A100-80GB: 4}
      users: {alice: {gpus: 6}, bob: {gpus: 5}}
      default_user: {gpus: 3}
"""
)


def limit(gpus: float | None = None, **per_type: float) -> Limit:
    return Limit(gpus=gpus, per_type=MappingProxyType(dict(per_type)))


def quota(key: str = "team-a/q", group: str = "vision", **users: Limit) -> Delegated:
    return Delegated(key=key, group=group, users=MappingProxyType(users))


def test_a_user_named_in_a_groupquota_takes_its_figure_instead_of_the_policys() -> None:
    """alice: 6 in the policy, 2 in the GroupQuota -> 2; bob (not in it) keeps the policy's 5."""
    policy = with_delegated(POLICY, [quota(alice=limit(2))])
    users = policy.quotas.groups["vision"].users
    assert users["alice"].gpus == 2
    assert users["bob"].gpus == 5
    assert policy.quotas.groups["vision"].limit.gpus == 8  # the bound is the cluster admin's


def test_the_groups_bound_wins_over_a_groupquota_above_it() -> None:
    """12 GPUs for alice in a group bound to 8: 8 applies; 6 A100s where the group has 4: 4."""
    item = quota(alice=limit(12, **{"A100-80GB": 6}))
    users = with_delegated(POLICY, [item]).quotas.groups["vision"].users
    assert users["alice"].gpus == 8
    assert users["alice"].per_type["A100-80GB"] == 4
    assert above_bound(item, POLICY) == [
        "spec.users.alice.gpus: 12 exceeds the group's bound 8",
        "spec.users.alice.perType.A100-80GB: 6 exceeds the group's bound 4",
    ]


def test_a_type_the_group_does_not_bound_on_its_own_is_bound_by_its_total() -> None:
    item = quota(alice=limit(None, **{"V100-32GB": 9}))
    assert above_bound(item, POLICY) == [
        "spec.users.alice.perType.V100-32GB: 9 exceeds the group's bound 8"
    ]
    assert clamp(item.users["alice"], POLICY.quotas.groups["vision"].limit).per_type == {
        "V100-32GB": 8
    }


def test_within_the_bound_nothing_is_reported() -> None:
    assert above_bound(quota(alice=limit(8, **{"A100-80GB": 4})), POLICY) == []


def test_several_groupquotas_of_one_group_the_strictest_figure_holds() -> None:
    first = quota("team-a/q", alice=limit(4, **{"A100-80GB": 1}))
    second = quota("team-b/q", alice=limit(2, **{"A100-80GB": 3, "V100-32GB": 2}))
    users = with_delegated(POLICY, [second, first]).quotas.groups["vision"].users
    assert users["alice"] == limit(2, **{"A100-80GB": 1, "V100-32GB": 2})
    assert strictest(limit(None), limit(3)).gpus == 3


def test_default_user_replaces_the_policys_default_user() -> None:
    item = Delegated(key="team-a/q", group="vision", default_user=limit(1))
    assert with_delegated(POLICY, [item]).quotas.groups["vision"].default_user == limit(1)
    # without one, the policy's stays
    assert with_delegated(POLICY, [quota(alice=limit(1))]).quotas.groups[
        "vision"
    ].default_user == limit(3)


def test_a_groupquota_of_an_unbound_namespace_changes_nothing() -> None:
    assert with_delegated(POLICY, [quota(group="", alice=limit(1))]) is POLICY


def test_a_group_without_a_quota_in_the_policy_gets_only_its_users_limits() -> None:
    policy = with_delegated(POLICY, [quota(group="nlp", carol=limit(2))])
    nlp = policy.quotas.groups["nlp"]
    assert nlp.limit.gpus is None
    assert nlp.users["carol"].gpus == 2


def test_the_ledger_holds_a_user_back_at_their_groupquota_figure() -> None:
    """alice runs 2 GPUs; her GroupQuota says 2: a third is over her quota, and the reason
    names her quota (the group's 8 would allow it)."""
    policy = with_delegated(POLICY, [quota(alice=limit(2))])
    held = job("a2", gpus=1, user="alice", group="vision")
    busy = running(job("a1", gpus=2, user="alice", group="vision"), "c", "A100-80GB", ("n",))
    why = QuotaLedger(policy, [busy]).exceeds(held)
    assert "user alice in vision" in why
    assert QuotaLedger(POLICY, [busy]).exceeds(held) == ""
