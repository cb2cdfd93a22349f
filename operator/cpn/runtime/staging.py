"""Staging: the inputs a start reads copied to its member before its Job is created, the
members' data caches, and the links' bandwidth learned from each copy.

A dispatched start whose member lacks some of the inputs it reads goes ``Staging``
(:func:`~cpn.runtime.stagesteps.staging_begun`): for each input neither there nor being
copied there, a staging Job on the chosen node (:func:`cpn.api.staging.render_staging_job`);
an input already being copied there for another job is waited for (one staging shared). The
record holds its GPUs meanwhile; its member Job is created once every input it reads is
present (:func:`~cpn.runtime.stagesteps.staging_done`).

A staging Job that succeeded marks its input present in the member's cache (never before),
its (bytes, seconds) teach the link source -> member (:class:`cpn.core.staging.Links`),
and it is deleted; for an input declared without a size, its bytes are read first from its
pod's termination message (the copy program's report) and kept as that input's size from
that source (:attr:`Staging.sizes`: the cache entry, the link's measurement and the
cycle's later transfer estimates use it). One that failed is deleted and created again
after ``data.staging_backoff_s`` (doubling per attempt), up to ``data.staging_attempts``
in all; then every job waiting for it fails (``StagingFailed``). A member's cache keeps
what the policy's capacity allows (:func:`cpn.core.datacache.evict`, never an input a
placed job reads) and is shown in its MemberCluster status (``status.cache``), which is
also where a restarted operator reads it back (:meth:`Staging.restore`); a staging Job
that succeeded while no operator ran is taken as present when its member's Jobs are
listed.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cpn.api import constants as k
from cpn.api.staging import (
    StagingOrder,
    StagingSeen,
    images_of,
    input_uri,
    read_staging_job,
    render_pull_job,
    render_staging_job,
)
from cpn.core.datacache import capacity_gb, reads_on
from cpn.core.model import Cached, ClusterCache, Job, Start
from cpn.core.staging import Links, copied_bytes, seconds, sized
from cpn.runtime import effects, stagesteps
from cpn.runtime.following import Following
from cpn.runtime.lifecycle import Step
from cpn.runtime.ports import Member, describe
from cpn.runtime.state import RuntimeState, quiet
from cpn.runtime.store import Record

log = logging.getLogger(__name__)
_BYTES_PER_GB = 1e9

Launch = Callable[[Record, Member, Start, effects.CreateJob], None]


@dataclass(slots=True)
class Moving:
    """One input being copied to a member: its staging order (the current attempt's),
    since when (wall), when its next attempt may be created (after a failure) and the
    records waiting for it (by key)."""

    order: StagingOrder
    began_s: float
    job: str = ""
    retry_at_s: float | None = None
    waiting: set[str] = field(default_factory=set)


class Staging:
    """The runtime's stagings and data caches (see the module docstring), on its shared
    ``state``; transitions carried out by ``following``; a record whose inputs are all there
    is handed to ``launch`` (the dispatcher's member Job create)."""

    def __init__(self, state: RuntimeState, following: Following, launch: Launch) -> None:
        self.state = state
        self.following = following
        self.launch = launch
        self.caches: dict[str, dict[str, Cached]] = {}  # member -> ident -> held
        self.moving: dict[tuple[str, str], Moving] = {}  # (member, ident) -> its staging
        self.held: dict[str, tuple[Start, effects.CreateJob, float]] = {}  # key -> its create
        self.links = Links()
        # (source, ident) -> bytes, of inputs declared without a size, as their staging copied
        self.sizes: dict[tuple[str, str], int] = {}
        self.reading: set[tuple[str, str]] = set()  # (member, Job) whose report is being read

    # --- what the cycle sees --------------------------------------------------------

    def bandwidth(self, table: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
        """The members' static link table with every learned link's estimate in place."""
        return self.links.overlay(table)

    def data_cache(self) -> dict[str, ClusterCache]:
        """Each member's cache as the cycle prices it: the inputs present, and those being
        copied there (complete when their staging is predicted to end)."""
        out: dict[str, dict[str, Cached]] = {name: dict(c) for name, c in self.caches.items()}
        for (member, ident), moving in self.moving.items():
            size = moving.order.size_bytes / _BYTES_PER_GB
            ready = moving.began_s + moving.order.predicted_s
            out.setdefault(member, {})[ident] = Cached(
                size_gb=size, last_used_s=moving.began_s, ready_s=ready
            )
        return dict(out)

    def sized(self, job: Job) -> Job:
        """``job`` with the sizes learned for its inputs declared without one."""
        return sized(job, self.sizes)

    # --- a start ----------------------------------------------------------------------

    def begin(
        self, record: Record, member: Member, start: Start, create: effects.CreateJob
    ) -> bool:
        """Stage what ``start`` of ``record`` reads and its member lacks; False (nothing to
        wait for, its inputs marked used) when its member Job may be created now."""
        job = record.job
        reads = reads_on(job, start.cluster) if job is not None else ()
        cache = self.caches.get(start.cluster, {})
        now = self.state.clock.wall()
        waits = tuple(ident for ident in reads if ident not in cache)
        if not waits:
            if reads:
                self.caches[start.cluster] = stagesteps.used(cache, reads, now)
            return False
        assert job is not None
        inputs = {i.ident: i for i in job.inputs}
        started: list[str] = []
        for ident in waits:
            moving = self.moving.get((start.cluster, ident))
            if moving is None:
                wanted = inputs[ident]
                source = wanted.location or ""
                size = round(wanted.size_gb * _BYTES_PER_GB) or self.sizes.get((source, ident), 0)
                gbps = self.links.estimate(
                    source, start.cluster, self._static(source, start.cluster)
                )
                order = StagingOrder(
                    cluster=start.cluster,
                    node=order_node(start),
                    ident=ident,
                    uri=input_uri(record.body, ident),
                    source=source,
                    size_bytes=size,
                    predicted_s=seconds(size, gbps),
                    nonce=secrets.token_hex(3),
                )
                moving = self.moving[(start.cluster, ident)] = Moving(order, began_s=now)
                self._create(member, moving)
                started.append(ident)
            moving.waiting.add(record.key)
        self.held[record.key] = (start, create, now)
        if self.state.store.policy.data.prepull and order_node(start):
            self._prepull(record, member, order_node(start))
        step = stagesteps.staging_begun(record, waits, tuple(started), start.transfer_s)
        self.following.carry_out(record, step)
        return True

    def _prepull(self, record: Record, member: Member, node: str) -> None:
        """Pull the job's images onto ``node`` while its inputs are staged (best effort:
        the member Job pulls them anyway)."""
        images, secrets = images_of(record.body)
        if self.state.config.dry_run:
            return
        for image in images:
            manifest = render_pull_job(
                image,
                node,
                hub=self.state.config.hub,
                namespace=member.spec.namespace,
                pull_secrets=secrets,
            )
            self.state.pool.submit(_pull, member, manifest)

    def _static(self, source: str, member: str) -> float | None:
        spec = self.state.members.get(member)
        table = dict(spec.spec.bandwidth_gbps) if spec is not None else {}
        value = table.get(source)
        if value is None and source in self.state.members:
            value = dict(self.state.members[source].spec.bandwidth_gbps).get(member)
        return value

    def _create(self, member: Member, moving: Moving) -> None:
        manifest = render_staging_job(
            moving.order,
            hub=self.state.config.hub,
            namespace=member.spec.namespace,
            data=self.state.store.policy.data,
        )
        moving.job = manifest["metadata"]["name"]
        moving.retry_at_s = None
        if self.state.config.dry_run:
            return
        asyncio.get_running_loop().create_task(self._create_call(member, moving, manifest))

    async def _create_call(self, member: Member, moving: Moving, manifest: Any) -> None:
        try:
            await self.state.call(member.create_job, manifest)
        except Exception as err:  # noqa: BLE001 - a create that fails counts as a failed attempt
            log.warning("staging Job %s on %s not created: %s", moving.job, member.name, err)
            self._failed(member.name, moving, f"its staging Job was not created: {describe(err)}")

    # --- what the members report ------------------------------------------------------

    def seen(self, member: Member, event: str, job: Mapping[str, Any]) -> None:
        """An event of a staging Job on ``member``."""
        report = read_staging_job(job)
        if report is None:
            return
        moving = self.moving.get((member.name, report.ident))
        ours = moving is not None and moving.job == report.name
        if event == "DELETED":
            if ours and moving is not None and not report.result:
                self._failed(member.name, moving, "its staging Job was deleted")
            return
        unsized = report.size_bytes <= 0 and not self.state.config.dry_run
        known = self.sizes.get((report.source, report.ident))
        if report.result == "Succeeded" and unsized and known:  # e.g. its Job seen again
            report, unsized = replace(report, size_bytes=known), False
        if report.result == "Succeeded" and unsized:
            if (member.name, report.name) not in self.reading:  # its size: from its report
                self.reading.add((member.name, report.name))
                asyncio.get_running_loop().create_task(self._read_size(member, report))
            return
        if report.result == "Succeeded":
            self._succeeded(member, report)
        elif (
            report.result == "Failed" and ours and moving is not None and moving.retry_at_s is None
        ):  # not a failure seen again before its deletion landed (already counted)
            self.state.pool.submit(quiet, member.delete_job, report.name)
            self._failed(member.name, moving, report.message)

    async def _read_size(self, member: Member, report: StagingSeen) -> None:
        """A staging Job of an input declared without a size succeeded: the bytes it copied
        (its pod's termination message) become the input's size, then it counts as any."""
        try:
            messages = await self.state.call(member.termination_messages, report.name)
        except Exception as err:  # noqa: BLE001 - the size stays unknown; the staging counts
            log.warning("staging Job %s on %s: pods not read: %s", report.name, member.name, err)
            messages = []
        finally:
            self.reading.discard((member.name, report.name))
        copied = copied_bytes(messages)
        if copied is not None:
            self.sizes[(report.source, report.ident)] = copied
            report = replace(report, size_bytes=copied)
        else:
            log.warning("staging Job %s on %s reported no size", report.name, member.name)
        self._succeeded(member, report)

    def _succeeded(self, member: Member, report: StagingSeen) -> None:
        """Staging Job ``report`` on ``member`` succeeded: its input present there, its
        link taught, the jobs waiting for it dispatched, the Job deleted."""
        moving = self.moving.get((member.name, report.ident))
        ours = moving is not None and moving.job == report.name
        now = self.state.clock.wall()
        cache = self.caches.get(member.name, {})
        self.caches[member.name] = stagesteps.present(cache, report.ident, report.size_bytes, now)
        if ours and moving is not None:
            took = _took(report.started_s, report.finished_s, moving.began_s, now)
            if self.links.observe(report.source, member.name, report.size_bytes, took):
                log.info(
                    "staging %s to %s: %d bytes in %.1fs (predicted %.1fs)",
                    report.ident,
                    member.name,
                    report.size_bytes,
                    took,
                    report.predicted_s,
                )
            del self.moving[(member.name, report.ident)]
            self._ready(member.name, moving)
        self.state.pool.submit(quiet, member.delete_job, report.name)
        self._evict(member.name)
        self.state.kick()

    def _ready(self, cluster: str, moving: Moving) -> None:
        """Records waiting for ``moving`` whose every input is now there are dispatched."""
        cache = self.caches.get(cluster, {})
        now = self.state.clock.wall()
        for key in sorted(moving.waiting):
            record = self.state.store.records.get(key)
            held = self.held.get(key)
            if record is None or held is None or record.phase != k.PHASE_STAGING:
                self.held.pop(key, None)
                continue
            if any(ident not in cache for ident in record.staging):
                continue
            start, create, since = self.held.pop(key)
            self.caches[cluster] = stagesteps.used(self.caches[cluster], record.staging, now)
            step = stagesteps.staging_done(record, now - since, now, create)
            self._carry_out(record, step, start)

    def _carry_out(self, record: Record, step: Step, start: Start) -> None:
        creates = [e for e in step.effects if isinstance(e, effects.CreateJob)]
        others = tuple(e for e in step.effects if not isinstance(e, effects.CreateJob))
        self.following.carry_out(record, Step(step.record, others))
        member = self.state.members.get(start.cluster)
        for create in creates:
            if member is not None:
                self.launch(record, member, start, create)

    def _failed(self, cluster: str, moving: Moving, why: str) -> None:
        """The current attempt of ``moving`` failed: again after the back-off, or every
        record waiting for it fails."""
        data = self.state.store.policy.data
        order = moving.order
        now = self.state.clock.wall()
        waiting = [self.state.store.records.get(key) for key in sorted(moving.waiting)]
        live = [r for r in waiting if r is not None and r.phase == k.PHASE_STAGING]
        if order.attempt < data.staging_attempts and live:
            delay = data.staging_backoff_s * (2 ** (order.attempt - 1))
            moving.retry_at_s = now + delay
            for record in live:
                step = stagesteps.staging_retrying(record, order.ident, order.attempt, why, delay)
                self.following.carry_out(record, step)
            return
        self.moving.pop((cluster, order.ident), None)
        for record in live:
            self.held.pop(record.key, None)
            step = stagesteps.staging_failed(record, order.ident, order.attempt, why, now)
            self.following.carry_out(record, step)

    # --- every cycle ------------------------------------------------------------------

    def tick(self) -> None:
        """Retries whose back-off is over are created; records no longer staging (requeued,
        suspended, deleted) stop waiting; a staging no record waits for any more runs on
        (its input will be there for the next job)."""
        now = self.state.clock.wall()
        for key in list(self.held):
            record = self.state.store.records.get(key)
            if record is None or record.phase != k.PHASE_STAGING:
                del self.held[key]
        for (cluster, _), moving in list(self.moving.items()):
            moving.waiting &= set(self.held)
            if moving.retry_at_s is None or moving.retry_at_s > now:
                continue
            member = self.state.members.get(cluster)
            if member is None:
                continue
            moving.order = replace(moving.order, attempt=moving.order.attempt + 1)
            moving.began_s = now
            self._create(member, moving)
        for cluster in list(self.caches):
            self._evict(cluster)

    def next_wake_s(self, now_s: float) -> float | None:
        """Seconds until the next staging retry is due (None: none is)."""
        due = [m.retry_at_s for m in self.moving.values() if m.retry_at_s is not None]
        return max(0.0, min(due) - now_s) if due else None

    def _evict(self, cluster: str) -> None:
        cache = self.caches.get(cluster)
        if not cache:
            return
        needed = {
            ident
            for record in self.state.store.active()
            if record.cluster == cluster and record.job is not None
            for ident in reads_on(record.job, cluster)
        }
        capacity = capacity_gb(self.state.store.policy, cluster)
        self.caches[cluster], gone = stagesteps.kept(cache, capacity, needed)
        if gone:
            log.info("cache of %s: evicted %s", cluster, ", ".join(gone))

    # --- status and restart -----------------------------------------------------------

    def member_status(self, cluster: str) -> dict[str, Any]:
        """``status.cache`` of member ``cluster``, with its learned inbound links."""
        capacity = capacity_gb(self.state.store.policy, cluster)
        status = stagesteps.cache_status(self.caches.get(cluster, {}), capacity)
        links = [
            {"from": source, "gbps": round(value, 3), "stagings": count}
            for source, member, value, count in self.links.rows()
            if member == cluster
        ]
        status["links"] = links or None
        return status

    def restore(self, cluster: str, status: Mapping[str, Any] | None) -> None:
        """A member's cache as its MemberCluster status listed it (at start-up)."""
        found = stagesteps.cache_from_status(status or {})
        if found and cluster not in self.caches:
            self.caches[cluster] = found


def _pull(member: Member, manifest: Mapping[str, Any]) -> None:
    try:
        member.create_job(manifest)
    except Exception as err:  # noqa: BLE001 - best effort: the member Job pulls it anyway
        log.info("pre-pull Job not created on %s: %s", member.name, describe(err))


def order_node(start: Start) -> str:
    """The node a start's inputs are staged onto (its first)."""
    return start.nodes[0] if start.nodes else ""


def _took(started: float | None, finished: float | None, began: float, now: float) -> float:
    """A staging's seconds: its Job's start to completion when both are known, else from
    when cpn created it until now."""
    if started is not None and finished is not None and finished >= started:
        return finished - started
    return max(0.0, now - began)
