"""The operator's mirror of AIJobs, and the snapshots it hands to the core.

All methods run on the asyncio loop's thread (kopf handlers, member events
hopped onto the loop, the scheduler loop), so no locks are needed. The store
is rebuilt from the AIJobs' status after a restart: the status, not memory,
is the truth.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cpn.api import constants as k
from cpn.api.aijobread import AIJobObject, GpuUsage
from cpn.api.groupquota import bound_group, read_groupquota
from cpn.api.status import rfc3339
from cpn.core.capacity import Usage, worker_gpus
from cpn.core.delegated import Delegated, with_delegated
from cpn.core.estimator import Estimator
from cpn.core.explain import Choice, Frees
from cpn.core.fifodue import Outcome, due_times, resumed_due_s, runtime_ratio
from cpn.core.model import Cluster, Hold, Job, Running, Snapshot
from cpn.core.policy import Preemption, QueuePolicy
from cpn.core.preemption import saved_s
from predictor.runtimes import siblings

ACTIVE_PHASES = frozenset({k.PHASE_STAGING, k.PHASE_DISPATCHED, k.PHASE_RUNNING})


class Packed(Mapping[str, Any]):
    """A JSON object kept as compact UTF-8 bytes and decoded when read: an AIJob's body
    and last written status take about a fifth of the memory of the same dicts (which
    matters with 10,000 AIJobs). Each read decodes; call :func:`unpack` once for many."""

    __slots__ = ("_raw",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._raw = json.dumps(data, separators=(",", ":")).encode()

    def unpack(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self._raw)
        return data

    def __getitem__(self, key: str) -> Any:
        return self.unpack()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.unpack())

    def __len__(self) -> int:
        return len(self.unpack())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and unpack(self) == unpack(other)

    __hash__ = None  # type: ignore[assignment]


def unpack(data: Mapping[str, Any]) -> dict[str, Any]:
    """A plain dict of ``data`` (decoded once when it is :class:`Packed`)."""
    return data.unpack() if isinstance(data, Packed) else dict(data)


@dataclass(slots=True)
class Record:
    """One AIJob as the operator tracks it."""

    key: str
    namespace: str
    name: str
    uid: str
    generation: int
    body: Mapping[str, Any]
    user: str
    group: str
    job: Job | None = None
    invalid: str = ""
    unknown_queue: str = ""  # why its spec.queue is not one of the policy's ("" when it is)
    phase: str = k.PHASE_QUEUED
    attempts: int = 0  # member Jobs created (status.attempts)
    # of them, those that failed (status.failedAttempts): what retry.max_attempts and the
    # back-off count; a preemption, a suspension or a lost member ends an attempt, not this
    failed_attempts: int = 0
    fence: str = ""  # the current attempt's fencing token (cpn.core.fence)
    not_before_s: float = 0.0
    fifo_due_s: float | None = None  # its FIFO due time, stamped once (status.fifoDue)
    # stamped with it (status.fifoDueCalibrated, status.fifoBasisSeconds): cpn.core.fifodue
    fifo_calibrated_due_s: float | None = None
    fifo_basis_s: float | None = None
    cluster: str = ""
    gpu_type: str = ""
    domain: str = ""  # the policy's domain of its nodes (cpn.core.domains), "" for none
    nodes: tuple[str, ...] = ()
    alone: bool = False  # its attempt runs alone on its nodes (cpn.core.alone)
    gpu_usage: GpuUsage | None = None  # its GPUs as last read while it ran (gpuusage.py)
    member_job: str = ""
    dispatch_s: float = 0.0
    start_s: float = 0.0
    finish_s: float = 0.0
    predicted_runtime_s: float = 0.0
    transfer_s: float = 0.0
    actual_s: float = 0.0
    message: str = ""
    reason: str = ""
    failure: str = ""  # why its last attempt failed (shown while it backs off)
    hold: Hold | None = None
    eta_start_s: float | None = None
    eta_finish_s: float | None = None
    # the ETA's start range (p20, p80; None until calibrated): WaitCalibrator.state
    eta_range: tuple[float | None, float | None] = (None, None)
    position: int = 0  # 1..n among the waiting jobs of its queue after the last cycle
    frees: Frees | None = None  # the running job whose end first frees room for it
    choice: Choice | None = None  # where its last start went, and the runner-up
    refresh_by_s: float | None = None  # write its status again by then (a start shown nears)
    written: Mapping[str, Any] = field(default_factory=dict)  # last status we patched
    written_sig: tuple[Any, ...] | None = None  # what the last write was about (engine)
    written_at: float = 0.0  # time.monotonic() of the last write
    # preemptions: how many, the last one's time and reason; the running time of its
    # earlier attempts (attained service) and the compute its checkpoints kept
    preemptions: int = 0
    preempted_s: float = 0.0
    preempted_why: str = ""
    attained_s: float = 0.0
    checkpointed_s: float = 0.0
    draining: tuple[str, str] | None = None  # (cluster, Job) of a preempted attempt not gone yet
    deleting: bool = False
    observed: bool = False  # its member Job has been seen since dispatch
    # Staging (runtime/staging.py): the input idents it waits for on its member, and its
    # staging's predicted and actual seconds (0 until known)
    staging: tuple[str, ...] = ()
    staging_predicted_s: float = 0.0
    staging_actual_s: float = 0.0
    as_running: Running | None = None  # its last Running value in a snapshot (store)

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE_PHASES

    @property
    def finished(self) -> bool:
        return self.phase in k.FINISHED_PHASES


@dataclass(frozen=True, slots=True)
class Arrival:
    """What one watch event of an AIJob did to the store (:meth:`Store.put`)."""

    record: Record
    changed: bool  # new, re-created, a new generation, deleted or its deletion began or ended
    began_deleting: bool = False  # it has a deletionTimestamp it did not have
    gone: bool = False  # deleted: the store let its record go


class Store:
    """AIJob records by key, the current policy and the namespaces' labels (whose owners
    the jobs have)."""

    def __init__(self, policy: QueuePolicy, estimator: Estimator) -> None:
        self.records: dict[str, Record] = {}
        self._by_uid: dict[str, str] = {}  # uid -> key: member Job events look records up by UID
        self.policy = policy  # in force: the policy's, with the GroupQuotas' user quotas
        self.base_policy = policy  # the policy ConfigMap's
        self.group_quotas: dict[str, Mapping[str, Any]] = {}  # GroupQuotas by namespace/name
        self.namespaces: dict[str, Mapping[str, str]] = {}  # namespace -> its labels
        self.estimator = estimator
        self.gpu_types: tuple[str, ...] = ()
        self._estimator_version = estimator.knowledge_version()
        #: every waiting job is estimated again at the next change of knowledge (not only the
        #: unseen): set when the predictor learns a benchmark, which changes a whole GPU type
        self.refresh_all_due = False

    def owner_of(self, namespace: str) -> tuple[str, str]:
        """User and group of a namespace: the policy's mapping, then its labels, then its name."""
        mapped = self.policy.namespaces.get(namespace)
        if mapped:
            return mapped
        labels = self.namespaces.get(namespace, {})
        return labels.get(k.LABEL_USER, namespace), labels.get(k.LABEL_GROUP, namespace)

    def put(self, aijob: AIJobObject, *, gone: bool = False) -> Arrival | None:
        """Take one watch event's AIJob: a new record (restored from what its status says),
        or its record refreshed; ``gone`` (deleted) lets its record go. None when there is no
        record of it (deleted, and not known under its UID)."""
        record = self.records.get(aijob.key)
        if record is not None and record.uid != aijob.uid:
            record = None  # deleted and re-created under the same name
        if gone:
            if record is None:
                return None
            self.remove(aijob.key)
            return Arrival(record, changed=True, gone=True)
        before = (record.generation, record.deleting) if record is not None else None
        if record is None:
            record = _restored(aijob)
            old = self.records.get(aijob.key)
            if old is not None:
                self._by_uid.pop(old.uid, None)
            self.records[aijob.key] = record
            self._by_uid[record.uid] = aijob.key
        record.deleting = aijob.deleting
        user, group = self.owner_of(aijob.namespace)
        if record.generation != aijob.generation or (record.user, record.group) != (user, group):
            record.body = Packed(aijob.body)
            record.generation = aijob.generation
            self._take_job(record, aijob.job, aijob.invalid, user, group)
        if aijob.status:  # what it says of the fields we write (we diff against the truth)
            record.written = Packed(aijob.status)
        return Arrival(
            record,
            changed=before != (record.generation, record.deleting),
            began_deleting=record.deleting and (before is None or not before[1]),
        )

    def _take_job(
        self, record: Record, job: Job | None, invalid: str, user: str, group: str
    ) -> None:
        """The record's job (its spec read, owned by ``user`` and ``group``), or why it has none."""
        record.user, record.group = user, group
        if job is None:
            record.job = None
            record.invalid = invalid
            if not record.active and not record.finished:
                record.phase = k.PHASE_INVALID
            return
        record.invalid = ""
        if record.phase == k.PHASE_INVALID:
            record.phase = k.PHASE_QUEUED
        job = replace(job, user=user, group=group, attained_gpu_s=record.attained_s * job.gpus)
        # A finished job's predictions stay as its status showed them when it ended
        # (:func:`cpn.runtime.status.render_status`): it is not estimated again.
        record.job = job if record.finished else self.attach_estimate(job)
        record.unknown_queue = self.unknown_queue(job)

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        """A namespace's labels (None: it is gone); its records' owners follow them."""
        if labels is None:
            self.namespaces.pop(name, None)
        else:
            self.namespaces[name] = dict(labels)
        if any(key.split("/", 1)[0] == name for key in self.group_quotas):
            self.policy = with_delegated(self.base_policy, self.delegated())
        self._reown({name})

    def set_policy(self, policy: QueuePolicy) -> None:
        """A new policy in force; every record's owner follows its namespace map."""
        self.base_policy = policy
        self.policy = with_delegated(policy, self.delegated())
        self._reown({r.namespace for r in self.records.values()})

    def set_group_quota(self, key: str, body: Mapping[str, Any] | None) -> None:
        """A GroupQuota (None: it is gone); the users' quotas in force follow
        (:func:`cpn.core.delegated.with_delegated`)."""
        if body is None:
            self.group_quotas.pop(key, None)
        else:
            self.group_quotas[key] = body
        self.policy = with_delegated(self.base_policy, self.delegated())

    def delegated(self) -> list[Delegated]:
        """Every GroupQuota, read, with the group its namespace is bound to."""
        return [
            read_groupquota(body, self.bound_group(key.split("/", 1)[0]))
            for key, body in sorted(self.group_quotas.items())
        ]

    def bound_group(self, namespace: str) -> str:
        """The group ``namespace`` is bound to, "" for none
        (:func:`cpn.api.groupquota.bound_group`)."""
        return bound_group(namespace, self.base_policy, self.namespaces.get(namespace))

    def _reown(self, namespaces: set[str]) -> None:
        """Records of ``namespaces`` whose owner changed take the new one (an invalid spec
        stays invalid)."""
        for record in list(self.records.values()):
            if record.namespace not in namespaces:
                continue
            user, group = self.owner_of(record.namespace)
            if (record.user, record.group) != (user, group):
                self._take_job(record, record.job, record.invalid, user, group)

    def unknown_queue(self, job: Job | None) -> str:
        """Why ``job``'s spec.queue is none of the policy's queues ("" when it is, or empty)."""
        known = self.policy.queues
        if job is None or not job.queue or job.queue in known:
            return ""
        return (
            f"spec.queue {job.queue!r} is not a queue of the policy (its queues: "
            f"{', '.join(sorted(known))}); no level selects the job by its queue"
        )

    def recheck_queues(self) -> list[Record]:
        """After a policy change: each record's queue checked again; returns those whose
        queue the policy does not know any more (and did before)."""
        flipped = []
        for record in self.records.values():
            why = self.unknown_queue(record.job)
            if why and not record.unknown_queue and not record.finished:
                flipped.append(record)
            record.unknown_queue = why
        return flipped

    def attach_estimate(self, job: Job) -> Job:
        """The job with its predicted runtime on every GPU type the members have."""
        estimate = self.estimator.estimate(job, self.gpu_types)
        return replace(job, estimate=estimate)

    def refresh_unseen(self) -> int:
        """After the estimator's knowledge changed (the predictor retrained:
        ``Estimator.knowledge_version``), estimate again the waiting jobs whose model it had
        not seen (their conservative first estimate is what learning improves most); returns
        how many. Others keep theirs until their spec or the GPU types change, or until
        ``refresh_all_due``: then every waiting job is estimated again."""
        version = self.estimator.knowledge_version()
        if version == self._estimator_version:
            return 0
        self._estimator_version = version
        everyone, self.refresh_all_due = self.refresh_all_due, False
        count = 0
        for record in self.pending():
            job = record.job
            if job is not None and (everyone or job.estimate.unseen or job.estimate.new_model):
                record.job = self.attach_estimate(job)
                count += 1
        return count

    def learned(self, finished: Job) -> int:
        """After the estimator saw ``finished`` end: the waiting jobs whose estimate that may
        change are estimated again (those of its model the estimator called new,
        ``Estimate.new_model``, and its siblings, :func:`predictor.runtimes.siblings`);
        returns how many."""
        count = 0
        for record in self.pending():
            job = record.job
            if job is None:
                continue
            if (finished.model and job.model == finished.model and job.estimate.new_model) or (
                siblings(job, finished)
            ):
                record.job = self.attach_estimate(job)
                count += 1
        return count

    def set_gpu_types(self, types: Iterable[str]) -> None:
        """GPU types present in the members; re-estimate when new ones appear."""
        new = tuple(sorted(set(types)))
        if new == self.gpu_types:
            return
        self.gpu_types = new
        for record in self.records.values():
            if record.job is not None and not record.finished:
                record.job = self.attach_estimate(record.job)

    def remove(self, key: str) -> Record | None:
        record = self.records.pop(key, None)
        if record is not None:
            self._by_uid.pop(record.uid, None)
        return record

    def by_uid(self, uid: str) -> Record | None:
        key = self._by_uid.get(uid)
        return self.records.get(key) if key is not None else None

    def pending(self) -> list[Record]:
        return [
            r
            for r in self.records.values()
            if r.phase in {k.PHASE_QUEUED, k.PHASE_SUSPENDED}
            and r.job is not None
            and not r.deleting
        ]

    def active(self) -> list[Record]:
        return [r for r in self.records.values() if r.active]

    def usage_by_node(self) -> dict[tuple[str, str], Usage]:
        """Resources cpn's own dispatched and running jobs hold, per (cluster, node)."""
        usage: dict[tuple[str, str], Usage] = {}
        for record in self.active():
            job = record.job
            if job is None:
                continue
            for node in record.nodes:
                u = usage.setdefault((record.cluster, node), Usage())
                u.gpus += worker_gpus(job)
                u.cpu += job.cpu
                u.memory_gib += job.memory_gib
        return usage

    def snapshot(
        self,
        now_s: float,
        clusters: Iterable[Cluster],
        bandwidth: Mapping[str, Mapping[str, float]],
    ) -> Snapshot:
        """The frozen input of one cycle."""
        self.refresh_unseen()
        pending = []
        for record in self.pending():
            if record.draining:
                continue  # one member Job at a time: the next once the preempted one is gone
            pending.append(_synced(record))
        running = []
        for record in self.active():
            if record.job is None or not record.cluster:
                continue
            _synced(record)
            began = record.start_s or record.dispatch_s or now_s
            end = began + record.transfer_s + record.predicted_runtime_s
            item = record.as_running  # most running jobs are as they were last cycle
            if (
                item is None
                or item.job is not record.job
                or item.start_s != began
                or item.predicted_end_s != end
                or (item.cluster, item.gpu_type, item.nodes, item.alone)
                != (record.cluster, record.gpu_type, record.nodes, record.alone)
            ):
                item = Running(
                    job=record.job,
                    cluster=record.cluster,
                    gpu_type=record.gpu_type,
                    nodes=record.nodes,
                    start_s=began,
                    predicted_end_s=end,
                    alone=record.alone,
                )
                record.as_running = item
            running.append(item)
        snapshot = Snapshot(
            now_s=now_s,
            policy=self.policy,
            pending=tuple(pending),
            running=tuple(running),
            clusters=tuple(clusters),
            bandwidth_gbps=bandwidth,
        )
        return self._stamp_due(snapshot)

    def _stamp_due(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with FIFO due times on each pending job that enters a cycle without
        them (:func:`cpn.core.fifodue.due_times`, calibrated by the runtime ratio of the
        jobs started so far, as the simulator stamps them); the record keeps them, its
        status shows them (``fifoDue``...) and a restart reads them back."""
        if all(job.fifo_due_s is not None for job in snapshot.pending):
            return snapshot
        ratio = runtime_ratio(self.outcomes(), snapshot.running, snapshot.now_s)
        due = due_times(snapshot, ratio)
        if not due:
            return snapshot
        for key, stamp in due.items():
            record = self.records[key]
            record.fifo_due_s, record.fifo_calibrated_due_s, record.fifo_basis_s = stamp
        pending = tuple(
            _synced(self.records[job.key]) if job.key in due else job for job in snapshot.pending
        )
        return replace(snapshot, pending=pending)

    def outcomes(self) -> Iterator[Outcome]:
        """The succeeded jobs stamped with an estimate, for the runtime ratio: the work
        each needed (:func:`work_s`) against that estimate."""
        restart_s = self.policy.preemption.restart_cost_s
        for record in self.records.values():
            basis = record.fifo_basis_s
            if record.phase == k.PHASE_SUCCEEDED and record.job is not None and basis:
                yield Outcome(record.job.gpus, basis, work_s(record, restart_s))


def work_s(record: Record, restart_cost_s: float) -> float:
    """The seconds of work a succeeded job needed, as FIFO (which never preempts) would
    have run it: what it ran in all its attempts less what its preemptions threw away
    (compute after the last checkpoint, restarts) and its last attempt's restart."""
    lost = max(0.0, record.attained_s - record.checkpointed_s)
    restart = restart_cost_s if record.preemptions else 0.0
    return max(0.0, record.actual_s - lost - restart)


def _synced(record: Record) -> Job:
    """``record.job`` with the record's attempts, back-off and FIFO due time, kept on the
    record so a running job is the same object from one cycle to the next."""
    job = record.job
    assert job is not None
    if (
        job.attempts != record.attempts
        or job.not_before_s != record.not_before_s
        or job.fifo_due_s != record.fifo_due_s
        or job.fifo_calibrated_due_s != record.fifo_calibrated_due_s
        or job.fifo_basis_s != record.fifo_basis_s
    ):
        job = record.job = replace(
            job,
            attempts=record.attempts,
            not_before_s=record.not_before_s,
            fifo_due_s=record.fifo_due_s,
            fifo_calibrated_due_s=record.fifo_calibrated_due_s,
            fifo_basis_s=record.fifo_basis_s,
        )
    return job


def _restored(aijob: AIJobObject) -> Record:
    """A new record of ``aijob``, with what its status says (after a restart), its job not
    taken yet (generation -1)."""
    saved = aijob.saved
    return Record(
        key=aijob.key,
        namespace=aijob.namespace,
        name=aijob.name,
        uid=aijob.uid,
        generation=-1,
        body={},  # taken with its job (a new generation): Store.put
        user="",
        group="",
        phase=saved.phase or k.PHASE_QUEUED,
        attempts=saved.attempts,
        failed_attempts=saved.failed_attempts,
        fence=saved.fence,
        not_before_s=saved.not_before_s,
        fifo_due_s=saved.fifo_due_s,
        fifo_calibrated_due_s=saved.fifo_calibrated_due_s,
        fifo_basis_s=saved.fifo_basis_s,
        cluster=saved.cluster,
        gpu_type=saved.gpu_type,
        domain=saved.domain,
        nodes=saved.nodes,
        alone=saved.alone,
        gpu_usage=saved.gpu_usage,
        member_job=saved.member_job,
        start_s=saved.start_s,
        finish_s=saved.finish_s,
        actual_s=saved.actual_s,
        transfer_s=saved.transfer_s,
        predicted_runtime_s=saved.predicted_runtime_s,
        dispatch_s=saved.start_s,
        preemptions=saved.preemptions,
        preempted_s=saved.preempted_s,
        preempted_why=saved.preempted_why,
        attained_s=saved.attained_s,
        checkpointed_s=saved.checkpointed_s,
    )


def preempted(record: Record, now_s: float, why: str, policy: Preemption) -> float:
    """Book a preemption of ``record`` at ``now_s``: its running time joins its attained
    service and its checkpoints keep whole intervals of its compute (a resumed attempt
    computes only after ``restart_cost_s``). Returns the seconds of work lost."""
    job = record.job
    ran = max(0.0, now_s - record.start_s) if record.phase == k.PHASE_RUNNING else 0.0
    restart = policy.restart_cost_s if record.preemptions else 0.0
    computed = max(0.0, ran - restart)
    interval = (job.checkpoint_interval_s if job else None) or policy.checkpoint_interval_s
    kept = saved_s(computed, interval) if job is not None and job.checkpoint else 0.0
    record.preemptions += 1
    record.preempted_s, record.preempted_why = now_s, why
    record.attained_s += ran
    record.checkpointed_s += kept
    record.fifo_due_s = resumed_due_s(record.fifo_due_s, ran)
    if job is not None:
        record.job = replace(
            job, attained_gpu_s=record.attained_s * job.gpus, fifo_due_s=record.fifo_due_s
        )
    return computed - kept


def preemption_status(record: Record) -> dict[str, Any]:
    """The status fields of a record's preemptions (none for a job never preempted)."""
    if not record.preemptions:
        return {}
    return {
        "preemptions": record.preemptions,
        "lastPreemption": {"time": rfc3339(record.preempted_s), "reason": record.preempted_why},
        "attainedSeconds": round(record.attained_s, 1),
        "checkpointedSeconds": round(record.checkpointed_s, 1),
    }
