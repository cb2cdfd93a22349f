"""Plan validity: what any :class:`~cpn.core.model.CyclePlan` must respect to be carried out.

:func:`check_plan` compares a plan with the snapshot it was made from and returns
every rule it breaks (an empty tuple when it breaks none). The simulator refuses a
plan with violations (a scheduler bug); tests assert that the cycle's plans and the
operator's have none. The rules:

- a job is preempted at most once, and only while it runs;
- a job is started at most once, only while pending, and not in the plan that
  preempts it;
- a start names a known, ready cluster, a GPU type the job allows, and one node per
  worker (gang jobs start whole); every node exists in that cluster, has that GPU
  type, is schedulable, is in the job's domain (:mod:`cpn.core.domains`), and has GPUs
  with the memory the job asks;
- no node is over capacity (GPUs, CPU, memory) once the plan's preemptions freed
  what they held and its starts took what they ask, worker by worker;
- without quota lending, no group or user goes over its quota (running jobs not
  preempted plus the plan's starts);
- holds name only jobs the snapshot knows;
- a job that must run alone (:mod:`cpn.core.alone`) starts marked so, on nodes with all
  their GPUs free and no job once the plan's preemptions are done, and no node a job
  runs alone on (running, or started by the plan) holds any other job after the plan.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpn.core.alone import runs_alone
from cpn.core.capacity import worker_gpus
from cpn.core.domains import job_domain
from cpn.core.model import CyclePlan, Job, Node, Snapshot, Start
from cpn.core.quota import QuotaLedger

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Violation:
    """One rule a plan breaks, for one job."""

    job_key: str
    message: str

    def __str__(self) -> str:
        return f"job {self.job_key!r}: {self.message}"


class _Free:
    """Free GPUs, CPU and memory per (cluster, node), as the plan's steps change them."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes: dict[tuple[str, str], Node] = {}
        self.free: dict[tuple[str, str], list[float]] = {}
        for cluster in snapshot.clusters:
            for node in cluster.nodes:
                key = (cluster.name, node.name)
                self.nodes[key] = node
                self.free[key] = [node.free_gpus, node.free_cpu, node.free_memory_gib]

    def add(self, key: tuple[str, str], job: Job, sign: float) -> list[float] | None:
        row = self.free.get(key)
        if row is not None:
            row[0] += sign * worker_gpus(job)
            row[1] += sign * job.cpu
            row[2] += sign * job.memory_gib
        return row


def check_plan(plan: CyclePlan, snapshot: Snapshot) -> tuple[Violation, ...]:
    """Every rule ``plan`` breaks against ``snapshot`` (see the module docstring)."""
    out: list[Violation] = []
    running = {r.job.key: r for r in snapshot.running}
    pending = {j.key: j for j in snapshot.pending}
    free = _Free(snapshot)
    preempted: set[str] = set()
    for preempt in plan.preemptions:
        key = preempt.job_key
        if key in preempted:
            out.append(Violation(key, "preempted twice in one plan"))
        elif key not in running:
            out.append(Violation(key, "cannot be preempted: it is not running"))
        else:
            preempted.add(key)
            held = running[key]
            for name in held.nodes:
                free.add((held.cluster, name), held.job, 1.0)
    ledger = QuotaLedger(
        snapshot.policy, (r for r in snapshot.running if r.job.key not in preempted)
    )
    lending = snapshot.policy.quotas.lending
    ready = {c.name: c.ready for c in snapshot.clusters}
    started: set[str] = set()
    for start in plan.starts:
        key = start.job_key
        if key in started:
            out.append(Violation(key, "started twice in one plan"))
            continue
        job = pending.get(key)
        if job is None or key in preempted:
            out.append(Violation(key, "cannot be started: it is not pending"))
            continue
        started.add(key)
        found = _start_violations(start, job, ready, free, job_domain(snapshot.policy, job))
        out += (Violation(key, message) for message in found)
        if found:
            continue
        over = ledger.over_job_limit(job) if lending else ledger.exceeds(job, start.gpu_type)
        if over:
            out.append(Violation(key, over))
        ledger.take(job, start.gpu_type)
    out += _alone_violations(plan, snapshot, preempted)
    known = pending.keys() | running.keys()
    out += (
        Violation(h.job_key, "hold names an unknown job")
        for h in plan.holds
        if h.job_key not in known
    )
    return tuple(out)


def _start_violations(
    start: Start, job: Job, ready: dict[str, bool], free: _Free, domain: str
) -> list[str]:
    """What is wrong with starting ``job`` as ``start`` says; takes its resources from ``free``."""
    cluster, gpu_type = start.cluster, start.gpu_type
    if not ready.get(cluster, False):
        return [f"cannot start on unknown or unready cluster {cluster!r}"]
    if not job.allows(gpu_type):
        return [f"may not run on {gpu_type}"]
    if len(start.nodes) != job.workers:
        return [f"has {job.workers} worker(s) but {len(start.nodes)} node(s) given"]
    out = []
    for name in start.nodes:
        node = free.nodes.get((cluster, name))
        if node is None:
            out.append(f"no node {name!r} in cluster {cluster!r}")
        elif node.gpu_type != gpu_type:
            out.append(f"node {name} has {node.gpu_type}, plan says {gpu_type}")
        elif not node.schedulable:
            out.append(f"node {name} is not schedulable")
        elif node.domain != domain:
            out.append(f"node {name} is in domain {node.domain!r}, the job in {domain!r}")
        elif job.gpu_memory_gib > node.gpu_memory_gib + _EPS:
            out.append(f"node {name} GPUs have too little memory")
    if out:
        return out
    over: set[str] = set()
    for name in start.nodes:  # worker by worker: a node named twice is checked cumulatively
        row = free.add((cluster, name), job, -1.0)
        assert row is not None
        if min(row) < -_EPS and name not in over:
            over.add(name)
            gpus, cpu, memory = row
            out.append(
                f"overcommits node {name} of {cluster}: "
                f"free gpus={gpus:g}, cpu={cpu:g}, memory={memory:g}"
            )
    return out


def _alone_violations(plan: CyclePlan, snapshot: Snapshot, preempted: set[str]) -> list[Violation]:
    """Where ``plan`` breaks the rule of :mod:`cpn.core.alone`."""
    out: list[Violation] = []
    pending = {j.key: j for j in snapshot.pending}
    nodes = {(c.name, n.name): n for c in snapshot.clusters for n in c.nodes}
    free = {key: node.free_gpus for key, node in nodes.items()}
    on: dict[tuple[str, str], set[str]] = {}  # node -> the jobs on it after the plan
    alone: dict[tuple[str, str], str] = {}  # node -> the job alone on it
    for item in snapshot.running:
        for name in set(item.nodes):
            key = (item.cluster, name)
            if item.job.key in preempted:
                if key in free:
                    free[key] += worker_gpus(item.job) * item.nodes.count(name)
                continue
            on.setdefault(key, set()).add(item.job.key)
            if item.alone:
                alone[key] = item.job.key
    for start in plan.starts:
        job = pending.get(start.job_key)
        if job is None:
            continue
        must = runs_alone(job, snapshot.policy)
        if must and not start.alone:
            out.append(Violation(job.key, "the first job of its model is not started alone"))
        for name in set(start.nodes):
            key = (start.cluster, name)
            node = nodes.get(key)
            if (must or start.alone) and (
                on.get(key) or (node is not None and free[key] < node.gpus - _EPS)
            ):
                out.append(Violation(job.key, f"must run alone but node {name} is in use"))
            on.setdefault(key, set()).add(job.key)
            if must or start.alone:
                alone[key] = job.key
    started = {start.job_key for start in plan.starts}
    for key, holder in sorted(alone.items()):
        others = sorted(on.get(key, set()) - {holder})
        if others and (holder in started or started.intersection(others)):
            out.append(
                Violation(
                    holder, f"runs alone on node {key[1]} of {key[0]}, which also holds {others}"
                )
            )
    return out
