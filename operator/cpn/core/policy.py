"""The admins' queueing policy as frozen values.

Parsed from the policy YAML document (the ConfigMap's ``policy.yaml`` key, and
the simulator's ``--policy FILE.yaml``) by :func:`cpn.api.policy.parse_policy`.
Every field has a default, so an empty document is a valid policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from cpn.core.fence import AVAILABILITY


def _empty() -> Mapping[Any, Any]:
    # A factory, not a shared default: dataclasses refuse an unhashable
    # default such as a mappingproxy ("mutable default").
    return MappingProxyType({})


#: The default priority formula of the ``cpn`` ordering. Higher scores go first.
#: Smallest predicted GPU-time (GPUs x runtime) first, with aging: one second of
#: waiting is worth ``aging.rate`` GPU-seconds, so no job waits forever. On Gavel's
#: Philly traces GPU-time beat plain runtime (see the README's table).
#: The queue of a job that names none, and a name every policy knows.
DEFAULT_QUEUE = "default"

DEFAULT_FORMULA = "1000000 * priority + aging * wait_s - gpu_time_s"


@dataclass(frozen=True, slots=True, kw_only=True)
class Level:
    """One level of the multi-level queue and which jobs it takes.

    Levels are tried in the order listed: the first whose rules all match a job
    takes it (an empty rule matches anything). Jobs of an earlier level always
    go before jobs of a later one.
    """

    name: str
    groups: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    queues: frozenset[str] = frozenset()
    min_priority: int | None = None
    max_gpus: float | None = None
    min_gpus: float | None = None
    formula: str | None = None  # overrides the policy's formula in this level


@dataclass(frozen=True, slots=True, kw_only=True)
class Limit:
    """A quota: GPUs in total and/or per GPU type, and concurrent jobs (None = unlimited).

    ``jobs`` counts the jobs that hold GPUs: staging, dispatched and running ones.
    """

    gpus: float | None = None
    per_type: Mapping[str, float] = field(default_factory=_empty)
    jobs: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupQuota:
    """A group's quota, and its users' quotas inside it (the group's is the ceiling).

    ``max_priority`` bounds the priority its jobs count with (their ``spec.priority`` is
    written by users): above it, a job ranks and matches levels as if it said this value.
    None falls back to :attr:`Quotas.max_priority`.
    """

    limit: Limit = field(default_factory=Limit)
    users: Mapping[str, Limit] = field(default_factory=lambda: MappingProxyType({}))
    default_user: Limit | None = None
    max_priority: int | None = None
    # domain -> the group's limit for its jobs in that domain (inside ``limit``)
    domains: Mapping[str, Limit] = field(default_factory=lambda: MappingProxyType({}))
    # GPU-hours the group may use per Quotas.budget_period (None = no budget;
    # cpn.core.fairshare)
    gpu_hours: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Quotas:
    """Hierarchical quotas. With ``lending``, a group may exceed its quota while
    GPUs would otherwise idle, but never takes room a job within quota could use
    in the same cycle."""

    groups: Mapping[str, GroupQuota] = field(default_factory=lambda: MappingProxyType({}))
    lending: bool = False
    # for every group without its own; 0 by default, so a job asking more than 0 counts
    # with 0 unless the policy allows it (None = unbounded, written `max_priority: null`)
    max_priority: int | None = 0
    # GPU-hour budgets (GroupQuota.gpu_hours): the UTC calendar period they are per
    # (day | week | month), and what a group past its budget gets: ``lowest`` (its jobs rank
    # below every level) or ``hold`` (they wait, reason Budget). See cpn.core.fairshare.
    budget_period: str = "month"
    over_budget: str = "lowest"


@dataclass(frozen=True, slots=True, kw_only=True)
class Aging:
    """Aging: ``rate`` is what one second of waiting is worth in the formula's
    ``aging`` term; ``max_wait_s`` is the wait after which a job gets a
    reservation whatever its size (the starvation guard).

    ``rate`` is 0 by default: waits are bounded by draining (``Reservation.drain_fifo``),
    which has a stated bound, and a wait term in the formula would rank a long job that
    waited ahead of short ones that could have run before it and still let it start in
    time (GPU-seconds of runtime against seconds of wait: no rate suits every workload).

    ``max_wait_fifo_share`` scales the guard to the workload: a job reserves for its wait
    once it waited ``max_wait_s`` or this share of FIFO's longest wait
    (:attr:`cpn.core.reservations.Reservations.fifo_limit_s`), whichever is longer. Where
    FIFO's waits run to hundreds of hours a fixed ``max_wait_s`` reserves for nearly every
    waiting job, and those reservations keep rank preemption
    (``preemption.around_reservations``) from running; 0 keeps ``max_wait_s`` alone."""

    rate: float = 0.0
    max_wait_s: float | None = 6 * 3600.0
    max_wait_fifo_share: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class FairSharePolicy:
    """Fair share over time (:mod:`cpn.core.fairshare`): past usage decays with
    ``half_life_h``; the formula reads the factor as ``fair_share`` (and
    ``group_fair_share``, ``user_fair_share``). A ``weight`` above 0 adds
    ``weight * fair_share`` to every formula's score (0: only where a formula names it)."""

    half_life_h: float = 168.0
    weight: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Reservation:
    """Reservations for big jobs, with backfill around them, and draining for old ones.

    A blocked job asking at least ``min_gpus`` GPUs, or waiting longer than
    ``aging.max_wait_s``, gets a reservation at the earliest time and place it
    fits (from running jobs' predicted ends). Other jobs start only where they
    do not delay it (backfill), or not at all when ``backfill`` is off.

    With ``claim_big`` a reserved job of at least ``min_gpus`` GPUs keeps its room
    when it frees: higher-ranked jobs may not take it in that cycle. A job that has
    waited ``drain_after_s``, and ``drain_ratio`` times the mean wait of the pending
    jobs, drains: it holds a reservation before every other
    holder (big draining jobs first, then the oldest) and claims its room whether or
    not it fits now, so no job
    that would still run at its reserved start is placed there; it starts once
    the jobs running there end (the starvation bound, see docs/policy.md).

    With ``drain_fifo`` a job also drains once the clock passes its FIFO due time
    (``Job.fifo_due_s``, :mod:`cpn.core.fifodue`): when strict FIFO would have started
    it by, estimated from the backlog ahead of it when it was first seen; draining jobs
    then reserve in due order, whatever their size. With ``fifo_share`` above 0 a job
    with a due time drains instead once it has waited ``fifo_share`` times the longest
    FIFO wait budget among the jobs waiting with it (due time less submit time less
    what the job ran: :func:`cpn.core.fifodue.fifo_budget_s`): FIFO's worst wait is the
    bound, not each job's own FIFO wait, so short jobs may pass a long one for longer.
    A job needing fewer than ``calibrate_below_gpus`` GPUs measures both its wait and that
    longest budget in calibrated budgets (``Job.fifo_calibrated_due_s``: the backlog
    scaled by how much longer than estimated started jobs have run); 0 turns this off.

    With ``head`` (off by default; figures in docs/policy.md) the highest-ranked job of
    each level that fits nowhere at the start of the cycle reserves too, whatever its size
    or wait (EASY backfilling's rule): jobs ranked below it start only where they do not
    delay it, so a stream of small jobs cannot keep a job that needs several GPUs on one
    node from ever seeing them free.
    """

    enabled: bool = True
    min_gpus: float = 16.0
    max_reservations: int = 8
    backfill: bool = True
    claim_big: bool = True
    drain_after_s: float | None = 300 * 3600.0
    drain_ratio: float = 3.0
    head: bool = False
    drain_fifo: bool = True
    fifo_share: float = 0.9
    calibrate_below_gpus: float = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """How the head of the queue is placed.

    ``method`` is ``milp`` (PuLP + HiGHS, greedy fallback) or ``greedy``. The
    objective weights the three parts of completion time. With
    ``wait_for_faster`` a job may stay queued for a faster GPU type that frees
    soon, when that finishes it sooner; without it placement is work-conserving
    (a job that fits somewhere starts). ``window`` bounds how
    many jobs the MILP sees; ``affinity`` pins member Jobs to the chosen node
    (``node``) or only to its GPU type (``gpu-type``). With ``first_of_model_alone``
    a job of a model the estimator has never seen runs alone on its nodes
    (:mod:`cpn.core.alone`).
    """

    method: str = "milp"
    wait_for_faster: bool = False
    wait_weight: float = 1.0
    transfer_weight: float = 1.0
    runtime_weight: float = 1.0
    time_limit_s: float = 2.0
    window: int = 48
    affinity: str = "node"
    first_of_model_alone: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemption:
    """Optional preemption of running jobs that checkpoint, priced honestly.

    Only a job that declares a checkpoint (``Job.checkpoint``) is ever preempted. Each
    preemption costs its victim ``restart_cost_s`` (start-up and reload) plus the work
    done since its last checkpoint; a job checkpoints every ``checkpoint_interval_s``
    of compute unless it says otherwise (``Job.checkpoint_interval_s``). A preemption
    happens only when the waiting job ranks above the victim by more than the GPU-seconds
    it wastes (``min_priority_gap`` on top, in score units), and never to a job that ran
    less than ``min_run_s`` in its current attempt, and (under the ``cpn`` ordering, which
    ranks by predicted runtime) among jobs of one level and priority only for a job whose expected
    remaining runtime is at most ``1 / shorter_by`` of the victim's (the doubling
    thresholds of discretised LAS): two long jobs whose estimates keep growing as they
    outlive them would otherwise swap places over and over, each swap wasting a restart.

    With ``for_overdue`` the head of the overdue queue, once its wait budget is spent,
    may stop checkpointing jobs in the group it reserved whatever their ranks
    (:func:`cpn.core.preemption.choose_preemptions`; bound and figures in docs/policy.md).
    With ``protect_waited_share`` a job that waited that share of FIFO's longest wait
    (:attr:`cpn.core.reservations.Reservations.fifo_limit_s`) before its current attempt
    is never stopped for rank, only by that head: requeued with the rest of its wait
    limit, it would likely pass it. With ``around_reservations`` a job may be stopped for
    rank in a group where other jobs hold reservations, as long as none of them is due
    now: a reservation due later keeps its nodes (they are never victims), so the room
    freed beside them stays with the job it was freed for, and a victim that would
    reserve once requeued only for its wait (``aging.max_wait_s``, not its size or a
    drain) may be stopped too; without it, any reservation in the group forbids
    preemption there and such victims are never stopped.

    With ``no_bigger_victims`` a job is stopped for rank only for a job needing at least as
    many GPUs, between jobs of one level and priority (a higher level or priority takes the
    room it needs): a bigger victim leaves the rest of its room to others, and once requeued
    needs a hole bigger than the one it was stopped for, which jobs of the waiting job's
    size keep filling (the overdue head, above, is not bound by it). Both are on by default
    since 5 Dec 2026 (docs/policy.md has the figures); the ``las`` preset turns them off.

    With ``claim`` (opt-in) a reservation does not wait for checkpointing jobs that started
    on its room since its holder could reserve, are no wider than the holder and would not
    reserve once requeued: it counts their room free from now and stops them when it
    starts; and such a job may start on reserved room whatever its end if the reservation
    starts at least one checkpoint interval later (a checkpoint kept). Room a reservation
    holds idle is used, and given back when due, at the price of a preemption.

    With ``gittins`` (opt-in) jobs that checkpoint are ranked by the inverse Gittins index
    of their runtime law at their attained service
    (:func:`cpn.core.runtime_law.gittins_remaining_s`) instead of its conditional median.
    """

    enabled: bool = True
    min_priority_gap: int = 1
    restart_cost_s: float = 60.0
    checkpoint_interval_s: float = 1800.0
    min_run_s: float = 600.0
    shorter_by: float = 2.0
    for_overdue: bool = True
    protect_waited_share: float | None = None
    around_reservations: bool = True
    no_bigger_victims: bool = True
    claim: bool = False
    gittins: bool = False

    @property
    def ranks_by_gittins(self) -> bool:
        """Jobs that checkpoint are ranked by their Gittins index (they can be stopped)."""
        return self.enabled and self.gittins


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """Failed attempts are retried with exponential backoff up to ``max_attempts``. An
    attempt whose workers are not all running ``start_timeout_s`` after its dispatch is
    removed and counts as a failed attempt (:mod:`cpn.core.gang`). ``member_lost`` says
    what becomes of jobs on a member not ready for ``member_timeout_s``, counted from when
    it turned not ready (:func:`cpn.core.fence.holds_for_member`); ``None`` leaves that
    timeout to the operator's default (:func:`cpn.core.fence.member_timeout`)."""

    max_attempts: int = 3
    backoff_s: float = 30.0
    start_timeout_s: float = 300.0
    member_lost: str = AVAILABILITY
    member_timeout_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Domain:
    """A logical domain of nodes (:mod:`cpn.core.domains`), and the jobs bound to it.

    A node is in the domain when its cluster is one of ``clusters`` (any when empty) and it
    carries every label of ``labels``. The ``default`` domain has no selector: it holds
    every node no other domain selects, and every job bound to no domain. A job is bound
    through its queue (``queues``) or, when its queue is bound to none, its group
    (``groups``), and is placed only on the nodes of its domain.
    """

    name: str
    clusters: frozenset[str] = frozenset()
    labels: Mapping[str, str] = field(default_factory=_empty)
    queues: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    default: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DataPolicy:
    """The data jobs read (:mod:`cpn.core.transfer`, :mod:`cpn.core.datacache`).

    With ``locality`` (the default) placement counts the time to move a job's data to
    each cluster, knowing what each cluster's cache holds; without it placement is
    locality-blind (the transfer still counts in when the job will end, not in where it
    goes): the baseline the simulator measures locality against. ``cache_gb`` is what
    each member's cache may hold (GB), ``default_cache_gb`` that of a member not listed
    (None = unlimited); beyond it the least recently used inputs no job reads are evicted.

    Staging (:mod:`cpn.runtime.staging`): an input a start moves is copied by a staging Job
    on the chosen node, running ``staging_image`` (``python -m cpn_workloads.stage``) with
    ``copy_tool`` into ``copy_dest``/<name@version>; a failed staging is retried after
    ``staging_backoff_s`` (doubling), at most ``staging_attempts`` times in all; one runs at
    most ``staging_timeout_s`` (its Job's ``activeDeadlineSeconds``); with
    ``prepull`` the job's images are pulled onto that node meanwhile. ``staging_scope``
    ``node`` (the default) pins each staging Job to the job's node and copies onto a
    ``hostPath``; ``cluster`` runs it anywhere in the member, copying into the
    PersistentVolumeClaim ``shared_claim`` (in the member's job namespace), which the
    training Job then mounts at ``copy_dest`` too.
    """

    locality: bool = True
    cache_gb: Mapping[str, float] = field(default_factory=_empty)
    default_cache_gb: float | None = None
    copy_tool: str = "copy"
    copy_dest: str = "/var/lib/cpn/data"
    staging_image: str = "cpn-workloads:0.1.0"
    staging_attempts: int = 3
    staging_backoff_s: float = 10.0
    staging_timeout_s: float = 21600.0
    prepull: bool = True
    staging_scope: str = "node"
    shared_claim: str = ""


#: where a staging Job runs and copies to (DataPolicy.staging_scope)
STAGING_SCOPES = ("node", "cluster")

#: the copy programs a staging Job may run (workloads/cpn_workloads/stage.py)
COPY_TOOLS = ("copy", "rsync", "rclone")


#: the models the benchmark workload measures (workloads/: ``python -m cpn_workloads bench``)
BENCHMARK_MODELS = ("resnet50", "yolov8m", "llama3", "bert-large")


@dataclass(frozen=True, slots=True, kw_only=True)
class Benchmarks:
    """GPU benchmarks run by cpn (:mod:`cpn.core.benchmarks`). When ``enabled``, a member
    node whose GPU type has no result newer than ``max_age_days`` gets a GPUBenchmark: a
    Job pinned to it, running ``image`` (``python -m cpn_workloads bench``) over
    ``models`` for ``budget_s`` seconds each, whose result teaches the predictor."""

    enabled: bool = False
    max_age_days: float = 30.0
    models: tuple[str, ...] = ("resnet50", "yolov8m", "llama3")
    budget_s: float = 300.0
    image: str = "cpn-workloads:0.1.0"


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuePolicy:
    """The whole policy. ``ordering`` names a registered ordering (see
    :mod:`cpn.core.queue`): ``cpn`` (the formula), ``fifo``, ``sjf``,
    ``oracle``, ``las`` or ``gavel``."""

    name: str = "default"
    version: str = ""  # ConfigMap resourceVersion or file hash, for traceability
    ordering: str = "cpn"
    formula: str = DEFAULT_FORMULA
    levels: tuple[Level, ...] = ()
    user_levels: Mapping[str, float] = field(default_factory=_empty)
    group_levels: Mapping[str, float] = field(default_factory=_empty)
    aging: Aging = field(default_factory=Aging)
    quotas: Quotas = field(default_factory=Quotas)
    reservation: Reservation = field(default_factory=Reservation)
    node_cpu_ceiling: float | None = 0.7
    running_siblings: bool = False
    placement: Placement = field(default_factory=Placement)
    preemption: Preemption = field(default_factory=Preemption)
    retry: Retry = field(default_factory=Retry)
    benchmarks: Benchmarks = field(default_factory=Benchmarks)
    data: DataPolicy = field(default_factory=DataPolicy)
    namespaces: Mapping[str, tuple[str, str]] = field(  # ns -> (user, group)
        default_factory=lambda: MappingProxyType({})
    )
    domains: tuple[Domain, ...] = ()  # none: every job may use every node (no domains)
    fair_share: FairSharePolicy = field(default_factory=FairSharePolicy)

    @property
    def queues(self) -> frozenset[str]:
        """The queue names the policy knows: ``default``, every level's and every domain's
        ``queues``."""
        named = (*(level.queues for level in self.levels), *(d.queues for d in self.domains))
        return frozenset({DEFAULT_QUEUE}).union(*named)
