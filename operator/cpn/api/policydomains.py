"""The policy's ``domains`` section: logical domains of member nodes, and who is bound to them.

::

    domains:
      interactive:                  # the A100 nodes of cluster north
        clusters: [north]
        labels: {gpu: a100}
        queues: [debug]             # jobs of queue debug run there, and only there
      batch:
        default: true               # every other node, and every job bound to no domain
        groups: [team-a]

What a domain means at run time is :mod:`cpn.core.domains`; whether the domains overlap
on real nodes can only be told against them (the operator does, when a policy arrives).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from cpn.api.constants import LABEL_GROUP
from cpn.api.fields import describe_value as _kind
from cpn.api.fields import join
from cpn.api.policyfields import Invalid, Parser, PolicyReader, boolean, names
from cpn.core.policy import DEFAULT_QUEUE, Domain, QueuePolicy

MAX_DOMAINS = 64
DOMAIN_KEYS = ("clusters", "labels", "queues", "groups", "default")
_SELECTOR = {"clusters", "labels"}
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
# a label's key: an optional DNS subdomain prefix and "/", then a name of at most 63
_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}")
_LABEL_VALUE = re.compile(rf"(?:{_LABEL_NAME})?")


def _labels(value: Any) -> Mapping[str, str]:
    """A label selector's ``matchLabels``: keys and values as Kubernetes writes them."""
    if not isinstance(value, Mapping) or not value:
        raise Invalid(f"expected a non-empty mapping of label to value, got {_kind(value)}")
    for key, item in value.items():
        if not isinstance(key, str) or len(key) > 316 or not _LABEL_KEY.fullmatch(key):
            raise Invalid(f"{key!r} is not a label key (as in gpu or example.com/pool)")
        if not isinstance(item, str) or not _LABEL_VALUE.fullmatch(item):
            hint = " (quote it: labels are strings)" if isinstance(item, bool | int | float) else ""
            raise Invalid(f"{_kind(item)} is not a label value{hint}", at=f".{key}")
    return MappingProxyType(dict(value))


_DOMAIN: Mapping[str, Parser] = {
    "clusters": names,
    "labels": _labels,
    "queues": names,
    "groups": names,
    "default": boolean,
}


def read_domains(reader: PolicyReader, value: Any) -> tuple[Domain, ...]:
    """The ``domains`` section, in the order written; every problem reported on ``reader``."""
    domains: list[Domain] = []
    bound: dict[tuple[str, str], str] = {}  # (queues|groups, name) -> its domain
    entries = reader.entries(value, "domains", "domain")
    if len(entries) > MAX_DOMAINS:
        reader.error("domains", f"at most {MAX_DOMAINS} domains, got {len(entries)}")
    for name, item, path in entries:
        if not _DNS_LABEL.fullmatch(name):
            reader.error(path, "not a domain name (lower-case letters, digits, '-'; ≤ 63)")
        fields = reader.section(item, path, _DOMAIN)
        domain = Domain(name=name, **fields)
        if domain.default and (domain.clusters or domain.labels):
            reader.error(
                path,
                "the default domain holds the nodes no other domain selects: "
                "it takes no clusters or labels",
            )
        elif "clusters" in fields and not domain.clusters:
            reader.error(join(path, "clusters"), "is empty: name a cluster, or leave it out")
        elif not domain.default and not (isinstance(item, Mapping) and item.keys() & _SELECTOR):
            reader.error(path, "selects no node: give clusters, labels or both (or default: true)")
        for kind in ("queues", "groups"):
            for member in sorted(getattr(domain, kind)):
                other = bound.setdefault((kind, member), name)
                if other != name:
                    what = kind[:-1]
                    reader.error(
                        join(path, kind),
                        f"{what} {member} is also bound to domain {other}: a {what} has one domain",
                    )
        domains.append(domain)
    defaults = [d.name for d in domains if d.default]
    if len(defaults) > 1:
        reader.error("domains", f"only one default domain, got {', '.join(defaults)}")
    return tuple(domains)


def check_domain_quotas(reader: PolicyReader, policy: QueuePolicy) -> None:
    """Report each per-domain group quota (``quotas.groups.G.domains.D``) naming a domain
    the ``domains`` section does not define."""
    known = {d.name for d in policy.domains}
    for group, quota in sorted(policy.quotas.groups.items()):
        for name in sorted(set(quota.domains) - known):
            defined = ", ".join(sorted(known)) or "none"
            reader.error(
                join(join(join("quotas.groups", group), "domains"), name),
                f"no domain {name} in the policy's domains (defined: {defined})",
            )


def domain_notes(policy: QueuePolicy) -> list[tuple[str, str]]:
    """What an offline check can only warn of: a domain binding a group or a queue that no
    other part of the policy names (maybe a typo; groups also come from namespace labels,
    and queues from the AIJobs, which only the hub has), as (field path, message)."""
    groups = {
        *policy.quotas.groups,
        *policy.group_levels,
        *(group for _, group in policy.namespaces.values() if group),
        *(group for level in policy.levels for group in level.groups),
    }
    queues = {DEFAULT_QUEUE, *(queue for level in policy.levels for queue in level.queues)}
    notes = []
    for domain in policy.domains:
        for kind, known, where, fine in (
            (
                "group",
                groups,
                "quotas, group_levels, levels or namespaces",
                f"namespaces labelled {LABEL_GROUP}=",
            ),
            ("queue", queues, "levels", "AIJobs with spec.queue: "),
        ):
            for name in sorted(getattr(domain, f"{kind}s") - known):
                notes.append(
                    (
                        join(join("domains", domain.name), f"{kind}s"),
                        f"{kind} {name} is named nowhere else in the policy ({where}): "
                        f"right if {fine}{name} exist, else check its spelling",
                    )
                )
    return notes
