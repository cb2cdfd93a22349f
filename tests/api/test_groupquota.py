"""GroupQuota objects read, namespaces bound to groups, the bounds the admission policy reads,
and the status cpn writes (with the store that folds them into the policy in force)."""

from __future__ import annotations

from typing import Any

from cpn.api.groupquota import bound_data, bound_group, read_groupquota, render_groupquota_status
from cpn.api.policy import parse_policy
from cpn.core.delegated import above_bound
from cpn.runtime.delegation import wanted_bounds, wanted_statuses
from cpn.runtime.store import Store
from tests.runtime.test_store import FixedEstimator

POLICY = parse_policy(
    """
namespaces:
  shared: {group: vision}
  solo: {user: dan}
quotas:
  groups:
    vision: {gpus: 8, per_type: {a100-80gb: 4}}
"""
)


def groupquota(namespace: str = "team-a", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cpn.io/v1alpha1",
        "kind": "GroupQuota",
        "metadata": {"name": "split", "namespace": namespace, "generation": 2},
        "spec": spec,
    }


def test_read_canonicalises_gpu_type_names_and_keeps_what_it_does_not_know() -> None:
    item = read_groupquota(
        groupquota(users={"alice": {"gpus": 3, "perType": {"a100-80gb": 2, "TPU-x": 1}}}),
        "vision",
    )
    assert item.key == "team-a/split"
    assert item.users["alice"].gpus == 3
    assert dict(item.users["alice"].per_type) == {"A100-80GB": 2, "TPU-x": 1}
    assert item.default_user is None


def test_a_namespace_is_bound_by_the_policys_map_first_then_its_label() -> None:
    assert bound_group("shared", POLICY, {"cpn.io/group": "nlp"}) == "vision"
    assert bound_group("solo", POLICY, {"cpn.io/group": "nlp"}) == ""  # the map decides both
    assert bound_group("team-a", POLICY, {"cpn.io/group": "vision"}) == "vision"
    assert bound_group("team-x", POLICY, {"cpn.io/user": "x"}) == ""  # its name binds nothing


def test_bound_data_holds_each_bound_namespace_group_and_figures() -> None:
    data = bound_data({"team-a": "vision", "team-n": "nlp"}, POLICY)
    assert data == {
        "team-a.group": "vision",
        "team-a.gpus": "8",
        "team-a.gpus.A100-80GB": "4",
        "team-n.group": "nlp",  # a group without a quota in the policy: unbounded
    }


def test_status_says_within_above_or_unbound() -> None:
    above = read_groupquota(groupquota(users={"alice": {"gpus": 12}}), "vision")
    status = render_groupquota_status(above, above_bound(above, POLICY), generation=2, now_s=1e9)
    (cond,) = status["conditions"]
    assert (status["group"], status["users"]) == ("vision", "alice")
    assert (cond["status"], cond["reason"]) == ("False", "AboveGroupBound")
    assert "spec.users.alice.gpus: 12 exceeds the group's bound 8" in cond["message"]
    assert "the group's bound is applied" in cond["message"]
    unbound = read_groupquota(groupquota("team-x", users={"bob": {"gpus": 1}}), "")
    (cond,) = render_groupquota_status(unbound, [], generation=1, now_s=1e9)["conditions"]
    assert cond["reason"] == "NamespaceNotBound"
    assert "namespace team-x is not bound to a group" in cond["message"]
    fine = read_groupquota(groupquota(users={"bob": {"gpus": 1}}), "vision")
    (cond,) = render_groupquota_status(fine, [], generation=1, now_s=1e9)["conditions"]
    assert (cond["status"], cond["reason"]) == ("True", "WithinBound")


def test_the_store_applies_groupquotas_and_follows_namespace_labels() -> None:
    store = Store(POLICY, FixedEstimator())
    store.set_namespace("team-a", {"cpn.io/group": "vision"})
    store.set_group_quota("team-a/split", groupquota(users={"alice": {"gpus": 12}}))
    assert store.policy.quotas.groups["vision"].users["alice"].gpus == 8  # clamped
    assert store.base_policy is POLICY
    # the namespace loses its group: its GroupQuota applies no more
    store.set_namespace("team-a", {})
    assert "alice" not in store.policy.quotas.groups["vision"].users
    # a new policy keeps the GroupQuotas applied
    store.set_namespace("team-a", {"cpn.io/group": "vision"})
    store.set_policy(parse_policy("quotas: {groups: {vision: {gpus: 4}}}"))
    assert store.policy.quotas.groups["vision"].users["alice"].gpus == 4
    store.set_group_quota("team-a/split", None)
    assert "alice" not in store.policy.quotas.groups["vision"].users


def test_what_the_operator_writes_follows_the_store() -> None:
    store = Store(POLICY, FixedEstimator())
    store.set_namespace("team-a", {"cpn.io/group": "vision"})
    store.set_namespace("other", {})
    store.set_namespace("shared", {})
    assert wanted_bounds(store) == {
        "shared.group": "vision",
        "shared.gpus": "8",
        "shared.gpus.A100-80GB": "4",
        "team-a.group": "vision",
        "team-a.gpus": "8",
        "team-a.gpus.A100-80GB": "4",
    }
    body = groupquota(users={"alice": {"gpus": 2}})
    store.set_group_quota("team-a/split", body)
    wanted = wanted_statuses(store, 1e9)
    assert wanted["team-a/split"]["conditions"][0]["reason"] == "WithinBound"
    body["status"] = wanted["team-a/split"]  # written: nothing more to write
    assert wanted_statuses(store, 2e9) == {}
