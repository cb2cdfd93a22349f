"""Logical domains of nodes: the domain a node is in, the one a job is bound to.

The policy's domains (:class:`~cpn.core.policy.Domain`) select member nodes by cluster and
labels. A job bound to a domain (through its queue, else its group) is placed only on
that domain's nodes; a job bound to none only on nodes of no domain, which are the
``default`` domain's when the policy names one. As Slurm's partitions: a job that names
no partition runs in the default one, never in another. So a node's domain and a job's
are compared for equality, and with no domains both are "": every job, every node.

A node that two domains select is in neither: its domain is their names joined by
:data:`CONFLICT`, which no job is bound to, so nothing new is placed there until the
selectors are made exclusive. The operator refuses a policy whose domains overlap on the
nodes it sees (:func:`check_domains`); this catches a node labelled afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from cpn.core.model import Job
from cpn.core.policy import DEFAULT_QUEUE, Domain, QueuePolicy

#: joins the names of the domains that all select one node (a conflict: no job goes there)
CONFLICT = "+"
_SHOWN = 3  # nodes named in one message


def selects(domain: Domain, cluster: str, labels: Mapping[str, str]) -> bool:
    """True if ``domain``'s selector takes a node of ``cluster`` with ``labels``."""
    if domain.default or (domain.clusters and cluster not in domain.clusters):
        return False
    return all(labels.get(key) == value for key, value in domain.labels.items())


def default_domain(domains: Sequence[Domain]) -> str:
    """The default domain's name ("" when the policy names none)."""
    return next((d.name for d in domains if d.default), "")


def node_domain(domains: Sequence[Domain], cluster: str, labels: Mapping[str, str]) -> str:
    """The domain of a node of ``cluster`` with ``labels`` ("" for none)."""
    if not domains:
        return ""
    found = sorted(d.name for d in domains if selects(d, cluster, labels))
    if found:
        return CONFLICT.join(found)
    return default_domain(domains)


def job_domain(policy: QueuePolicy, job: Job) -> str:
    """The domain ``job`` is bound to: its queue's, else its group's, else the default."""
    domains = policy.domains
    if not domains:
        return ""
    queue = job.queue or DEFAULT_QUEUE
    for domain in domains:
        if queue in domain.queues:
            return domain.name
    for domain in domains:
        if job.group in domain.groups:
            return domain.name
    return default_domain(domains)


def check_domains(
    domains: Sequence[Domain], nodes: Iterable[tuple[str, str, Mapping[str, str]]]
) -> tuple[list[str], list[str]]:
    """The domains against the GPU nodes seen, as (cluster, node, labels): why the policy
    is refused (two domains select one node) and what to warn of (a domain with no node)."""
    overlaps: dict[str, list[str]] = {}
    counts = {d.name: 0 for d in domains}
    for cluster, name, labels in nodes:
        domain = node_domain(domains, cluster, labels)
        if CONFLICT in domain:
            overlaps.setdefault(domain, []).append(f"{cluster}/{name}")
        elif domain:
            counts[domain] += 1
    refused = []
    for both, where in sorted(overlaps.items()):
        names = " and ".join(both.split(CONFLICT))
        shown = ", ".join(sorted(where)[:_SHOWN]) + (", ..." if len(where) > _SHOWN else "")
        refused.append(
            f"domains {names} both select {len(where)} node(s) ({shown}): "
            "a node may be in one domain only; make their selectors exclusive"
        )
    warned = [
        f"domain {d.name} has no GPU node ({describe(d)}): its jobs cannot start"
        for d in domains
        if counts[d.name] == 0
    ]
    return refused, warned


def describe(domain: Domain) -> str:
    """A domain's selector in words: "cluster north, labels gpu=a100"."""
    if domain.default:
        return "the nodes no other domain selects"
    parts = []
    if domain.clusters:
        parts.append(f"cluster {', '.join(sorted(domain.clusters))}")
    if domain.labels:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(domain.labels.items()))
        parts.append(f"labels {labels}")
    return "; ".join(parts) or "every node"
