"""Frozen value objects of the scheduling core.

Everything a scheduling decision needs is in a :class:`Snapshot`; everything it
decides is in a :class:`CyclePlan`. Both are plain data: the live operator and
the simulator build snapshots from different sources and execute plans in
different ways, but call the same :func:`cpn.core.cycle.plan_cycle`.

Units are in names: ``*_s`` seconds, ``*_gib`` GiB, ``*_gb`` GB (data sizes),
``*_gbps`` gigabits per second. Instants are epoch seconds (float) in the live
operator and seconds from the trace's start in the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cpn.core.policy import QueuePolicy


#: ln 2: decayed usage halves every half-life (``2^-x = exp(-x ln 2)``).
LN2 = math.log(2.0)


def frozen_map(values: Mapping[str, float] | None = None) -> Mapping[str, float]:
    """Return a read-only copy of ``values``."""
    return MappingProxyType(dict(values or {}))


class WaitReason(StrEnum):
    """Why a pending job did not start in a cycle (PascalCase, shown to users)."""

    Capacity = "Capacity"  # no cluster has room for it now
    Quota = "Quota"  # its group's or user's quota is in use
    Reservation = "Reservation"  # room exists but is held for a reserved job
    Priority = "Priority"  # jobs ahead of it took the room
    Infeasible = "Infeasible"  # no cluster could ever hold it
    NodeLoad = "NodeLoad"  # nodes with room are not ready, cordoned or above the CPU ceiling
    Waiting = "Waiting"  # placement chose to wait for a faster GPU
    Window = "Window"  # beyond the window the placement looked at
    Backoff = "Backoff"  # a failed attempt waits before retrying
    Suspended = "Suspended"
    Budget = "Budget"  # its group is past its GPU-hour budget (quotas.over_budget: hold)


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """Predicted runtime of one job on each GPU type, with its uncertainty.

    ``runtime_s`` maps a canonical GPU type to the predicted runtime (median);
    ``high_s`` to a high quantile (absent types fall back to ``runtime_s``).
    ``unseen`` flags a conservative estimate (a model the predictor never saw, or no
    history to go by). ``new_model`` says the estimator has neither a benchmark nor a
    finished job of the job's model (never set for a job that names no model): the
    first jobs of a model, which ``placement.first_of_model_alone`` runs alone.
    ``siblings`` and ``sibling_s`` say which jobs are its near-replicas.
    """

    runtime_s: Mapping[str, float] = field(default_factory=frozen_map)
    high_s: Mapping[str, float] = field(default_factory=frozen_map)
    unseen: bool = False
    new_model: bool = False
    source: str = ""
    # Jobs whose estimates carry the same non-empty ``siblings`` and were submitted within
    # ``sibling_s`` of each other are near-replicas (the estimator's rule; the predictor's
    # :func:`predictor.runtimes.siblings`): cpn.core.siblings reads the running ones.
    siblings: str = ""
    sibling_s: float = 0.0

    def on(self, gpu_type: str) -> float | None:
        """Predicted runtime on ``gpu_type``, or None when unknown."""
        return self.runtime_s.get(gpu_type)

    def best_s(self) -> float:
        """Shortest predicted runtime over all GPU types (inf when none)."""
        return min(self.runtime_s.values(), default=float("inf"))


@dataclass(frozen=True, slots=True, kw_only=True)
class DataInput:
    """A dataset or model a job reads. ``name`` and ``version`` identify it in a cluster's
    data cache (:attr:`ident`); ``location`` is the member cluster holding it now (None:
    unknown, so cpn moves nothing for it); ``size_gb`` 0 when unknown."""

    name: str
    version: str = ""
    size_gb: float = 0.0
    location: str | None = None

    @property
    def ident(self) -> str:
        """``name@version``, or the name alone: the key of the input in a data cache."""
        return f"{self.name}@{self.version}" if self.version else self.name


@dataclass(frozen=True, slots=True, kw_only=True)
class Cached:
    """One input held on a member cluster: complete from ``ready_s`` (later while it is
    still being staged), last read by a job started at ``last_used_s``."""

    size_gb: float
    last_used_s: float
    ready_s: float = 0.0


#: A cluster's data cache: input ident -> what is held.
ClusterCache = Mapping[str, Cached]


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A pending or running AI training job, as the core sees it.

    ``key`` is unique ("namespace/name" live, the trace's job_id offline).
    Resources are per worker; a job runs ``workers`` workers inside one cluster.
    ``gpu_share`` below 1 asks for a fraction of one GPU (HAMi sharing).
    """

    key: str
    submit_s: float
    gpus_per_worker: int = 1
    workers: int = 1
    gpu_share: float = 1.0
    gpu_memory_gib: float = 0.0
    cpu: float = 0.0
    memory_gib: float = 0.0
    gpu_types: frozenset[str] = frozenset()  # allowed canonical types; empty = any
    user: str = ""
    group: str = ""
    queue: str = ""
    priority: int = 0
    model: str = ""
    features: Mapping[str, float] = field(default_factory=frozen_map)
    data_cluster: str | None = None
    data_gb: float = 0.0
    image_gb: float = 0.0
    inputs: tuple[DataInput, ...] = ()  # named datasets and models (spec.inputs)
    user_estimate_s: float | None = None
    estimate: Estimate = field(default_factory=Estimate)
    attained_gpu_s: float = 0.0  # service received by earlier attempts (LAS)
    attempts: int = 0
    not_before_s: float = 0.0  # retry backoff: not eligible before this instant
    suspended: bool = False
    checkpoint: bool = False  # may be preempted and resume from a checkpoint
    checkpoint_interval_s: float | None = None  # None: the policy's preemption default
    # The instant strict FIFO would have started it by, estimated when first seen
    # (cpn.core.fifodue); None until then. Past it the job drains (reservation.drain_fifo).
    fifo_due_s: float | None = None
    # Stamped with it: the same backlog scaled by the runtime ratio of the jobs started so
    # far, and the estimated runtime the job added to the backlog behind it (its basis for
    # that ratio once it runs); see cpn.core.fifodue.
    fifo_calibrated_due_s: float | None = None
    fifo_basis_s: float | None = None

    @property
    def gpus(self) -> float:
        """GPUs in total (fractional when shared)."""
        if self.gpus_per_worker == 0:
            return 0.0
        share = self.gpu_share if self.gpu_share < 1 else float(self.gpus_per_worker)
        return share * self.workers

    def allows(self, gpu_type: str) -> bool:
        """True if the job may run on ``gpu_type``."""
        return not self.gpu_types or gpu_type in self.gpu_types


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """One node of a member cluster with its capacity and what is free now.

    ``free_*`` come from the API's own accounting (requests of bound pods),
    never from metrics. ``cpu_util`` (0..1) is the measured utilisation, or
    None when no fresh metric exists. ``domain`` is the policy's logical domain the
    node is in (:mod:`cpn.core.domains`), "" for none.
    """

    cluster: str
    name: str
    gpu_type: str
    gpus: int
    free_gpus: float
    gpu_memory_gib: float = 0.0  # per GPU
    cpu: float = 0.0
    free_cpu: float = 0.0
    memory_gib: float = 0.0
    free_memory_gib: float = 0.0
    cpu_util: float | None = None
    schedulable: bool = True
    domain: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """A member cluster: its nodes, readiness and location."""

    name: str
    nodes: tuple[Node, ...] = ()
    ready: bool = True
    location: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Running:
    """A job that holds resources now: where, since when, until when (predicted).

    ``alone``: it was started alone on its nodes (the first job of its model,
    :mod:`cpn.core.alone`), so no other job is placed there while it runs.
    """

    job: Job
    cluster: str
    gpu_type: str
    nodes: tuple[str, ...]  # one node name per worker
    start_s: float
    predicted_end_s: float
    alone: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """What the cycle needs of past usage: frozen, carried by the snapshot.

    ``groups`` and ``users`` (key ``group/user``) hold decayed GPU-seconds of finished
    attempts in the frame of ``origin_s`` (multiply by ``2^(-(t - origin_s)/H)`` for the
    value at ``t``); ``period_gpu_s`` the GPU-seconds each group's finished attempts used
    in the budget period that starts at ``period_start_s``.
    """

    half_life_s: float
    origin_s: float = 0.0
    groups: Mapping[str, float] = field(default_factory=frozen_map)
    users: Mapping[str, float] = field(default_factory=frozen_map)
    period: str = "month"
    period_start_s: float = -math.inf
    period_gpu_s: Mapping[str, float] = field(default_factory=frozen_map)

    def decayed_gpu_s(self, key: str, at_s: float, *, user: bool = False) -> float:
        """A group's (or user's) decayed GPU-seconds of finished attempts at ``at_s``."""
        value = (self.users if user else self.groups).get(key, 0.0)
        return float(value * math.exp(-(at_s - self.origin_s) * LN2 / self.half_life_s))


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Everything one scheduling cycle reads. Frozen; carries its own clock."""

    now_s: float
    policy: QueuePolicy
    pending: tuple[Job, ...] = ()
    running: tuple[Running, ...] = ()
    clusters: tuple[Cluster, ...] = ()
    bandwidth_gbps: Mapping[str, Mapping[str, float]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # cluster -> its data cache (cpn.core.datacache); a cluster absent holds nothing
    data_cache: Mapping[str, ClusterCache] = field(default_factory=lambda: MappingProxyType({}))
    # past usage for fair share and budgets (cpn.core.fairshare); None: none known
    usage: Usage | None = None

    def link_gbps(self, src: str, dst: str) -> float | None:
        """Bandwidth between two clusters (symmetric); None when no link."""
        if src == dst:
            return float("inf")
        value = self.bandwidth_gbps.get(src, {}).get(dst)
        if value is None:
            value = self.bandwidth_gbps.get(dst, {}).get(src)
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Start:
    """Start ``job_key`` now on ``cluster``, one worker per entry of ``nodes``.

    ``alone``: on nodes no other job uses, and none is placed there while it runs
    (the first job of its model, :mod:`cpn.core.alone`).
    """

    job_key: str
    cluster: str
    gpu_type: str
    nodes: tuple[str, ...]
    predicted_runtime_s: float
    transfer_s: float = 0.0
    score: float = 0.0
    alone: bool = False
    # idents of the inputs this start moves to ``cluster`` (not there, not being staged);
    # out of the repr, which pins plans (tests/core/plan_digests.json) of jobs without any
    staged: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Preempt:
    """Stop running job ``job_key`` and requeue it, to make room for ``for_key``."""

    job_key: str
    for_key: str
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Hold:
    """A pending job that does not start this cycle, and why."""

    job_key: str
    reason: WaitReason
    message: str
    position: int = 0  # 1-based position in its queue
    score: float = 0.0
    level: str = ""
    reserved_start_s: float | None = None  # when a reservation holds room for it
    reserved_end_s: float | None = None  # when it would finish in that room


@dataclass(frozen=True, slots=True, kw_only=True)
class SolveStats:
    """How the placement was solved: for logs, metrics and replay checks.

    Holds no wall-clock figures (the core reads no clock); the shell times the cycle.
    """

    method: str = "none"  # milp | greedy | none
    status: str = "NotSolved"
    objective: float = 0.0
    window: int = 0
    fallback: str = ""  # why the greedy fallback ran, if it did


@dataclass(frozen=True, slots=True, kw_only=True)
class CyclePlan:
    """What one cycle decided. Executed by the live applier or the simulator."""

    starts: tuple[Start, ...] = ()
    preemptions: tuple[Preempt, ...] = ()
    holds: tuple[Hold, ...] = ()
    stats: SolveStats = field(default_factory=SolveStats)
