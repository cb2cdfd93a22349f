"""GroupQuota objects (crds/groupquota.yaml) and the group bounds the API server checks them
against.

:func:`read_groupquota` turns a GroupQuota into a :class:`~cpn.core.delegated.Delegated`
(its group is filled in by the caller, from its namespace); :func:`bound_group` says which
group a namespace is bound to; :func:`bound_data` is what the ``cpn-group-bounds`` ConfigMap
in cpn's namespace holds (the params of the ValidatingAdmissionPolicy in
manifests/common/groupquota-admission.yaml); :func:`render_groupquota_status` is what cpn
writes in a GroupQuota's status.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from cpn.api import constants as k
from cpn.api.status import condition
from cpn.core.delegated import Delegated
from cpn.core.policy import Limit, QueuePolicy
from predictor.catalog import UnknownName, expand_gpu_types

GROUPQUOTA_PLURAL: Final = "groupquotas"
#: the ConfigMap cpn keeps in its own namespace: each bound namespace's group and its bounds
BOUNDS_CONFIGMAP: Final = "cpn-group-bounds"
_KEY: Final = re.compile(r"[-._a-zA-Z0-9]+")  # what a ConfigMap key may hold
#: condition on a GroupQuota: are its figures within the group's bound?
COND_WITHIN_BOUND: Final = "WithinBound"
REASON_WITHIN: Final = "WithinBound"
REASON_ABOVE: Final = "AboveGroupBound"
REASON_UNBOUND: Final = "NamespaceNotBound"


def _gpu_type(name: str) -> str:
    """The name nodes report for a GPU type (a100-80gb -> A100-80GB), or ``name`` as written
    when it names none or several (the ledger then matches it only exactly)."""
    try:
        types = expand_gpu_types(name)
    except UnknownName:
        return name
    return next(iter(types)) if len(types) == 1 else name


def _limit(value: Any) -> Limit:
    if not isinstance(value, Mapping):
        return Limit()
    gpus = value.get("gpus")
    found = value.get("perType")
    per_type: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    jobs = value.get("jobs")
    return Limit(
        gpus=float(gpus) if isinstance(gpus, int | float) else None,
        jobs=jobs if isinstance(jobs, int) and not isinstance(jobs, bool) else None,
        per_type=MappingProxyType(
            {_gpu_type(str(t)): float(v) for t, v in per_type.items() if isinstance(v, int | float)}
        ),
    )


def read_groupquota(body: Mapping[str, Any], group: str) -> Delegated:
    """A GroupQuota (already checked by the API server against the CRD's schema) of a
    namespace bound to ``group`` ("" for none)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    found = spec.get("users")
    users: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    default_user = spec.get("defaultUser")
    return Delegated(
        key=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        group=group,
        users=MappingProxyType({str(u): _limit(v) for u, v in users.items()}),
        default_user=_limit(default_user) if isinstance(default_user, Mapping) else None,
    )


def bound_group(namespace: str, policy: QueuePolicy, labels: Mapping[str, str] | None) -> str:
    """The group ``namespace`` is bound to: the policy's ``namespaces`` map when it names the
    namespace (its ``group``, "" if it leaves it out), else the ``cpn.io/group`` label; ""
    when neither names one (a namespace's own name, the fallback owner of its jobs, does not
    bind it to a group)."""
    mapped = policy.namespaces.get(namespace)
    if mapped:
        return mapped[1]
    return (labels or {}).get(k.LABEL_GROUP, "")


def _figure(value: float) -> str:
    return f"{value:g}"


def bound_data(bound: Mapping[str, str], policy: QueuePolicy) -> dict[str, str]:
    """The data of the ``cpn-group-bounds`` ConfigMap, which the admission policy reads, for
    the namespaces ``bound`` to groups (namespace -> group): per namespace NS, ``NS.group``,
    ``NS.gpus`` (absent: unbounded), ``NS.gpus.<TYPE>`` for each GPU type the policy bounds
    on its own and ``NS.jobs``, the group's concurrent-job bound (absent: unbounded); namespace
    names have no dots, so keys cannot collide."""
    data: dict[str, str] = {}
    for namespace, group in sorted(bound.items()):
        data[f"{namespace}.group"] = group
        quota = policy.quotas.groups.get(group)
        if quota is None:
            continue
        if quota.limit.gpus is not None:
            data[f"{namespace}.gpus"] = _figure(quota.limit.gpus)
        if quota.limit.jobs is not None:
            data[f"{namespace}.jobs"] = str(quota.limit.jobs)
        for gpu_type, gpus in sorted(quota.limit.per_type.items()):
            if _KEY.fullmatch(gpu_type):
                data[f"{namespace}.gpus.{gpu_type}"] = _figure(gpus)
    return data


def bounds_configmap(namespace: str, data: Mapping[str, str]) -> dict[str, Any]:
    """The ``cpn-group-bounds`` ConfigMap (in cpn's own ``namespace``)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": BOUNDS_CONFIGMAP,
            "namespace": namespace,
            "labels": {k.LABEL_MANAGED: k.MANAGED_BY},
        },
        "data": dict(data),
    }


def render_groupquota_status(
    item: Delegated,
    above: Sequence[str],
    *,
    generation: int,
    now_s: float,
    previous: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Status of a GroupQuota: its group, the users it names, and whether its figures hold
    (``above``: the figures above the group's bound, from
    :func:`cpn.core.delegated.above_bound`; the bound is applied instead)."""
    if not item.group:
        namespace = item.key.split("/", 1)[0]
        ok, reason = False, REASON_UNBOUND
        message = (
            f"namespace {namespace} is not bound to a group (neither the policy's namespaces "
            f"map nor a {k.LABEL_GROUP} label names one): these quotas are not applied"
        )
    elif above:
        ok, reason = False, REASON_ABOVE
        message = "; ".join(above) + f" (group {item.group}): the group's bound is applied"
    else:
        ok, reason = True, REASON_WITHIN
        message = f"within the bound of group {item.group}"
    return {
        "group": item.group,
        "users": ",".join(sorted(item.users)),
        "observedGeneration": generation,
        "conditions": [
            condition(
                COND_WITHIN_BOUND,
                ok,
                reason,
                message,
                generation=generation,
                now_s=now_s,
                previous=previous,
            )
        ],
    }
