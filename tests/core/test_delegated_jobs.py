"""Concurrent-job limits in GroupQuotas: read from the object, clamped to the group's bound at
run time, reported above it, strictest of several, and carried to the admission policy."""

from __future__ import annotations

from types import MappingProxyType

from cpn.api.groupquota import bound_data, read_groupquota
from cpn.api.policy import parse_policy
from cpn.core.delegated import Delegated, above_bound, clamp, strictest, with_delegated
from cpn.core.policy import Limit

POLICY = parse_policy("quotas: {groups: {vision: {gpus: 8, jobs: 3, users: {bob: {jobs: 2}}}}}")


def _item(key: str = "team-a/q", **users: Limit) -> Delegated:
    return Delegated(key=key, group="vision", users=MappingProxyType(users))


def test_a_groupquota_users_jobs_is_read() -> None:
    body = {
        "metadata": {"name": "split", "namespace": "team-a"},
        "spec": {"users": {"alice": {"jobs": 2}, "bob": {"gpus": 1}}, "defaultUser": {"jobs": 1}},
    }
    item = read_groupquota(body, "vision")
    assert item.users["alice"].jobs == 2
    assert item.users["bob"].jobs is None
    assert item.default_user is not None and item.default_user.jobs == 1


def test_the_groups_job_bound_wins_and_is_reported() -> None:
    item = Delegated(
        key="team-a/q",
        group="vision",
        users=MappingProxyType({"alice": Limit(jobs=5)}),
        default_user=Limit(jobs=4),
    )
    quota = with_delegated(POLICY, [item]).quotas.groups["vision"]
    assert quota.users["alice"].jobs == 3
    assert quota.default_user is not None and quota.default_user.jobs == 3
    assert quota.users["bob"].jobs == 2  # not named by the GroupQuota: the policy's
    assert above_bound(item, POLICY) == [
        "spec.users.alice.jobs: 5 exceeds the group's bound 3",
        "spec.defaultUser.jobs: 4 exceeds the group's bound 3",
    ]


def test_within_the_bound_the_groupquotas_figure_holds() -> None:
    quota = with_delegated(POLICY, [_item(alice=Limit(jobs=1))]).quotas.groups["vision"]
    assert quota.users["alice"].jobs == 1
    assert above_bound(_item(alice=Limit(jobs=3)), POLICY) == []


def test_clamp_and_strictest_treat_jobs_like_gpus() -> None:
    assert clamp(Limit(jobs=None), Limit(jobs=2)).jobs is None  # the group's own row bounds it
    assert clamp(Limit(jobs=5), Limit(jobs=2)).jobs == 2
    assert clamp(Limit(jobs=1), Limit(jobs=None)).jobs == 1
    assert strictest(Limit(jobs=4, gpus=1), Limit(jobs=2)).jobs == 2
    assert strictest(Limit(jobs=None), Limit(jobs=None)).jobs is None
    two = [_item("a/q", alice=Limit(jobs=2)), _item("b/q", alice=Limit(jobs=1))]
    assert with_delegated(POLICY, two).quotas.groups["vision"].users["alice"].jobs == 1


def test_the_bounds_configmap_carries_the_groups_job_bound() -> None:
    data = bound_data({"team-a": "vision"}, POLICY)
    assert data == {"team-a.group": "vision", "team-a.gpus": "8", "team-a.jobs": "3"}
