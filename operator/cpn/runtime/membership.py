"""Member clusters: connecting to each (through the hub port), their watch and probe
events, their health, and the core view of their nodes a cycle plans on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from cpn.api import constants as k
from cpn.core.health import Health, Probe, Probes, health
from cpn.runtime import lifecycle
from cpn.runtime.following import Following, why_stale
from cpn.runtime.gpuusage import job_usage
from cpn.runtime.hubwrites import HubWrites
from cpn.runtime.ports import Member, MemberUnusable, MetricsSource, describe
from cpn.runtime.state import RuntimeState, quiet

log = logging.getLogger(__name__)

#: Seconds the deletion of a removed member's Job may take before it is given up on.
REMOVE_DELETE_S = 10.0


class Membership:
    """Members: connected, watched, probed, viewed, swept; on the runtime's shared
    ``state``, writing MemberCluster statuses through ``writer`` and handing member Job
    events and record transitions to ``following``."""

    def __init__(self, state: RuntimeState, writer: HubWrites, following: Following) -> None:
        self.state = state
        self.writer = writer
        self.following = following
        self._probe_ready: dict[str, bool] = {}  # the verdict the last probe result gave
        # set by the engine: a member's cache read back from its status (runtime/staging.py)
        self.restore_cache: Callable[[str, Any], None] | None = None

    async def member_event(self, event: str, body: Mapping[str, Any]) -> None:
        """A MemberCluster was added, changed or removed."""
        name = body["metadata"]["name"]
        if event == "DELETED":
            await self.member_removed(name)
        old = self.state.members.pop(name, None)
        if old is not None:
            old.stop()
        if event == "DELETED":
            self.state.member_status.pop(name, None)
            self.state.probes.pop(name, None)
            self._probe_ready.pop(name, None)
            self.state.not_ready_since.pop(name, None)
            self.state.kick()
            return
        spec = body.get("spec") or {}
        if self.restore_cache is not None:  # its cache as its status listed it (staging.py)
            self.restore_cache(name, body.get("status"))
        try:
            member = await self.state.call(
                self.state.hub.connect_member,
                name,
                spec,
                self._member_callback,
                self._probe_callback,
            )
        except MemberUnusable as err:
            self.state.member_status[name] = (False, f"kubeconfig: {err}")
            await self.writer.write_member_status(name, body)
            return
        prometheus_url = spec.get("prometheusURL") or ""
        if prometheus_url:
            self.state.metrics[name] = self.state.hub.metrics_source(
                prometheus_url, self.state.config.metrics_max_age_s
            )
        else:
            self.state.metrics.pop(name, None)
        self.state.members[name] = member
        member.start()
        self.state.kick()

    async def member_removed(self, name: str) -> None:
        """Its MemberCluster is deleted: every job placed there is requeued at once (the
        admin's removal confirms the member gone, under either ``retry.member_lost``), then
        their member Jobs are deleted while the member still answers; one that cannot be
        is named in a Warning Event ``MemberJobNotDeleted`` (it may still run there)."""
        member = self.state.members.get(name)
        records = [r for r in self.state.store.active() if r.cluster == name]
        if not records:
            return
        cannot = ""
        if member is None:
            cannot = f"cpn holds no connection to {name}"
        elif self.member_health(name, self.state.clock.monotonic()).since_s is not None:
            cannot = f"{name} does not answer"
        # Requeued before any delete is sent: the Job's deletion, seen by watch, must not
        # pass for the failure of a live attempt.
        jobs = [(record, record.member_job) for record in records]
        for record, _ in jobs:
            self.following.carry_out(record, lifecycle.member_removed(record, name, cannot))
        log.warning("member %s removed: %d jobs placed there requeued", name, len(jobs))
        if member is None or cannot:
            return

        async def delete(job: str) -> str:
            try:
                await asyncio.wait_for(self.state.call(member.delete_job, job), REMOVE_DELETE_S)
            except Exception as err:  # noqa: BLE001 - TimeoutError included: told in an Event, not raised
                return describe(err) or "no answer"
            return ""

        failed = await asyncio.gather(*(delete(job) for _, job in jobs))
        for (record, job), why in zip(jobs, failed, strict=True):
            if why:
                message = (
                    f"member Job {job} on the removed member {name} could not be deleted "
                    f"({why}): it may still run there as well"
                )
                self.state.event(record, "MemberJobNotDeleted", message, warning=True)

    def _member_callback(
        self, member: str, kind: str, event: str, obj: Mapping[str, Any] | None
    ) -> None:
        self.state.threadsafe(self._on_member, member, kind, event, obj)

    def _on_member(
        self, member_name: str, kind: str, event: str, obj: Mapping[str, Any] | None
    ) -> None:
        member = self.state.members.get(member_name)
        if member is None:
            return
        if kind == "jobs" and obj is not None and event in {"ADDED", "MODIFIED", "DELETED"}:
            self.following.follow(member, event, obj)
        elif kind == "jobs" and event == "LIST" and obj is not None:
            for item in obj.get("items") or []:
                self.following.follow(member, "ADDED", item)
            if self.state.loop is not None:  # back after an outage: remove stale attempts at once
                self.state.loop.create_task(self.sweep())
        if kind == "jobs":
            # A Job that ends frees GPUs: follow kicks then. Its other changes (created,
            # ready) free nothing, and a burst of dispatches would otherwise cycle per Job.
            if event in {"LIST", "SYNCED", "ERROR"}:
                self.state.kick()
        elif kind != "pods" or event in {"LIST", "SYNCED", "DELETED", "ERROR"} or _pod_done(obj):
            self.state.kick()

    def _probe_callback(self, member: str, probe: Probe) -> None:
        self.state.threadsafe(self._on_probe, member, probe)

    def _on_probe(self, name: str, probe: Probe) -> None:
        """A probe's result: a cycle at once when it turns the member's verdict, or when the
        member's jobs are due to be requeued (the cycle writes and requeues)."""
        if name not in self.state.members:
            return
        self.state.probes[name] = self.state.probes.get(name, Probes()).add(probe)
        now = self.state.clock.monotonic()
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
            self.state.kick()
        elif (
            (since := self.state.not_ready_since.get(name)) is not None
            and now - since >= self.state.member_timeout()[0]
            and any(r.cluster == name for r in self.state.store.active())
        ):
            self.state.kick()

    def member_health(self, name: str, now: float) -> Health:
        """What the member's probes say at ``now`` (monotonic seconds)."""
        member = self.state.members.get(name)
        overdue = member.probe_overdue_s if member is not None else 0.0
        return health(
            self.state.probes.get(name, Probes()),
            now,
            grace_s=self.state.config.member_grace_s,
            overdue_s=overdue,
        )

    def _member_ready(self, member: Member, now: float) -> tuple[bool, str]:
        """Ready when its probes answer and its watches run (else why not: the probe's
        error, then the failing watch's). Not ready since the first view that found it so:
        the cycle that writes its ``Ready=False``, where the member timeout counts from."""
        verdict = self.member_health(member.name, now)
        ready, why = member.ready(self.state.config.member_grace_s)
        if not verdict.ready:
            why = verdict.message if ready else f"{verdict.message}; {why}"
            ready = False
        if ready:
            self.state.not_ready_since.pop(member.name, None)
        else:
            self.state.not_ready_since.setdefault(member.name, now)
        return ready, why

    async def connect_members(self) -> None:
        """Connect every registered member before the first cycle, so that member Jobs
        created just before a restart are seen (and adopted) before anything is placed.
        A job placed on a member whose MemberCluster was deleted while the operator was
        down is requeued as if the deletion had been seen (the AIJobs are listed by now)."""
        registered = set()
        for body in await self.state.call(self.state.hub.list_members):
            name = body["metadata"]["name"]
            registered.add(name)
            if name not in self.state.members:
                self.state.member_specs[name] = body.get("spec")
                await self.member_event("ADDED", body)
        for record in self.state.store.active():
            if record.cluster and record.cluster not in registered:
                why = f"cpn holds no connection to {record.cluster}"
                self.following.carry_out(
                    record, lifecycle.member_removed(record, record.cluster, why)
                )
        # A member connected by its own handler before the AIJobs were listed had its Jobs
        # listed when no record existed to match them: follow its mirror again now.
        for member in list(self.state.members.values()):
            for job in list(member.jobs.values()):
                self.following.follow(member, "ADDED", job)

    def clusters_view(self) -> tuple[list[Any], dict[str, dict[str, float]]]:
        """Core clusters from the members, and the bandwidth table."""
        usage = self.state.store.usage_by_node()
        clusters = []
        bandwidth: dict[str, dict[str, float]] = {}
        now = self.state.clock.monotonic()
        started: dict[str, dict[str, float]] = {}  # member -> node -> latest start on it
        for record in self.state.store.active():
            began = record.start_s or record.dispatch_s
            on = started.setdefault(record.cluster, {})
            for node in record.nodes:
                on[node] = max(on.get(node, 0.0), began)
        for name, member in sorted(self.state.members.items()):
            ready, why = self._member_ready(member, now)
            self.state.member_status[name] = (ready, why)
            ours = {node: u for (cluster, node), u in usage.items() if cluster == name}
            util = self._cpu_util(name, started.get(name, {}))
            domains = self.state.store.policy.domains
            clusters.append(member.cluster(ours, ready=ready, cpu_util=util, domains=domains))
            bandwidth[name] = dict(member.spec.bandwidth_gbps)
        self.state.views = {c.name: c for c in clusters}
        self.state.store.set_gpu_types(n.gpu_type for c in clusters for n in c.nodes)
        return clusters, bandwidth

    def _cpu_util(self, member: str, started: Mapping[str, float]) -> dict[str, float]:
        """Trusted node CPU utilisation of a member (samples older than the latest start of
        a cpn job on the node left out)."""
        source = self.state.metrics.get(member)
        if source is None:
            return {}
        return source.cpu_util(self.state.clock.wall(), started)

    async def metrics_loop(self, period_s: float = 10.0) -> None:
        """Read every member's Prometheus periodically (Prometheus is pull-based), then the
        GPU usage of the jobs running there."""
        while not self.state.stopping:
            for name, source in list(self.state.metrics.items()):
                await self.state.call(source.refresh)
                self.read_gpu_usage(name, source)
            await asyncio.sleep(period_s)

    def read_gpu_usage(self, member: str, source: MetricsSource) -> None:
        """Each running job of ``member`` takes its GPUs' latest reading (a job none is
        reported for keeps its last one: written with the time it was read)."""
        running = [
            r
            for r in self.state.store.active()
            if r.cluster == member and r.phase == k.PHASE_RUNNING and r.member_job
        ]
        if not running:
            return
        connected = self.state.members.get(member)
        if connected is None:
            return
        pods = source.pod_gpus(self.state.clock.wall())
        namespace = connected.spec.namespace
        for record in running:
            usage = job_usage(pods, namespace, record.member_job)
            if usage is not None:
                record.gpu_usage = usage

    async def sweep(self) -> int:
        """Delete member Jobs whose AIJob is gone or whose attempt is not the live one (only
        once the AIJobs are listed: before, every member Job would look orphaned)."""
        deleted = 0
        if not self.state.aijobs_listed:
            return 0
        for member in list(self.state.members.values()):
            # Not a member that stopped answering: its mirror is old and a delete would
            # hang there, holding up the sweep of the others (it is swept once it answers).
            silent = (
                self.member_health(member.name, self.state.clock.monotonic()).since_s is not None
            )
            if not member.synced() or silent:
                continue
            for name, job in list(member.jobs.items()):
                # Adopt first: a Job created just before a crash, whose Dispatched status
                # never landed, belongs to a record that still reads Queued.
                self.following.follow(member, "MODIFIED", job)
                labels = (job.get("metadata") or {}).get("labels") or {}
                if k.LABEL_BENCHMARK in labels:
                    continue  # a GPUBenchmark's Job: it ends by itself and is kept
                if k.LABEL_STAGING in labels or k.LABEL_PREPULL in labels:
                    continue  # a staging or pre-pull Job: runtime/staging.py, Kubernetes' TTL
                record = self.state.store.by_uid(labels.get(k.LABEL_UID, ""))
                attempt = int(labels.get(k.LABEL_ATTEMPT, "0") or 0)
                why = why_stale(record, member.name, name, attempt)
                if why is None:
                    continue
                log.info("deleting member Job %s/%s: %s", member.name, name, why)
                await self.state.call(quiet, member.delete_job, name)
                deleted += 1
        return deleted


def _pod_done(obj: Mapping[str, Any] | None) -> bool:
    if obj is None:
        return True
    return (obj.get("status") or {}).get("phase") in {"Succeeded", "Failed"}
