"""The texts a held job is told: one function per message, so every wording lives here.

The cycle (:mod:`cpn.core.cycle`) and the quota ledger (:mod:`cpn.core.quota`) pick the
:class:`~cpn.core.model.WaitReason`; these functions say it in words a researcher can
read, with the numbers that matter. Pure: values in, a string out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cpn.core.capacity import GroupKey, worker_gpus
from cpn.core.domains import job_domain
from cpn.core.model import Job, Snapshot

SUSPENDED = "suspended by its owner (spec.suspend)"
NO_CANDIDATE = "no reachable cluster has an allowed GPU type with a runtime estimate"
NO_IDLE_TO_BORROW = "; no idle GPUs to borrow"
WAITING_FOR_FASTER = "sooner than starting now elsewhere"


def need(job: Job) -> str:
    """What one start of ``job`` asks: "2 x 4 GPU(s)"."""
    return f"{job.workers} x {worker_gpus(job):g} GPU(s)"


def backoff(job: Job, wait_s: float) -> str:
    return f"attempt {job.attempts} failed; retrying in {wait_s:.0f}s"


def largest_nodes(snapshot: Snapshot) -> dict[tuple[str, str], int]:
    """The most GPUs one node has, per (GPU type, domain) of the snapshot's clusters: one
    pass over the nodes for all of a cycle's :func:`infeasible` messages (10 members x
    1,000 nodes made a pass per infeasible job cost seconds a cycle)."""
    out: dict[tuple[str, str], int] = {}
    for c in snapshot.clusters:
        for n in c.nodes:
            key = (n.gpu_type, n.domain)
            if n.gpus > out.get(key, 0):
                out[key] = n.gpus
    return out


def infeasible(
    job: Job, snapshot: Snapshot, largest: Mapping[tuple[str, str], int] | None = None
) -> str:
    """No cluster could ever hold ``job``: its shape and the largest matching node (of its
    domain, when it is bound to one). ``largest``: :func:`largest_nodes` of ``snapshot``."""
    domain = job_domain(snapshot.policy, job)
    largest = largest_nodes(snapshot) if largest is None else largest
    biggest = max(
        (gpus for (gpu_type, d), gpus in largest.items() if d == domain and job.allows(gpu_type)),
        default=0,
    )
    types = ", ".join(sorted(job.gpu_types)) if job.gpu_types else "any GPU type"
    where = f" in domain {domain}" if domain else ""
    return (
        f"no cluster can ever hold {job.workers} worker(s) x {worker_gpus(job):g} GPU(s) "
        f"of {types}{where} (largest matching node has {biggest} GPUs)"
    )


def reserved(key: GroupKey, start_s: float, now_s: float) -> str:
    """Room of ``key`` (cluster, GPU type) is held for the job from ``start_s``."""
    return f"reserved {key[1]} on {key[0]} from t={start_s:.0f}s ({start_s - now_s:.0f}s from now)"


def behind(blocker: str, ordering: str) -> str:
    return f"behind {blocker} (strict {ordering} order)"


def waiting_for(key: GroupKey) -> str:
    """Placement chose to wait for the faster ``key`` (cluster, GPU type)."""
    return f"waiting for {key[1]} on {key[0]}: predicted to finish {WAITING_FOR_FASTER}"


def reserved_for(job: Job, holders: Iterable[str]) -> str:
    return f"room for {need(job)} is reserved for {', '.join(sorted(set(holders)))}"


def node_load(job: Job, nodes: Iterable[tuple[str, str]]) -> str:
    """Nodes with room for ``job`` take no new job; ``nodes``: (cluster/node, why not).
    Names and causes only (no measured figure), so the message changes only when they do."""
    by_why: dict[str, list[str]] = {}
    for name, why in nodes:
        by_why.setdefault(why, []).append(name)
    said = []
    for why, names in sorted(by_why.items()):
        names = sorted(set(names))
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        said.append(f"{', '.join(names[:3])}{more}: {why}")
    return f"nodes with room for {need(job)} take no new job ({'; '.join(said)})"


def no_room(job: Job, free_gpus: float) -> str:
    return f"needs {need(job)}; at most {free_gpus:g} GPUs free in one allowed cluster/type"


def deferred(fits: Iterable[GroupKey]) -> str:
    """The MILP chose to wait for a faster GPU type rather than start on ``fits``."""
    return (
        "placement predicts it finishes sooner by waiting for a faster GPU type "
        "than by starting now on " + ", ".join(f"{key[1]}@{key[0]}" for key in fits)
    )


def preempted_for(key: str) -> str:
    return f"preempted for higher-ranked {key}"


def preempted_for_overdue(key: str) -> str:
    """The overdue head's preemption (``preemption.for_overdue``): not for rank."""
    return f"preempted for {key}, which has waited past its wait bound and reserved this room"


def preempted_for_claim(key: str) -> str:
    """A reservation claiming its room back (``preemption.claim``): not for rank."""
    return f"preempted for {key}, whose reservation claims the room this job started on"


def over_quota(label: str, used: float, limit: float, gpus: float) -> str:
    return f"quota of {label}: {used:g} of {limit:g} GPUs in use, job needs {gpus:g}"


def over_type_quota(label: str, gpu_type: str, used: float, cap: float, gpus: float) -> str:
    return f"quota of {label} on {gpu_type}: {used:g} of {cap:g} in use, job needs {gpus:g}"


def over_job_limit(label: str, running: int, limit: int) -> str:
    """Why a job waits for one of its group's or user's running jobs to end."""
    return f"{label}: concurrent-job limit {limit} reached ({running} running)"


def started_alone(model: str) -> str:
    """Why a started job has its nodes to itself (:mod:`cpn.core.alone`)."""
    return f"first job of model {model}: runs alone on its node for a clean measurement"


def no_empty_node(job: Job, free_gpus: float) -> str:
    """Why a first-of-model job waits although GPUs are free: none on an empty node."""
    return (
        f"first job of model {job.model} runs alone on its node for a clean measurement: "
        f"no empty node has room for {need(job)} ({free_gpus:g} GPUs free on nodes other "
        "jobs use)"
    )


def beside_alone(job: Job) -> str:
    """Why a job waits although GPUs are free: they are on nodes held by a job alone."""
    return (
        f"needs {need(job)}; the free GPUs that would hold it are on nodes where the first "
        "job of a model runs alone (for a clean measurement) until it ends"
    )


def over_budget(group: str, used_gpu_s: float, budget_h: float, period: str) -> str:
    """The job's group used its GPU-hour budget of the period (quotas.over_budget: hold)."""
    return (
        f"group {group} used {used_gpu_s / 3600:.1f} of its {budget_h:g} GPU-hour budget "
        f"this {period}; its jobs wait for the next {period}"
    )


def at_lowest(group: str) -> str:
    """Appended to why a job of an over-budget group waits (quotas.over_budget: lowest)."""
    return f"; group {group} is past its GPU-hour budget: its jobs run at the lowest level"
