"""The operator's engine: ingest events, run cycles, dispatch, follow, report.

Everything here runs on the asyncio loop's thread, except the pure
``plan_cycle`` (in a worker thread, off kopf's loop) and blocking API calls
(in a thread pool). Member informers call back from their own threads and hop
onto the loop with ``call_soon_threadsafe``.

Order of a dispatch, chosen so that a crash at any point loses and duplicates
nothing: (1) the record is marked Dispatched in memory (the *assume*), (2) the
member Job is created under a name derived from the AIJob's UID and attempt
(AlreadyExists counts as success), (3) the AIJob's status is patched. After a
restart the member Jobs' origin labels are matched back to their AIJobs before
the first cycle runs, so a Job created just before a crash is adopted, not
created twice; a record that reads Dispatched but whose Job no member has (the
crash came between a status write and the create) goes back to the queue.

Creates are pipelined: a cycle does (1) and launches (2) and (3) as tasks, and
the next cycle plans while they are in flight (their records already hold
their GPUs). A record's status is not written while its create is in flight,
so (3) never precedes (2).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Container, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException

from cpn.adapters import lastgood
from cpn.adapters.events import post_event
from cpn.adapters.kube import Informer, client_from_kubeconfig, error_line, refused
from cpn.adapters.lease import leading
from cpn.adapters.members import Member, MemberSpec
from cpn.adapters.prometheus import MetricsSource
from cpn.api import constants as k
from cpn.api.aijob import parse_time
from cpn.api.jobs import finished_at, render_job, workers_running
from cpn.api.kubeconfig import kubeconfig_problems
from cpn.api.policy import CONFIGMAP_KEY, parse_policy, parse_policy_configmap
from cpn.api.status import (
    IMMINENT,
    condition,
    human_duration,
    merge_patch,
    queue_positions,
    rfc3339,
)
from cpn.config import OperatorConfig
from cpn.core.cycle import plan_cycle
from cpn.core.errors import PolicyError
from cpn.core.estimator import Estimator
from cpn.core.eta import project
from cpn.core.eta_calibration import WaitCalibrator
from cpn.core.explain import Choice, Frees, choices, first_to_free
from cpn.core.fence import holds_for_member, job_result, judge_report, next_fence
from cpn.core.gang import Gang, judge_start
from cpn.core.health import Health, Probe, Probes, health
from cpn.core.model import Cluster, CyclePlan, Snapshot, Start, WaitReason
from cpn.core.policy import QueuePolicy
from cpn.runtime.metrics import Observer
from cpn.runtime.status import queue_of, render_status
from cpn.runtime.store import (
    Packed,
    Record,
    Store,
    preempted,
    unpack,
)
from cpn.runtime.writes import Pace, WriteQueue

log = logging.getLogger(__name__)

#: Threads for AIJob status patches and Events.
WRITE_WORKERS = 8
#: This many member Job creates in flight are a burst: until a second after it, hub writes
#: run at a tenth of their pace (submissions and dispatches first; statuses merge meanwhile).
BURST_STARTS = 10
BURST_YIELD_S = 1.0
#: An AIJob's position, score and ETA alone are rewritten at most this often...
VOLATILE_WRITE_S = 30.0
#: ...and less often with a long queue: about this many such writes per second in all.
VOLATILE_WRITES_PER_S = 20.0

EventPoster = Callable[[Mapping[str, Any], str, str, bool], None]


class Runtime:
    """The live scheduler: one per operator process."""

    def __init__(
        self,
        config: OperatorConfig,
        hub: client.ApiClient,
        estimator: Estimator,
        *,
        clock_fn: Callable[[], float] = time.time,
        post_event: EventPoster | None = None,
    ) -> None:
        self.config = config
        self.hub = hub
        self.custom = client.CustomObjectsApi(hub)
        self.core = client.CoreV1Api(hub)
        self.store = Store(QueuePolicy(), estimator)
        self.estimator = estimator
        self.members: dict[str, Member] = {}
        self.member_status: dict[str, tuple[bool, str]] = {}
        self.namespaces: dict[str, Mapping[str, str]] = {}
        self.clock = clock_fn
        self.post_event: EventPoster = post_event if post_event is not None else self._post_event
        self.pool = ThreadPoolExecutor(
            max_workers=config.dispatch_workers, thread_name_prefix="cpn-api"
        )
        # Status patches and Events go through their own threads, so that a burst of them
        # never queues ahead of member Job creation.
        self.write_pool = ThreadPoolExecutor(max_workers=WRITE_WORKERS, thread_name_prefix="cpn-w")
        self.hub_writes = Pace(config.hub_write_qps, config.hub_write_burst)
        self.writes = WriteQueue()
        self._write_workers: list[asyncio.Task[None]] = []
        _widen_pool(hub, config.dispatch_workers + WRITE_WORKERS)
        self._writer: asyncio.Task[None] | None = None
        self._views: dict[str, Cluster] = {}  # each member as the last cycle saw it
        self._inflight: dict[str, asyncio.Task[None]] = {}  # member Job creates, by AIJob key
        self._write_again = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self._kick = asyncio.Event()
        self.policy_loaded = asyncio.Event()  # a policy from the cluster is in force
        self.policy_settled = asyncio.Event()  # ... or the defaults, and it is known why
        self._restoring: asyncio.Task[None] | None = None
        self._saving: asyncio.Task[None] | None = None
        self._last_good: tuple[str, str] | None = None  # (document, version) to save
        self._policy_version: str | None = None
        self._policy_informer: Informer | None = None
        self._hub_informers: list[Informer] = []
        self.aijobs_listed = False  # the sweep waits for it
        self.cycles = 0
        self.last_plan: CyclePlan | None = None
        self.last_snapshot: Snapshot | None = None
        self.policy_error = ""
        self._stopping = False
        self._not_ready_since: dict[str, float] = {}
        self._stale_told: set[tuple[str, str]] = set()  # stale Jobs whose result was told
        self._held: set[tuple[str, str]] = set()  # (record, member) held for a lost member
        self.probes: dict[str, Probes] = {}  # each member's probe results, folded
        self._probe_ready: dict[str, bool] = {}  # the verdict the last probe result gave
        self._member_written: dict[tuple[str, str], dict[str, Any]] = {}
        self.member_specs: dict[str, Any] = {}
        self.metrics: dict[str, MetricsSource] = {}
        self._metrics_task: asyncio.Task[None] | None = None
        self._eta_task: asyncio.Task[None] | None = None
        self._eta_at = 0.0
        self._eta_wall_s = 0.0  # how long the last ETA projection took
        # Projected waits scaled by how much later than projected jobs really started.
        self.calibrator = WaitCalibrator()
        self._cycle_wall_s = 0.0  # how long the last cycle took on the loop and in plan_cycle
        self._cycle_end = 0.0
        self.observer = Observer(config)
        self._learned: set[str] = set()  # UIDs of the finished AIJobs the estimator has seen
        self.observer.metrics.status_writes_pending.set_function(self.writes.statuses)

    # -- plumbing --------------------------------------------------------------------------
    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking API call in the pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: fn(*args, **kwargs))

    def kick(self) -> None:
        """Ask for a cycle soon (merged with other kicks)."""
        self._kick.set()

    def _threadsafe(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    # -- ingestion ---------------------------------------------------------------------------
    def owner_of(self, namespace: str) -> tuple[str, str]:
        """User and group of a namespace: the policy's mapping, then its labels, then its name."""
        mapped = self.store.policy.namespaces.get(namespace)
        if mapped:
            return mapped
        labels = self.namespaces.get(namespace, {})
        return labels.get(k.LABEL_USER, namespace), labels.get(k.LABEL_GROUP, namespace)

    def namespace_event(self, event: str, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        if event == "DELETED":
            self.namespaces.pop(name, None)
        else:
            self.namespaces[name] = dict(body["metadata"].get("labels") or {})
        for record in self.store.records.values():
            if record.namespace == name:
                user, group = self.owner_of(name)
                self.store.upsert(record.body, user=user, group=group)

    def aijob_event(self, event: str, body: Mapping[str, Any]) -> None:
        """A watch event of an AIJob. A deleted AIJob's member Job is deleted here; one
        deleted while the operator was away, or while its member was unreachable, is
        removed by the sweep (no finalizer: cancelling never waits on a member)."""
        meta = body["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if event == "DELETED":
            record = self.store.records.get(key)
            if record is not None and record.uid == meta.get("uid"):
                self._delete_member_job(record)
                self.calibrator.forget(key)
                self.store.remove(key)
                self.kick()
            return
        user, group = self.owner_of(meta["namespace"])
        old = self.store.records.get(key)
        before = (old.uid, old.generation, old.deleting) if old is not None else None
        record = self.store.upsert(body, user=user, group=group)
        record.written = _ours(body.get("status") or {}, record.written)
        if (
            record.unknown_queue
            and not record.finished
            and before != (record.uid, record.generation, record.deleting)
        ):
            self._event(record, "UnknownQueue", record.unknown_queue, warning=True)
        if record.deleting and (before is None or not before[2]):
            self._delete_member_job(record)  # held by someone else's finalizer: stop it now
        elif record.job is not None and record.job.suspended and record.active:
            self._suspend_running(record)
        if before != (record.uid, record.generation, record.deleting):
            self.kick()  # not for our own status writes

    def _aijobs_listed(self, items: list[Mapping[str, Any]]) -> None:
        """A (re-)list of every AIJob: those missing from it were deleted meanwhile."""
        listed = {f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in items}
        for key, record in list(self.store.records.items()):
            if key not in listed:
                meta = {"namespace": record.namespace, "name": record.name, "uid": record.uid}
                self.aijob_event("DELETED", {"metadata": meta})
        for item in items:
            self.aijob_event("ADDED", item)
        self._learn_finished()

    def _learn_finished(self) -> int:
        """Feed the estimator every Succeeded AIJob it has not seen (once per UID): the hub
        is where what was learned survives a restart or fail-over. Waiting jobs are then
        estimated again. Returns how many it learned from."""
        learn = getattr(self.estimator, "recall", self.estimator.observe)
        count = 0
        for record in list(self.store.records.values()):
            if record.phase != k.PHASE_SUCCEEDED or record.uid in self._learned:
                continue
            self._learned.add(record.uid)
            if record.job is None or record.actual_s <= 0 or not record.gpu_type:
                continue
            try:
                learn(record.job, record.gpu_type, record.actual_s)
            except Exception:  # the predictor must never take the operator down
                log.exception("predictor failed to learn from %s", record.key)
            count += 1
        if count:
            for record in self.store.pending():
                assert record.job is not None
                record.job = self.store.attach_estimate(record.job)
            log.info("learned from %d finished AIJobs on the hub", count)
        return count

    def _namespaces_listed(self, items: list[Mapping[str, Any]]) -> None:
        self.namespaces = {}
        for item in items:
            self.namespace_event("ADDED", item)

    def _delete_member_job(self, record: Record) -> None:
        member = self.members.get(record.cluster)
        if member is not None and record.member_job and record.active:
            self.pool.submit(_quiet, member.delete_job, record.member_job)

    def _suspend_running(self, record: Record) -> None:
        """``spec.suspend`` set on a running job: stop its member Job, keep it queued."""
        self._delete_member_job(record)
        record.phase = k.PHASE_SUSPENDED
        record.reason = "Suspended"
        record.message = "suspended by its owner (spec.suspend); its member Job was stopped"
        self._event(record, "Suspended", record.message)
        self._clear_placement(record)
        self._write_soon(record)

    async def watch_hub(self) -> None:
        """Watch Namespaces (owners of jobs), then AIJobs, each listed before going on."""
        await self._watch_hub(
            "namespaces", self.core.list_namespace, self.namespace_event, self._namespaces_listed
        )
        await self._watch_hub(
            "aijobs",
            self.custom.list_cluster_custom_object,
            self.aijob_event,
            self._aijobs_listed,
            group=k.GROUP,
            version=k.VERSION,
            plural=k.AIJOB_PLURAL,
        )
        self.aijobs_listed = True

    async def _watch_hub(
        self,
        name: str,
        list_fn: Callable[..., Any],
        on_change: Callable[[str, Mapping[str, Any]], None],
        on_list: Callable[[list[Mapping[str, Any]]], None],
        **kwargs: Any,
    ) -> None:
        listed = asyncio.Event()

        def on_event(event: str, obj: Mapping[str, Any] | None) -> None:
            if event == "LIST" and obj is not None:
                self._threadsafe(on_list, list(obj.get("items") or []))
            elif event in {"ADDED", "MODIFIED", "DELETED"} and obj is not None:
                self._threadsafe(on_change, event, obj)
            elif event == "SYNCED":  # after the LIST, in order, on the loop
                self._threadsafe(listed.set)

        informer = Informer(f"hub/{name}", self.hub, list_fn, on_event, **kwargs)
        self._hub_informers.append(informer.start())
        await listed.wait()

    def watch_policy(self) -> Informer:
        """Watch the one policy ConfigMap (namespaced, by name: least privilege)."""
        core = client.CoreV1Api(self.hub)

        def on_event(event: str, obj: Mapping[str, Any] | None) -> None:
            if event == "LIST" and obj is not None:
                self._threadsafe(self._policy_listed, list(obj.get("items") or []))
            elif event in {"ADDED", "MODIFIED", "DELETED"} and obj is not None:
                self._threadsafe(self._policy_from_watch, event, obj)

        informer = Informer(
            "policy",
            self.hub,
            core.list_namespaced_config_map,
            on_event,
            namespace=self.config.namespace,
            field_selector=f"metadata.name={self.config.policy_configmap}",
        )
        self._policy_informer = informer
        return informer.start()

    def _policy_listed(self, items: list[Mapping[str, Any]]) -> None:
        """The policy ConfigMap listed: taken when valid; otherwise, while nothing is in force
        yet (at start), the last good policy saved in the cluster is."""
        for item in items:
            self._policy_from_watch("ADDED", item)
        if not self.policy_loaded.is_set() and self._restoring is None:
            cm = {"apiVersion": "v1", "kind": "ConfigMap", **items[0]} if items else None
            self._restoring = asyncio.get_running_loop().create_task(self._restore_last_good(cm))

    def _in_force(self) -> str:
        """What the refusal of a new policy leaves in force, for its Event."""
        if self.policy_loaded.is_set():
            return f"the last good policy (version {self.store.policy.version}) stays"
        if self.policy_settled.is_set():
            return "the built-in defaults stay"
        return "the last good policy saved in the cluster is looked for (next Event)"

    def _policy_from_watch(self, event: str, body: Mapping[str, Any]) -> None:
        cm = {"apiVersion": "v1", "kind": "ConfigMap", **body}
        version = (body.get("metadata") or {}).get("resourceVersion")
        if event == "DELETED":
            self.post_event(cm, "PolicyDeleted", f"policy deleted; {self._in_force()}", True)
            return
        if version == self._policy_version:
            return
        self._policy_version = version
        error = self.policy_event(body)
        if error:
            self.post_event(cm, "InvalidPolicy", f"refused, {self._in_force()}: {error}", True)
        else:
            self.post_event(cm, "PolicyAccepted", f"policy version {version} in force", False)

    def policy_event(self, body: Mapping[str, Any]) -> str:
        """A new policy ConfigMap; returns "" when taken, else why it was refused. A taken
        one is saved as the last good policy (:mod:`cpn.adapters.lastgood`)."""
        try:
            policy = parse_policy_configmap(body)
        except PolicyError as err:
            self.policy_error = str(err)
            return self.policy_error
        self.policy_error = ""
        self._use_policy(policy)
        text = (body.get("data") or {}).get(CONFIGMAP_KEY, "")
        self._last_good = (text, policy.version)
        if self._saving is None or self._saving.done():
            self._saving = asyncio.get_running_loop().create_task(self._save_last_good())
        return ""

    async def _save_last_good(self) -> None:
        """Write the latest accepted policy to the last-good ConfigMap (the newest wins)."""
        name = lastgood.last_good_name(self.config.policy_configmap)
        saved = None
        while self._last_good is not None and self._last_good != saved:
            saved = self._last_good
            try:
                await self.call(lastgood.save, self.hub, self.config.namespace, name, *saved)
            except Exception as err:
                log.warning("last good policy not saved in %s: %s", name, error_line(err))
                return
            log.info("policy version %s saved as the last good one (%s)", saved[1], name)

    async def _restore_last_good(self, live: Mapping[str, Any] | None) -> None:
        """Start from the saved last good policy (the live one is broken or gone)."""
        name = lastgood.last_good_name(self.config.policy_configmap)
        why = "is refused" if live is not None else "is missing"
        try:
            saved = await self.call(lastgood.load, self.hub, self.config.namespace, name)
            if saved is None:
                raise LookupError(f"there is no {name}")
            policy = parse_policy(saved.text, version=saved.version)
        except Exception as err:
            message = (
                f"the policy ConfigMap {why} and no last good policy could be read "
                f"({error_line(err)}): scheduling with the built-in defaults"
            )
            log.warning("%s", message)
            if live is not None:
                self.post_event(live, "PolicyDefaults", message, True)
        else:
            if self.policy_loaded.is_set():
                return  # a valid live policy came first
            self._use_policy(policy)
            message = (
                f"the policy ConfigMap {why}: the last good policy, version {saved.version} "
                f"(accepted {saved.accepted_at}, kept in {name}), is in force"
            )
            log.warning("%s", message)
            self.post_event(live or saved.body, "PolicyRestored", message, True)
        finally:
            self.policy_settled.set()

    def _use_policy(self, policy: QueuePolicy) -> None:
        self.store.policy = policy
        log.info("policy %s in force (version %s)", policy.name, policy.version)
        self.policy_loaded.set()
        self.policy_settled.set()
        for namespace in {r.namespace for r in self.store.records.values()}:
            user, group = self.owner_of(namespace)
            for record in [r for r in self.store.records.values() if r.namespace == namespace]:
                self.store.upsert(record.body, user=user, group=group)
        for record in self.store.recheck_queues():
            self._event(record, "UnknownQueue", record.unknown_queue, warning=True)
        self.kick()

    async def member_event(self, event: str, body: Mapping[str, Any]) -> None:
        """A MemberCluster was added, changed or removed."""
        name = body["metadata"]["name"]
        old = self.members.pop(name, None)
        if old is not None:
            old.stop()
        if event == "DELETED":
            self.member_status.pop(name, None)
            self.probes.pop(name, None)
            self.kick()
            return
        spec = body.get("spec") or {}
        secret_ref = spec.get("kubeconfigSecret") or {}
        try:
            secret = await self.call(
                self.core.read_namespaced_secret, secret_ref.get("name", ""), self.config.namespace
            )
            raw = (secret.data or {}).get(secret_ref.get("key") or "kubeconfig")
            if not raw:
                raise ValueError(
                    f"secret {secret_ref.get('name')} has no key "
                    f"{secret_ref.get('key') or 'kubeconfig'!r}"
                )
            text = base64.b64decode(raw).decode()
            problems = kubeconfig_problems(text)  # no exec plugins, no local files
            if problems:
                raise ValueError("; ".join(problems))
            api = client_from_kubeconfig(text)
            _widen_pool(api, self.config.dispatch_workers)
        except (ApiException, ValueError, ConfigException) as err:
            reason = getattr(err, "reason", None) or str(err)
            self.member_status[name] = (False, f"kubeconfig: {reason}")
            await self.write_member_status(name, body)
            return
        member_spec = MemberSpec(
            name=name,
            namespace=spec.get("namespace") or "cpn-jobs",
            prometheus_url=spec.get("prometheusURL") or "",
            location=spec.get("location") or "",
            bandwidth_gbps={str(a): float(b) for a, b in (spec.get("bandwidthGbps") or {}).items()},
            unschedulable=bool(spec.get("unschedulable", False)),
        )
        member = Member(
            member_spec, api, self.config.hub, self._member_callback, self._probe_callback
        )
        if member_spec.prometheus_url:
            self.metrics[name] = MetricsSource(
                member_spec.prometheus_url, max_age_s=self.config.metrics_max_age_s
            )
        else:
            self.metrics.pop(name, None)
        self.members[name] = member
        member.start()
        self.kick()

    def _member_callback(
        self, member: str, kind: str, event: str, obj: Mapping[str, Any] | None
    ) -> None:
        self._threadsafe(self._on_member, member, kind, event, obj)

    def _on_member(
        self, member_name: str, kind: str, event: str, obj: Mapping[str, Any] | None
    ) -> None:
        member = self.members.get(member_name)
        if member is None:
            return
        if kind == "jobs" and obj is not None and event in {"ADDED", "MODIFIED", "DELETED"}:
            self._follow(member, event, obj)
        elif kind == "jobs" and event == "LIST" and obj is not None:
            for item in obj.get("items") or []:
                self._follow(member, "ADDED", item)
            if self.loop is not None:  # back after an outage: remove stale attempts at once
                self.loop.create_task(self.sweep())
        if kind == "jobs":
            # A Job that ends frees GPUs: _follow kicks then. Its other changes (created,
            # ready) free nothing, and a burst of dispatches would otherwise cycle per Job.
            if event in {"LIST", "SYNCED", "ERROR"}:
                self.kick()
        elif kind != "pods" or event in {"LIST", "SYNCED", "DELETED", "ERROR"} or _pod_done(obj):
            self.kick()

    # -- member health --------------------------------------------------------------------------
    def _probe_callback(self, member: str, probe: Probe) -> None:
        self._threadsafe(self._on_probe, member, probe)

    def _on_probe(self, name: str, probe: Probe) -> None:
        """A probe's result: a cycle at once when it turns the member's verdict, or when the
        member's jobs are due to be requeued (the cycle writes and requeues)."""
        if name not in self.members:
            return
        self.probes[name] = self.probes.get(name, Probes()).add(probe)
        now = time.monotonic()
        verdict = self.member_health(name, now)
        if verdict.ready != self._probe_ready.get(name):
            self._probe_ready[name] = verdict.ready
            log.log(
                logging.INFO if verdict.ready else logging.WARNING,
                "member %s: %s %s",
                name,
                verdict.reason,
                verdict.message,
            )
            self.kick()
        elif (
            verdict.since_s is not None
            and now - verdict.since_s >= self.config.member_timeout_s
            and any(r.cluster == name for r in self.store.active())
        ):
            self.kick()

    def member_health(self, name: str, now: float) -> Health:
        """What the member's probes say at ``now`` (monotonic seconds)."""
        member = self.members.get(name)
        overdue = member.probe_overdue_s if member is not None else 0.0
        return health(
            self.probes.get(name, Probes()),
            now,
            grace_s=self.config.member_grace_s,
            overdue_s=overdue,
        )

    def _member_ready(self, member: Member, now: float) -> tuple[bool, str]:
        """Ready when its probes answer and its watches run (else why not: the probe's
        error, then the failing watch's); not ready since its first missed probe, or since
        now when only its watches fail."""
        verdict = self.member_health(member.name, now)
        ready, why = member.ready(self.config.member_grace_s)
        if not verdict.ready:
            why = verdict.message if ready else f"{verdict.message}; {why}"
            ready = False
        if ready:
            self._not_ready_since.pop(member.name, None)
        else:
            since = verdict.since_s if verdict.since_s is not None else now
            self._not_ready_since[member.name] = min(
                self._not_ready_since.get(member.name, since), since
            )
        return ready, why

    # -- following member Jobs -----------------------------------------------------------------
    def _follow(self, member: Member, event: str, job: Mapping[str, Any]) -> None:
        labels = (job.get("metadata") or {}).get("labels") or {}
        uid = labels.get(k.LABEL_UID, "")
        attempt = int(labels.get(k.LABEL_ATTEMPT, "0") or 0)
        name = job["metadata"]["name"]
        record = self.store.by_uid(uid)
        if record is None:
            return  # an orphan: the sweep deletes it once AIJobs are listed
        if record.finished or record.phase == k.PHASE_INVALID:
            return
        if record.draining is not None and event == "DELETED":
            self.kick()  # its preempted attempt is gone: the next may start
        elif record.preemptions and not record.active and attempt <= record.attempts:
            record.draining = record.draining or (member.name, name)  # seen after a restart
        status, fence = job.get("status") or {}, labels.get(k.LABEL_FENCE, "")
        where = f"{name} on {member.name}"
        told = judge_report(
            record.attempts, record.fence, attempt, fence, job_result(status), where
        )
        if not told.current or (record.active and record.cluster and record.cluster != member.name):
            if told.stale_result and (member.name, name) not in self._stale_told:
                self._stale_told.add((member.name, name))
                self._event(record, "StaleAttempt", told.message, warning=True)
            if attempt == record.attempts + 1 and not record.active and event != "DELETED":
                self._adopt(record, member, job, attempt)  # created just before a crash
            else:
                return  # a stale attempt: the sweep removes it
        if not record.active or record.member_job != name:
            return
        if event == "DELETED":
            self._attempt_failed(record, "its member Job was deleted")
            return
        record.observed = True
        conditions = {
            c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"
        }
        now = self.clock()
        if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
            began = record.start_s or record.dispatch_s or now
            self._succeeded(record, finished_at(status, began, now))
        elif "Failed" in conditions or "FailureTarget" in conditions:
            message = (conditions.get("Failed") or conditions.get("FailureTarget") or {}).get(
                "message"
            ) or "a worker failed"
            self._attempt_failed(record, message)
        else:
            self._judge_start(record, job)

    def _judge_start(self, record: Record, job: Mapping[str, Any] | None) -> None:
        """A dispatched attempt whose workers all run is Running; one whose workers do not
        all run within ``retry.start_timeout_s`` of its dispatch is removed and requeued,
        never left half-started holding GPUs (:func:`cpn.core.gang.judge_start`). ``job``
        is its member Job as last seen (None: not seen yet)."""
        if record.phase != k.PHASE_DISPATCHED:
            return
        if not record.dispatch_s and job is not None:  # restored after a restart
            created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
            record.dispatch_s = created or self.clock()
        wanted = record.job.workers if record.job is not None else 1
        running = workers_running((job or {}).get("status") or {})
        timeout_s = self.store.policy.retry.start_timeout_s
        verdict = judge_start(wanted, running, record.dispatch_s, self.clock(), timeout_s)
        if verdict.action is Gang.REMOVE:
            log.warning("%s on %s: %s", record.key, record.cluster, verdict.message)
            self._attempt_failed(record, verdict.message, reason="StartTimeout")
        elif verdict.action is Gang.RUNNING:
            record.phase = k.PHASE_RUNNING
            record.start_s = self.clock()
            record.reason = "Running"
            record.message = f"running on {record.cluster} ({record.gpu_type})"
            if wanted > 1:
                record.message += f", {verdict.message}"
            self.observer.started(record)
            self._event(record, "Started", record.message)
            self._write_soon(record)
        elif running and record.message != verdict.message:  # part of the gang runs
            record.message = verdict.message
            self._write_soon(record)

    def _start_deadlines(self) -> None:
        """Attempts of reachable members whose workers have not all started in time go."""
        for record in self.store.active():
            if record.phase != k.PHASE_DISPATCHED or not record.dispatch_s:
                continue  # running ones were judged when their workers started
            member = self.members.get(record.cluster)
            reachable = self.member_status.get(record.cluster, (False, ""))[0]
            if member is not None and reachable:
                self._judge_start(record, member.jobs.get(record.member_job))

    def _adopt(self, record: Record, member: Member, job: Mapping[str, Any], attempt: int) -> None:
        affinity = (((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
            "affinity"
        ) or {}
        terms = (
            (
                (affinity.get("nodeAffinity") or {}).get(
                    "requiredDuringSchedulingIgnoredDuringExecution"
                )
                or {}
            ).get("nodeSelectorTerms")
            or [{}]
        )[0].get("matchExpressions") or []
        nodes = tuple(
            v for t in terms if t.get("key") == k.HOSTNAME_LABEL for v in t.get("values") or []
        )
        annotations = (((job.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
            "annotations"
        ) or {}
        record.attempts = attempt
        record.fence = (job["metadata"].get("labels") or {}).get(k.LABEL_FENCE, "")
        record.phase = k.PHASE_DISPATCHED
        record.cluster = member.name
        record.member_job = job["metadata"]["name"]
        record.gpu_type = annotations.get(k.ANNOTATION_GPU_TYPE, record.gpu_type)
        record.nodes = nodes
        record.dispatch_s = self.clock()
        if record.job is not None:
            record.predicted_runtime_s = record.job.estimate.runtime_s.get(record.gpu_type, 0.0)
        self._write_soon(record)

    def _succeeded(self, record: Record, finished_s: float) -> None:
        record.phase = k.PHASE_SUCCEEDED
        record.finish_s = finished_s
        began = record.start_s or record.dispatch_s or finished_s
        record.actual_s = record.attained_s + max(0.0, finished_s - began)  # all attempts
        record.reason = "Succeeded"
        record.message = (
            f"finished on {record.cluster} ({record.gpu_type}) in "
            f"{human_duration(record.actual_s)}, predicted "
            f"{human_duration(record.predicted_runtime_s)}"
        )
        self._learned.add(record.uid)
        if record.job is not None and record.actual_s > 0:
            try:
                self.estimator.observe(record.job, record.gpu_type, record.actual_s)
            except Exception:  # the predictor must never take the operator down
                log.exception("predictor failed to learn from %s", record.key)
        self._event(record, "Succeeded", record.message)
        self.observer.ended(record)
        self._write_soon(record)
        self.kick()

    def _attempt_failed(self, record: Record, why: str, reason: str = "Retrying") -> None:
        retry = self.store.policy.retry
        record.failure = why
        member = self.members.get(record.cluster)
        if member is not None and record.member_job:
            self.pool.submit(_quiet, member.delete_job, record.member_job)
        if record.attempts >= retry.max_attempts:
            record.phase = k.PHASE_FAILED
            record.finish_s = self.clock()
            record.reason = "Failed"
            record.message = f"attempt {record.attempts} failed ({why}); no retries left"
            self.observer.ended(record)
            self._event(record, "Failed", record.message, warning=True)
        else:
            delay = retry.backoff_s * (2 ** max(record.attempts - 1, 0))
            record.phase = k.PHASE_QUEUED
            record.not_before_s = self.clock() + delay
            record.reason = reason
            self.observer.retrying()
            record.message = f"attempt {record.attempts} failed ({why}); retrying in {delay:.0f}s"
            self._event(record, reason, record.message, warning=True)
            self._clear_placement(record)
        self._write_soon(record)
        self.kick()

    def _clear_placement(self, record: Record) -> None:
        record.cluster = record.gpu_type = record.member_job = ""
        record.nodes = ()
        record.start_s = record.dispatch_s = 0.0
        record.observed = False
        record.choice = None

    # -- the loop -----------------------------------------------------------------------------
    async def wait_synced(self, timeout_s: float = 60.0) -> None:
        """Wait until every member has listed nodes, pods and Jobs (or timed out)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(m.synced() for m in self.members.values()):
                return
            await asyncio.sleep(0.05)

    async def run(self) -> None:
        """Cycle whenever kicked (debounced), and every ``interval_s`` at least."""
        self.loop = asyncio.get_running_loop()
        self.observer.start()
        if self._policy_informer is None:
            self.watch_policy()
        try:
            await asyncio.wait_for(self.policy_settled.wait(), timeout=15.0)
        except TimeoutError:
            log.warning(
                "no valid policy ConfigMap %s/%s; scheduling with the defaults",
                self.config.namespace,
                self.config.policy_configmap,
            )
        await self.watch_hub()
        await self.connect_members()
        await self.wait_synced()
        self._requeue_uncreated()
        self._metrics_task = asyncio.get_running_loop().create_task(self.metrics_loop())
        self._write_workers = [
            asyncio.get_running_loop().create_task(self._write_worker())
            for _ in range(WRITE_WORKERS)
        ]
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), timeout=self._next_wake_s())
            await asyncio.sleep(self.config.debounce_s)
            # Pace: cycles (plan_cycle is a thread holding the GIL) get at most half of the
            # time, so events, dispatches and status writes keep flowing with a long queue.
            rest = self._cycle_wall_s - (time.monotonic() - self._cycle_end)
            if rest > 0:
                await asyncio.sleep(rest)
            self._kick.clear()
            if not leading():  # deposed (e.g. paused past the renew deadline): act no more
                log.error("not the leader any more: no cycle")
                continue
            try:
                await self.cycle()
            except Exception:
                log.exception("scheduling cycle failed; retrying on the next kick")
                await asyncio.sleep(1.0)

    def _next_wake_s(self) -> float:
        """Seconds until the safety-net tick, until a backing-off job may retry, or until a
        start instant a status shows must be rendered again (:func:`start_fields`)."""
        wait = self.config.interval_s
        now = self.clock()
        for record in self.store.pending():
            if record.not_before_s > now:
                wait = min(wait, record.not_before_s - now + 0.05)
            if record.refresh_by_s is not None:
                wait = min(wait, record.refresh_by_s - now)
        timeout_s = self.store.policy.retry.start_timeout_s
        for record in self.store.active():  # an attempt's start deadline still ahead
            deadline = record.dispatch_s + timeout_s
            if record.phase == k.PHASE_DISPATCHED and record.dispatch_s and deadline > now:
                wait = min(wait, deadline - now + 0.05)
        return max(wait, 0.0)

    async def connect_members(self) -> None:
        """Connect every registered member before the first cycle, so that member Jobs
        created just before a restart are seen (and adopted) before anything is placed."""
        result = await self.call(
            self.custom.list_cluster_custom_object, k.GROUP, k.VERSION, k.MEMBER_PLURAL
        )
        for body in result.get("items") or []:
            name = body["metadata"]["name"]
            if name not in self.members:
                self.member_specs[name] = body.get("spec")
                await self.member_event("ADDED", body)
        # A member connected by its own handler before the AIJobs were listed had its Jobs
        # listed when no record existed to match them: follow its mirror again now.
        for member in list(self.members.values()):
            for job in list(member.jobs.values()):
                self._follow(member, "ADDED", job)

    def clusters_view(self) -> tuple[list[Any], dict[str, dict[str, float]]]:
        """Core clusters from the members, and the bandwidth table."""
        usage = self.store.usage_by_node()
        clusters = []
        bandwidth: dict[str, dict[str, float]] = {}
        now = time.monotonic()
        started: dict[str, dict[str, float]] = {}  # member -> node -> latest start on it
        for record in self.store.active():
            began = record.start_s or record.dispatch_s
            on = started.setdefault(record.cluster, {})
            for node in record.nodes:
                on[node] = max(on.get(node, 0.0), began)
        for name, member in sorted(self.members.items()):
            ready, why = self._member_ready(member, now)
            self.member_status[name] = (ready, why)
            ours = {node: u for (cluster, node), u in usage.items() if cluster == name}
            util = self._cpu_util(name, started.get(name, {}))
            clusters.append(member.cluster(ours, ready=ready, cpu_util=util))
            bandwidth[name] = dict(member.spec.bandwidth_gbps)
        self._views = {c.name: c for c in clusters}
        self.store.set_gpu_types(n.gpu_type for c in clusters for n in c.nodes)
        return clusters, bandwidth

    def _cpu_util(self, member: str, started: Mapping[str, float]) -> dict[str, float]:
        """Trusted node CPU utilisation of a member (samples older than the latest start of
        a cpn job on the node left out)."""
        source = self.metrics.get(member)
        if source is None:
            return {}
        return source.cpu_util(self.clock(), started)

    async def metrics_loop(self, period_s: float = 10.0) -> None:
        """Read every member's Prometheus periodically (Prometheus is pull-based)."""
        while not self._stopping:
            for source in list(self.metrics.values()):
                await self.call(source.refresh)
            await asyncio.sleep(period_s)

    async def cycle(self) -> CyclePlan:
        """One scheduling cycle: snapshot, plan off the loop, apply."""
        began = time.perf_counter()
        self._requeue_lost()
        self._start_deadlines()
        self._drained()
        clusters, bandwidth = self.clusters_view()
        snapshot = self.store.snapshot(self.clock(), clusters, bandwidth)
        plan, wall, chosen, frees = await asyncio.to_thread(_plan_and_explain, snapshot)
        self.cycles += 1
        self.last_plan, self.last_snapshot = plan, snapshot
        fields = {
            "cycle": self.cycles,
            "pending": len(snapshot.pending),
            "running": len(snapshot.running),
            "starts": len(plan.starts),
            "holds": len(plan.holds),
            "method": plan.stats.method,
            "status": plan.stats.status,
            "wall_s": round(wall, 4),
        }
        log.info("cycle %s", " ".join(f"{k_}={v}" for k_, v in fields.items()), extra=fields)
        await self.observer.cycle(self.cycles, snapshot, plan, wall)
        await self.apply(plan, snapshot, chosen, frees)
        self._cycle_end = time.monotonic()
        self._cycle_wall_s = time.perf_counter() - began
        self.observer.cycle_applied(self._cycle_wall_s)
        self._maybe_project()
        return plan

    def _maybe_project(self) -> None:
        """Refresh ETAs in the background, at most every ``eta_interval_s``."""
        if self._eta_task is not None and not self._eta_task.done():
            return
        # At most every eta_interval_s, and the projection at most a fifth of the time.
        if time.monotonic() - self._eta_at < max(self.config.eta_interval_s, 4 * self._eta_wall_s):
            return
        self._eta_at = time.monotonic()
        self._eta_task = asyncio.get_running_loop().create_task(self.refresh_etas())

    async def refresh_etas(self) -> None:
        """Project the queue forward from now (after this cycle's starts) and write ETAs."""
        clusters, bandwidth = self.clusters_view()
        snapshot = self.store.snapshot(self.clock(), clusters, bandwidth)
        if not snapshot.pending:
            return
        started = time.monotonic()
        projection = await asyncio.to_thread(project, snapshot)
        self._eta_wall_s = time.monotonic() - started
        now = snapshot.now_s
        pending = [(r, projection.get(r.key)) for r in self.store.pending()]
        for record, found in pending:  # all first: then one factor per queue
            if found is not None and record.job is not None:
                self.calibrator.projected(record.key, record.job.queue, now, found.start_s)
        for record, found in pending:
            if found is None or record.job is None:
                record.eta_start_s = record.eta_finish_s = None
                continue
            told = self.calibrator.state(record.job.queue, found, now)
            record.eta_start_s, record.eta_finish_s = told.start_s, told.end_s
            record.eta_range = (told.start_low_s, told.start_high_s)
        await self.write_all()

    def _requeue_lost(self) -> None:
        """Jobs on a member that has been unreachable too long go back to the queue."""
        now = time.monotonic()
        self._held = {held for held in self._held if held[1] in self._not_ready_since}
        for name, since in list(self._not_ready_since.items()):
            if now - since < self.config.member_timeout_s:
                continue
            for record in self.store.active():
                if record.cluster == name and not (
                    name in self.members and self._held_for_member(record, name)
                ):
                    record.phase = k.PHASE_QUEUED
                    record.reason = "MemberLost"
                    record.message = (
                        f"member {name} unreachable for {self.config.member_timeout_s:.0f}s: "
                        "requeued; its old member Job is removed when the member returns"
                    )
                    self._event(record, "Requeued", record.message, warning=True)
                    self._clear_placement(record)
                    self._write_soon(record)

    def _held_for_member(self, record: Record, name: str) -> bool:
        """Under ``retry.member_lost: at-most-once`` a job that does not checkpoint waits
        on its lost member until it answers again or is removed (an Event says so once)."""
        job = record.job
        if not holds_for_member(self.store.policy.retry.member_lost, bool(job and job.checkpoint)):
            return False
        if (record.key, name) not in self._held:
            self._held.add((record.key, name))
            message = (
                f"member {name} unreachable for {self.config.member_timeout_s:.0f}s: the job "
                "stays there, not requeued, until it answers again or is removed (policy "
                "retry.member_lost: at-most-once; the job does not checkpoint)"
            )
            self._event(record, "MemberLost", message, warning=True)
        return True

    async def apply(
        self,
        plan: CyclePlan,
        snapshot: Snapshot,
        chosen: Mapping[str, Choice] | None = None,
        frees: Mapping[str, Frees] | None = None,
    ) -> None:
        """Carry out a plan: preempt, dispatch, explain every hold, number the queues."""
        chosen = chosen or {}
        frees = frees or {}
        for preempt in plan.preemptions:
            record = self.store.records.get(preempt.job_key)
            if record is not None:
                await self._preempt(record, preempt.reason)
        for start in plan.starts:
            record = self.store.records.get(start.job_key)
            if record is not None:
                self._dispatch(record, start, chosen.get(start.job_key))
        self._yield_to_creates()
        for hold in plan.holds:
            record = self.store.records.get(hold.job_key)
            if record is None or record.active or record.finished:
                continue
            previous = record.reason
            record.hold = hold
            record.frees = frees.get(hold.job_key)
            record.phase = (
                k.PHASE_SUSPENDED if hold.reason == WaitReason.Suspended else k.PHASE_QUEUED
            )
            if hold.reason == WaitReason.Infeasible:
                record.reason = "Infeasible"
            else:
                record.reason = str(hold.reason)
            record.message = hold.message
            if hold.reason == WaitReason.Backoff and record.failure:
                record.message += f" ({record.failure})"
            if hold.reserved_start_s is not None and record.eta_start_s is None:
                record.eta_start_s = hold.reserved_start_s
            if previous != record.reason and hold.reason in {
                WaitReason.Infeasible,
                WaitReason.Quota,
            }:
                self._event(
                    record,
                    record.reason,
                    hold.message,
                    warning=hold.reason == WaitReason.Infeasible,
                )
        self._number_queues(plan)
        for record in [r for r in self.store.records.values() if r.phase == k.PHASE_INVALID]:
            if record.reason != "InvalidSpec":
                record.reason = "InvalidSpec"
                record.message = record.invalid
                self._event(record, "InvalidSpec", record.invalid, warning=True)
        self._write_all_soon()

    async def _preempt(self, record: Record, why: str) -> None:
        """Stop a running job for a higher-ranked one: book its service and checkpoint,
        delete its member Job and requeue it; it is not placed again before that Job is
        gone (one member Job at a time, see :meth:`_drained`)."""
        inflight = self._inflight.get(record.key)
        if inflight is not None:
            await inflight  # delete what the create made, not before it lands
        if not record.active:
            return
        member = self.members.get(record.cluster)
        lost = preempted(record, self.clock(), why, self.store.policy.preemption)
        if member is not None and record.member_job:
            record.draining = (member.name, record.member_job)
            await self.call(_quiet, member.delete_job, record.member_job)
        record.phase = k.PHASE_QUEUED
        record.reason = "Preempted"
        record.message = (
            f"{why} (preemption {record.preemptions}): it resumes from its checkpoint at "
            f"{human_duration(record.checkpointed_s) or '0s'} of compute; "
            f"{human_duration(lost) or '0s'} of work since its last checkpoint is lost"
        )
        self._event(record, "Preempted", record.message, warning=True)
        self._clear_placement(record)
        self._write_soon(record)

    def _drained(self) -> None:
        """Preempted records whose old member Job is gone (or whose member is) may start."""
        for record in self.store.records.values():
            if record.draining is None:
                continue
            cluster, name = record.draining
            member = self.members.get(cluster)
            if member is None or (member.synced() and name not in member.jobs):
                record.draining = None

    def _number_queues(self, plan: CyclePlan) -> None:
        """Positions 1..n per queue among the jobs still waiting, in the cycle's order (the
        plan's ranks also count this cycle's starts, and rank all queues together)."""
        order = []
        for hold in plan.holds:  # best first
            record = self.store.records.get(hold.job_key)
            if hold.position and record is not None and record.phase == k.PHASE_QUEUED:
                order.append((record.key, queue_of(record)))
        places = queue_positions(order)
        for record in self.store.records.values():
            record.position = places.get(record.key, 0)

    def _dispatch(self, record: Record, start: Start, choice: Choice | None = None) -> None:
        """Assume the start (the record holds its GPUs from now) and launch the create."""
        member = self.members.get(start.cluster)
        if member is None or record.job is None:
            return
        attempt = record.attempts + 1
        record.attempts = attempt
        record.fence = next_fence(record.fence, attempt, secrets.token_hex(4))
        record.phase = k.PHASE_DISPATCHED
        record.cluster, record.gpu_type, record.nodes = start.cluster, start.gpu_type, start.nodes
        record.predicted_runtime_s = start.predicted_runtime_s
        resume_from = None
        if record.preemptions:  # the rest of its work, after the restart
            resume_from = record.checkpointed_s
            record.predicted_runtime_s = self.store.policy.preemption.restart_cost_s + max(
                0.0, start.predicted_runtime_s - resume_from
            )
        record.transfer_s = start.transfer_s
        record.dispatch_s = self.clock()
        record.not_before_s = 0.0
        record.position, record.frees, record.choice = 0, None, choice
        manifest = render_job(
            record.body,
            start,
            attempt=attempt,
            hub=self.config.hub,
            namespace=member.spec.namespace,
            affinity=self.store.policy.placement.affinity,
            gpu_product=_product_label(member, start),
            hami_pool=self.config.hami_pool or None,
            resume_from_s=resume_from,
            fence=record.fence,
        )
        record.member_job = manifest["metadata"]["name"]
        record.reason = "Dispatched"
        record.message = (
            f"dispatched to {start.cluster} ({start.gpu_type}, "
            f"node {', '.join(sorted(set(start.nodes)))}); predicted "
            f"{human_duration(record.predicted_runtime_s)}"
        )
        if resume_from is not None:
            record.message += (
                f"; resumes from its checkpoint at {human_duration(resume_from) or '0s'}"
                f" (attempt {attempt}, after {record.preemptions} preemption(s))"
            )
        if self.config.dry_run:
            return
        task = asyncio.get_running_loop().create_task(
            self._create(record, member, manifest, attempt)
        )
        self._inflight[record.key] = task
        task.add_done_callback(lambda done: self._landed(record.key, done))

    def _landed(self, key: str, task: asyncio.Task[None]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        self._yield_to_creates()

    def _yield_to_creates(self) -> None:
        """A backlog of member Job creates goes before hub status writes and Events."""
        if len(self._inflight) >= BURST_STARTS:
            self.hub_writes.yield_to(time.monotonic() + BURST_YIELD_S)

    async def _create(
        self, record: Record, member: Member, manifest: Mapping[str, Any], attempt: int
    ) -> None:
        """Create the member Job of a dispatched record; on failure put it back in the queue."""
        name = manifest["metadata"]["name"]

        def superseded() -> bool:  # requeued, preempted, suspended or deleted meanwhile
            return (
                self.store.records.get(record.key) is not record
                or record.attempts != attempt
                or record.member_job != name
            )

        try:
            if not leading():
                raise RuntimeError("this replica is no longer the leader")
            uid = await self.call(member.create_job, manifest)
        except Exception as err:
            if superseded():
                return  # nothing of ours exists
            self.observer.dispatch_failed(member.name)
            why = error_line(err)
            log.warning("dispatch of %s failed: %s", record.key, why)
            if refused(err):
                # The member refuses this Job as it is: the attempt counts and fails (retried
                # with back-off, then Failed), and it holds no GPUs or quota meanwhile.
                record.member_job = ""  # nothing was created
                self._attempt_failed(record, f"{member.name} refused its Job: {why}")
                return
            # Unreachable, throttled or busy: back in the queue, the attempt not counted.
            record.attempts = attempt - 1
            record.phase = k.PHASE_QUEUED
            record.reason = "DispatchFailed"
            record.message = f"could not create the Job on {member.name}: {why}"
            self._clear_placement(record)
            self._event(record, "DispatchFailed", record.message, warning=True)
            self._write_soon(record)
            return
        if superseded():
            log.info("member Job %s/%s outlived its dispatch: deleting it", member.name, name)
            await self.call(_quiet, member.delete_job, name)
            return
        self.observer.dispatched(record)
        self.calibrator.started(record.key, self.clock())
        self._event(record, "Dispatched", record.message)
        if record.preemptions:
            self._event(record, "Resumed", record.message)
        self._write_soon(record)
        existing = member.jobs.get(name)
        if not uid and existing is not None:
            # It existed already (made before a crash): its watch events may all be past,
            # so take its state from the mirror now or a finished Job would never be seen.
            self._follow(member, "MODIFIED", existing)

    def _requeue_uncreated(self) -> None:
        """After a restart: a record whose status says Dispatched but whose member Job the
        (synced) member does not have was cut off between status write and create."""
        mirrors = {name: m.jobs for name, m in self.members.items() if m.synced()}
        for record in uncreated(self.store.active(), mirrors):
            record.phase = k.PHASE_QUEUED
            record.reason = "MemberJobMissing"
            record.message = (
                f"member Job {record.member_job} is not on {record.cluster} (the operator "
                "stopped before creating it, or it was deleted meanwhile): queued again"
            )
            log.warning("%s: %s", record.key, record.message)
            self._event(record, "Requeued", record.message, warning=True)
            self._clear_placement(record)
            self._write_soon(record)

    # -- status --------------------------------------------------------------------------------
    def render_status(self, record: Record) -> dict[str, Any]:
        """The status the AIJob should have now (:func:`cpn.runtime.status.render_status`)."""
        status, record.refresh_by_s = render_status(
            record, self.clock(), self._member_namespace(record.cluster)
        )
        return status

    def _member_namespace(self, cluster: str) -> str:
        member = self.members.get(cluster)
        return member.spec.namespace if member else ""

    def _write_soon(self, record: Record) -> None:
        self.writes.add(record.key)

    async def _write_worker(self) -> None:
        """Take the next due status (or Event) from the queue and write it, paced."""
        loop = asyncio.get_running_loop()
        while True:
            kind, item = await self.writes.get()
            try:
                await self.hub_writes.take()
                if kind == "status":
                    record = self.store.records.get(item)
                    if record is not None:
                        await self._write_status(record)
                else:
                    await loop.run_in_executor(self.write_pool, post_event, self.hub, *item)
            except Exception:
                log.exception("hub write failed")
            finally:
                if kind == "status":
                    self.writes.done(item)

    async def _write_status(self, record: Record) -> None:
        """Merge-patch the AIJob's status with what changed since the last write."""
        if record.deleting or record.key not in self.store.records:
            return
        if record.key in self._inflight:
            # Its create first (it queues the write when it lands); but the hub must not
            # show it at a place in the queue the others have been renumbered around.
            status = self._starting(record)
            if status is None:
                return
        else:
            status = self.render_status(record)
            record.written_sig = _signature(record)
            record.written_at = time.monotonic()
        patch = merge_patch(unpack(record.written), status)
        if not patch:
            return
        record.written = Packed(status)
        self.observer.metrics.status_writes.inc()
        try:
            await asyncio.get_running_loop().run_in_executor(
                self.write_pool,
                _patch_status,
                self.custom,
                record.namespace,
                record.name,
                patch,
            )
        except ApiException as err:
            record.written, record.written_sig = {}, None
            if err.status != 404:
                log.warning("status of %s not written: %s", record.key, err.reason)
        except Exception as err:  # the hub is unreachable: the next cycle writes it again
            record.written, record.written_sig = {}, None
            log.warning("status of %s not written: %s", record.key, err)

    def _starting(self, record: Record) -> dict[str, Any] | None:
        """The status of a started job whose member Job is being created, if the hub still
        shows it at a place in the queue: still Queued (its Job does not exist yet),
        without that place, its start imminent."""
        written = unpack(record.written)
        if written.get("position") is None:
            return None
        message = f"placed on {record.cluster} ({record.gpu_type}); creating its Job there"
        status = {
            key: value
            for key, value in written.items()
            if key not in {"position", "estimatedStart", "estimatedStartRange", "conditions"}
        }
        status.update(reason="Starting", message=message, eta=IMMINENT)
        status["conditions"] = [
            c
            if c.get("type") != k.COND_ADMITTED
            else condition(
                k.COND_ADMITTED,
                False,
                "Starting",
                message,
                generation=record.generation,
                now_s=self.clock(),
                previous=written.get("conditions") or (),
            )
            for c in written.get("conditions") or ()
        ]
        return status

    def _write_all_soon(self) -> None:
        """:meth:`write_all` in the background (the next cycle need not wait for it)."""
        if self._writer is not None and not self._writer.done():
            self._write_again = True
            return
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    async def _write_loop(self) -> None:
        while True:
            self._write_again = False
            try:
                await self.write_all()
            except Exception:
                log.exception("status writes failed; retried after the next cycle")
            if not self._write_again or self._stopping:
                return

    async def write_all(self) -> None:
        """Write every AIJob whose status changed in substance; changes only to position,
        score, ETA or the wait message are written at most every :meth:`volatile_period_s`
        per AIJob (with thousands waiting they change for all of them every cycle)."""
        now, wall = time.monotonic(), self.clock()
        period = self.volatile_period_s()
        due = [
            r
            for r in list(self.store.records.values())
            if r.written_sig != _signature(r)
            or now - r.written_at >= period
            or (r.refresh_by_s is not None and wall >= r.refresh_by_s)
        ]
        for record in due:
            record.refresh_by_s = None  # its write renders it again
            self._write_soon(record)
        for name in list(self.members):
            await self.write_member_status(name)

    def volatile_period_s(self) -> float:
        """Seconds between writes of an AIJob's position, score and ETA alone: 30 s, longer
        with a long queue (about VOLATILE_WRITES_PER_S such writes per second in all)."""
        waiting = sum(1 for r in self.store.records.values() if not r.active and not r.finished)
        return max(VOLATILE_WRITE_S, waiting / VOLATILE_WRITES_PER_S)

    async def write_member_status(self, name: str, body: Mapping[str, Any] | None = None) -> None:
        ready, why = self.member_status.get(name, (False, "not probed yet"))
        # Conditions keep their lastTransitionTime while their status holds.
        written = self._member_written.get(("member", name)) or (body or {}).get("status") or {}
        previous = written.get("conditions") or ()
        member = self.members.get(name)
        status: dict[str, Any] = {"lastProbeTime": rfc3339(self.clock())}
        if member is not None:
            view = self._views.get(name)  # as the last cycle saw it
            if view is None:
                usage = self.store.usage_by_node()
                ours = {n: u for (c, n), u in usage.items() if c == name}
                view = member.cluster(ours, ready=ready)
            types: dict[str, list[float]] = {}
            for node in view.nodes:
                row = types.setdefault(node.gpu_type, [0, 0.0, 0.0])
                row[0] += 1
                row[1] += node.gpus
                row[2] += max(node.free_gpus, 0.0)
            status["inventory"] = [
                {"gpuType": t, "nodes": int(r[0]), "gpusTotal": r[1], "gpusFree": r[2]}
                for t, r in sorted(types.items())
            ]
            status["gpusTotal"] = sum(r[1] for r in types.values())
            status["gpusFree"] = sum(r[2] for r in types.values())
            status["nodes"] = len(view.nodes)
            status["types"] = ",".join(sorted(types))
        source = self.metrics.get(name)
        conditions_extra = []
        if source is not None:
            fresh, why_metrics = source.fresh(self.clock())
            status["metrics"] = {"fresh": fresh, "message": why_metrics}
            conditions_extra.append(
                condition(
                    k.COND_METRICS,
                    fresh,
                    "Fresh" if fresh else "Degraded",
                    why_metrics
                    if fresh
                    else f"{why_metrics}; scheduling uses the API's accounting only",
                    generation=0,
                    now_s=self.clock(),
                    previous=previous,
                )
            )
        status["conditions"] = [
            condition(
                k.COND_READY,
                ready,
                "Reachable" if ready else "Unreachable",
                why or "API answers",
                generation=0,
                now_s=self.clock(),
                previous=previous,
            ),
            *conditions_extra,
        ]
        key = ("member", name)
        old = self._member_written.get(key, {})
        comparable = {k_: v for k_, v in status.items() if k_ != "lastProbeTime"}
        if old == comparable:
            return
        self._member_written[key] = comparable
        try:
            await self.call(
                self.custom.patch_cluster_custom_object_status,
                k.GROUP,
                k.VERSION,
                k.MEMBER_PLURAL,
                name,
                {"status": status},
            )
        except Exception as err:  # ApiException or the hub unreachable: retried next cycle
            self._member_written.pop(key, None)
            log.warning("status of member %s not written: %s", name, err)

    def _post_event(
        self, body: Mapping[str, Any], reason: str, message: str, warning: bool
    ) -> None:
        self.writes.add_event((body, reason, message, warning))

    def _event(self, record: Record, reason: str, message: str, warning: bool = False) -> None:
        body = {"apiVersion": f"{k.GROUP}/{k.VERSION}", "kind": "AIJob", **record.body}
        try:
            self.post_event(body, reason, message, warning)
        except Exception:  # events are best effort
            log.debug("event not posted", exc_info=True)

    # -- garbage collection -------------------------------------------------------------------
    async def sweep(self) -> int:
        """Delete member Jobs whose AIJob is gone or whose attempt is not the live one (only
        once the AIJobs are listed: before, every member Job would look orphaned)."""
        deleted = 0
        if not self.aijobs_listed:
            return 0
        for member in list(self.members.values()):
            # Not a member that stopped answering: its mirror is old and a delete would
            # hang there, holding up the sweep of the others (it is swept once it answers).
            silent = self.member_health(member.name, time.monotonic()).since_s is not None
            if not member.synced() or silent:
                continue
            for name, job in list(member.jobs.items()):
                # Adopt first: a Job created just before a crash, whose Dispatched status
                # never landed, belongs to a record that still reads Queued.
                self._follow(member, "MODIFIED", job)
                labels = (job.get("metadata") or {}).get("labels") or {}
                record = self.store.by_uid(labels.get(k.LABEL_UID, ""))
                attempt = int(labels.get(k.LABEL_ATTEMPT, "0") or 0)
                why = why_stale(record, member.name, name, attempt)
                if why is None:
                    continue
                log.info("deleting member Job %s/%s: %s", member.name, name, why)
                await self.call(_quiet, member.delete_job, name)
                deleted += 1
        return deleted

    async def stop(self) -> None:
        self._stopping = True
        self.kick()
        for task in self._write_workers:
            task.cancel()
        self.observer.stop()
        for member in self.members.values():
            member.stop()
        for informer in [self._policy_informer, *self._hub_informers]:
            if informer is not None:
                informer.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.write_pool.shutdown(wait=False, cancel_futures=True)


def why_stale(record: Record | None, cluster: str, name: str, attempt: int) -> str | None:
    """Why the sweep should delete a member Job, or None to keep it."""
    if record is None:
        return "its AIJob is gone"
    if record.member_job == name and (
        record.finished or (record.active and record.cluster == cluster)
    ):
        return None  # the live attempt, or the one that finished
    if record.phase == k.PHASE_QUEUED and attempt > record.attempts:
        return None  # dispatched but not yet recorded: adopted, or found again by its name
    return f"attempt {attempt} is stale ({record.key} is {record.phase}, attempt {record.attempts})"


def uncreated(records: Iterable[Record], mirrors: Mapping[str, Container[str]]) -> list[Record]:
    """The active records whose member Job is missing from their member's mirror (members
    not in ``mirrors``, not synced, are not judged)."""
    return [
        r
        for r in records
        if r.active and r.cluster in mirrors and r.member_job not in mirrors[r.cluster]
    ]


def _patch_status(custom: Any, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
    response = custom.patch_namespaced_custom_object_status(
        k.GROUP,
        k.VERSION,
        namespace,
        k.AIJOB_PLURAL,
        name,
        {"status": patch},
        _preload_content=False,  # the answer is the whole object: read, not parsed
    )
    response.data  # read it all, so the connection goes back to the pool  # noqa: B018


def _signature(record: Record) -> tuple[Any, ...]:
    """What, when it changes, makes an AIJob's status worth writing at once."""
    hold = record.hold
    return (
        record.phase,
        record.reason,
        record.attempts,
        record.cluster,
        record.member_job,
        record.invalid,
        record.unknown_queue,
        record.generation,
        record.start_s,
        record.finish_s,
        record.not_before_s,
        record.eta_start_s is None,
        record.position,
        record.frees.job_key if record.frees else "",
        hold.level if hold else "",
    )


def _plan_and_explain(
    snapshot: Snapshot,
) -> tuple[CyclePlan, float, dict[str, Choice], dict[str, Frees]]:
    """The cycle's plan, plan_cycle's wall time, and the explanations the status keeps:
    where each start went and the runner-up, which running job frees room for a waiting one."""
    began = time.perf_counter()
    plan = plan_cycle(snapshot)
    wall = time.perf_counter() - began
    waiting = [h.job_key for h in plan.holds if h.reason in _FREED_BY_ENDS]
    return plan, wall, choices(snapshot, plan), first_to_free(snapshot, waiting)


#: Wait reasons that end when running jobs end (not quota, back-off, suspension).
_FREED_BY_ENDS = frozenset(
    {WaitReason.Capacity, WaitReason.Waiting, WaitReason.Priority, WaitReason.Reservation}
)


def _widen_pool(api: client.ApiClient, size: int) -> None:
    """Let ``size`` threads share the client's connections (urllib3 keeps 10 per host by
    default and drops the rest, so bursts opened a new TLS connection per call)."""
    manager = getattr(api.rest_client, "pool_manager", None)
    if manager is not None:
        manager.connection_pool_kw["maxsize"] = max(
            size, manager.connection_pool_kw.get("maxsize") or 0
        )


def _ours(status: Mapping[str, Any], written: Mapping[str, Any]) -> Mapping[str, Any]:
    """What the object's status says of the fields we write (so we diff against the truth)."""
    return Packed(status) if status else written


def _pod_done(obj: Mapping[str, Any] | None) -> bool:
    if obj is None:
        return True
    return (obj.get("status") or {}).get("phase") in {"Succeeded", "Failed"}


def _quiet(fn: Callable[..., None], *args: Any) -> None:
    try:
        fn(*args)
    except Exception as err:  # best effort; the sweep retries
        log.warning("cleanup call failed: %s", err)


def _product_label(member: Member, start: Start) -> str | None:
    for name in start.nodes:
        node = member.nodes.get(name)
        if node is not None:
            labels = (node.get("metadata") or {}).get("labels") or {}
            value = labels.get(k.GPU_PRODUCT_LABEL)
            if value:
                return str(value)
    return None
