"""Delegated quotas: a group's admin divides the group's quota among its users.

The cluster admin sets each group's bound in the policy (``quotas.groups.<group>``); a
group's admin writes GroupQuota objects in a namespace bound to the group, naming a quota per
user and one for every other user. Here they are folded into the policy the scheduler uses:

- the group's bound always wins: a user's figure above it is clamped to it, and the object is
  told so (:func:`above_bound`);
- a user named in a GroupQuota takes that quota instead of the one the policy names for them
  in that group (``quotas.groups.<group>.users.<user>``), and a GroupQuota's ``defaultUser``
  replaces the policy's ``default_user``; users the GroupQuotas do not name keep the policy's;
- when several GroupQuotas of one group name the same user (or each has a ``defaultUser``),
  the strictest figure of each field holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from cpn.core.policy import GroupQuota, Limit, QueuePolicy

_N = TypeVar("_N", float, int)


def _empty() -> Mapping[str, Limit]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class Delegated:
    """One GroupQuota object, read: whose it is (``group``: its namespace's, "" when the
    namespace is bound to none) and the quotas it names."""

    key: str  # namespace/name
    group: str
    users: Mapping[str, Limit] = field(default_factory=_empty)
    default_user: Limit | None = None


def _figure(value: float) -> str:
    return f"{value:g}"


def _limit_over(limit: Limit, bound: Limit, path: str) -> list[str]:
    """Where ``limit`` exceeds ``bound`` (a type's ceiling is the bound's figure for the type,
    else its total), each as ``path: N exceeds the group's bound M``."""
    found = []
    if limit.gpus is not None and bound.gpus is not None and limit.gpus > bound.gpus:
        found.append(
            f"{path}.gpus: {_figure(limit.gpus)} exceeds the group's bound {_figure(bound.gpus)}"
        )
    for gpu_type, gpus in sorted(limit.per_type.items()):
        ceiling = bound.per_type.get(gpu_type, bound.gpus)
        if ceiling is not None and gpus > ceiling:
            found.append(
                f"{path}.perType.{gpu_type}: {_figure(gpus)} exceeds the group's bound "
                f"{_figure(ceiling)}"
            )
    if limit.jobs is not None and bound.jobs is not None and limit.jobs > bound.jobs:
        found.append(f"{path}.jobs: {limit.jobs} exceeds the group's bound {bound.jobs}")
    return found


def above_bound(item: Delegated, policy: QueuePolicy) -> list[str]:
    """Every figure of ``item`` above its group's bound in ``policy`` (none when the group has
    no quota there: nothing bounds it but the GroupQuota)."""
    quota = policy.quotas.groups.get(item.group)
    if quota is None:
        return []
    found = []
    for user, limit in sorted(item.users.items()):
        found += _limit_over(limit, quota.limit, f"spec.users.{user}")
    if item.default_user is not None:
        found += _limit_over(item.default_user, quota.limit, "spec.defaultUser")
    return found


def _lower(a: _N | None, b: _N | None) -> _N | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def strictest(a: Limit, b: Limit) -> Limit:
    """The lower figure of each field of two limits (a field one leaves out: the other's)."""
    types = {*a.per_type, *b.per_type}
    per_type = {t: _lower(a.per_type.get(t), b.per_type.get(t)) for t in sorted(types)}
    return Limit(
        gpus=_lower(a.gpus, b.gpus),
        per_type=MappingProxyType({t: v for t, v in per_type.items() if v is not None}),
        jobs=_lower(a.jobs, b.jobs),
    )


def clamp(limit: Limit, bound: Limit) -> Limit:
    """``limit`` with each figure lowered to the bound's where above it."""
    per_type: dict[str, float] = {}
    for gpu_type, figure in limit.per_type.items():
        ceiling = bound.per_type.get(gpu_type, bound.gpus)
        per_type[gpu_type] = figure if ceiling is None else min(figure, ceiling)
    gpus = limit.gpus if bound.gpus is None or limit.gpus is None else min(limit.gpus, bound.gpus)
    jobs = limit.jobs if bound.jobs is None or limit.jobs is None else min(limit.jobs, bound.jobs)
    return Limit(gpus=gpus, per_type=MappingProxyType(per_type), jobs=jobs)


def _merged(items: list[Delegated]) -> tuple[dict[str, Limit], Limit | None]:
    users: dict[str, Limit] = {}
    default_user: Limit | None = None
    for item in sorted(items, key=lambda i: i.key):
        for user, limit in item.users.items():
            users[user] = strictest(users[user], limit) if user in users else limit
        if item.default_user is not None:
            default_user = (
                item.default_user
                if default_user is None
                else strictest(default_user, item.default_user)
            )
    return users, default_user


def with_delegated(policy: QueuePolicy, delegated: Iterable[Delegated]) -> QueuePolicy:
    """``policy`` with the users' quotas of the GroupQuotas in ``delegated`` (those of
    namespaces bound to no group are left out), clamped to their group's bound."""
    by_group: dict[str, list[Delegated]] = {}
    for item in delegated:
        if item.group:
            by_group.setdefault(item.group, []).append(item)
    if not by_group:
        return policy
    groups = dict(policy.quotas.groups)
    for group, items in sorted(by_group.items()):
        quota = groups.get(group, GroupQuota())
        users, default_user = _merged(items)
        merged_users = dict(quota.users)
        merged_users.update({u: clamp(limit, quota.limit) for u, limit in users.items()})
        groups[group] = replace(
            quota,
            users=MappingProxyType(merged_users),
            default_user=(
                clamp(default_user, quota.limit) if default_user is not None else quota.default_user
            ),
        )
    return replace(policy, quotas=replace(policy.quotas, groups=MappingProxyType(groups)))
