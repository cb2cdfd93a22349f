"""Carrying out a cycle's plan: preemptions, dispatches (the record assumed, then its member
Job created in the background), every hold explained, the queues numbered; and requeueing
what a lost member or a crash left behind.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cpn.api import constants as k
from cpn.api.jobs import render_job
from cpn.api.status import queue_positions
from cpn.core.explain import Choice, Frees
from cpn.core.fence import holds_for_member
from cpn.core.model import CyclePlan, Snapshot, Start, WaitReason
from cpn.core.policy import DataPolicy
from cpn.runtime import effects, lifecycle
from cpn.runtime.following import Following, uncreated
from cpn.runtime.hubwrites import HubWrites
from cpn.runtime.ports import CallFailed, Member, describe
from cpn.runtime.state import RuntimeState, quiet
from cpn.runtime.status import queue_of
from cpn.runtime.store import Record, preempted

if TYPE_CHECKING:
    from cpn.runtime.staging import Staging

log = logging.getLogger(__name__)

#: This many member Job creates in flight are a burst: until a second after it, hub writes
#: run at a tenth of their pace (submissions and dispatches first; statuses merge meanwhile).
BURST_STARTS = 10
BURST_YIELD_S = 1.0


class Dispatching:
    """A plan carried out: preempt, dispatch, explain, number; and what a lost member or a
    crash left behind requeued. On the runtime's shared ``state`` (member Job creates in
    flight are in ``state.inflight``); transitions go through ``following``, the hub's
    statuses are written by ``writer``."""

    def __init__(self, state: RuntimeState, writer: HubWrites, following: Following) -> None:
        self.state = state
        self.writer = writer
        self.following = following
        self._held: set[tuple[str, str]] = set()  # (record, member) held for a lost member
        # set by the engine: inputs to copy first (runtime/staging.py)
        self.staging: Staging | None = None

    def requeue_lost(self) -> None:
        """Jobs on a member not ready for the member timeout (the policy's, read now) go
        back to the queue."""
        now = self.state.clock.monotonic()
        timeout_s, source = self.state.member_timeout()
        self._held = {held for held in self._held if held[1] in self.state.not_ready_since}
        for name, since in list(self.state.not_ready_since.items()):
            if now - since < timeout_s:
                continue
            for record in self.state.store.active():
                if record.cluster == name and not (
                    name in self.state.members and self._held_for_member(record, name, timeout_s)
                ):
                    step = lifecycle.member_lost(record, name, timeout_s, source)
                    self.following.carry_out(record, step)

    def _held_for_member(self, record: Record, name: str, timeout_s: float) -> bool:
        """Under ``retry.member_lost: at-most-once`` a job that does not checkpoint waits
        on its lost member until it answers again or is removed (an Event says so once)."""
        job = record.job
        if not holds_for_member(
            self.state.store.policy.retry.member_lost, bool(job and job.checkpoint)
        ):
            return False
        if (record.key, name) not in self._held:
            self._held.add((record.key, name))
            message = (
                f"member {name} not ready for {timeout_s:.0f}s: the job "
                "stays there, not requeued, until it answers again or is removed (policy "
                "retry.member_lost: at-most-once; the job does not checkpoint)"
            )
            self.state.event(record, "MemberLost", message, warning=True)
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
            record = self.state.store.records.get(preempt.job_key)
            if record is not None:
                await self._preempt(record, preempt.reason)
        for start in plan.starts:
            record = self.state.store.records.get(start.job_key)
            if record is not None:
                self._dispatch(record, start, chosen.get(start.job_key))
        self._yield_to_creates()
        for hold in plan.holds:
            record = self.state.store.records.get(hold.job_key)
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
                # until the next projection: the reservation's start and finish, together
                record.eta_start_s = hold.reserved_start_s
                record.eta_finish_s = hold.reserved_end_s
            if previous != record.reason and hold.reason in {
                WaitReason.Infeasible,
                WaitReason.Quota,
            }:
                self.state.event(
                    record,
                    record.reason,
                    hold.message,
                    warning=hold.reason == WaitReason.Infeasible,
                )
        self._number_queues(plan)
        for record in [r for r in self.state.store.records.values() if r.phase == k.PHASE_INVALID]:
            if record.reason != "InvalidSpec":
                record.reason = "InvalidSpec"
                record.message = record.invalid
                self.state.event(record, "InvalidSpec", record.invalid, warning=True)
        self.writer.write_all_soon()

    async def _preempt(self, record: Record, why: str) -> None:
        """Stop a running job the plan preempts (``why``: for whom and by which rule): book
        its service and checkpoint, delete its member Job and requeue it; it is not placed
        again before that Job is gone (one member Job at a time, see :meth:`drained`)."""
        inflight = self.state.inflight.get(record.key)
        if inflight is not None:
            await inflight  # delete what the create made, not before it lands
        if not record.active:
            return
        member = self.state.members.get(record.cluster)
        lost = preempted(record, self.state.clock.wall(), why, self.state.store.policy.preemption)
        if member is not None and record.member_job:
            record.draining = (member.name, record.member_job)
            await self.state.call(quiet, member.delete_job, record.member_job)
        self.following.carry_out(record, lifecycle.preempted(record, why, lost))

    def drained(self) -> None:
        """Preempted records whose old member Job is gone (or whose member is) may start."""
        for record in self.state.store.records.values():
            if record.draining is None:
                continue
            cluster, name = record.draining
            member = self.state.members.get(cluster)
            if member is None or (member.synced() and name not in member.jobs):
                record.draining = None

    def _number_queues(self, plan: CyclePlan) -> None:
        """Positions 1..n per queue among the jobs still waiting, in the cycle's order (the
        plan's ranks also count this cycle's starts, and rank all queues together)."""
        order = []
        for hold in plan.holds:  # best first
            record = self.state.store.records.get(hold.job_key)
            if hold.position and record is not None and record.phase == k.PHASE_QUEUED:
                order.append((record.key, queue_of(record)))
        places = queue_positions(order)
        for record in self.state.store.records.values():
            record.position = places.get(record.key, 0)

    def _dispatch(self, record: Record, start: Start, choice: Choice | None = None) -> None:
        """Assume the start (the record holds its GPUs from now: :func:`lifecycle.dispatched`)
        and launch the create."""
        member = self.state.members.get(start.cluster)
        if member is None:
            return
        step = lifecycle.dispatched(
            record,
            start,
            choice,
            self.state.clock.wall(),
            nonce=secrets.token_hex(4),
            restart_cost_s=self.state.store.policy.preemption.restart_cost_s,
            domain=self.state.domain_at(start.cluster, start.nodes),
        )
        creates = [e for e in step.effects if isinstance(e, effects.CreateJob)]
        others = tuple(e for e in step.effects if not isinstance(e, effects.CreateJob))
        self.following.carry_out(record, lifecycle.Step(step.record, others))
        for create in creates:
            if self.staging is not None and self.staging.begin(record, member, start, create):
                continue  # created once its inputs are there
            self.launch(record, member, start, create)

    def launch(
        self, record: Record, member: Member, start: Start, create: effects.CreateJob
    ) -> None:
        """Render the member Job of a dispatched record and create it in the background."""
        manifest = render_job(
            record.body,
            start,
            attempt=create.attempt,
            hub=self.state.config.hub,
            namespace=member.spec.namespace,
            # a job in a domain is pinned to its nodes: its GPU type alone could take others
            affinity="node" if record.domain else self.state.store.policy.placement.affinity,
            gpu_product=_product_label(member, start),
            hami_pool=self.state.config.hami_pool or None,
            resume_from_s=create.resume_from_s,
            fence=record.fence,
            shared_data=_shared_data(self.state.store.policy.data, record),
        )
        if self.state.config.dry_run:
            return
        task = asyncio.get_running_loop().create_task(
            self.create(record, member, manifest, create.attempt)
        )
        self.state.inflight[record.key] = task
        task.add_done_callback(lambda done: self._landed(record.key, done))

    def _landed(self, key: str, task: asyncio.Task[None]) -> None:
        if self.state.inflight.get(key) is task:
            del self.state.inflight[key]
        self._yield_to_creates()

    def _yield_to_creates(self) -> None:
        """A backlog of member Job creates goes before hub status writes and Events."""
        if len(self.state.inflight) >= BURST_STARTS:
            self.state.hub_writes.yield_to(self.state.clock.monotonic() + BURST_YIELD_S)

    async def create(
        self, record: Record, member: Member, manifest: Mapping[str, Any], attempt: int
    ) -> None:
        """Create the member Job of a dispatched record; on failure put it back in the queue."""
        name = manifest["metadata"]["name"]

        def superseded() -> bool:  # requeued, preempted, suspended or deleted meanwhile
            return (
                self.state.store.records.get(record.key) is not record
                or record.attempts != attempt
                or record.member_job != name
            )

        try:
            if not self.state.leadership.leading():
                raise RuntimeError("this replica is no longer the leader")
            uid = await self.state.call(member.create_job, manifest)
        except Exception as err:  # noqa: BLE001 - any create failure requeues; logged
            if superseded():
                return  # nothing of ours exists
            self.state.observer.dispatch_failed(member.name)
            why = describe(err)
            log.warning("dispatch of %s failed: %s", record.key, why)
            refused = isinstance(err, CallFailed) and err.refused
            retry, now = self.state.store.policy.retry, self.state.clock.wall()
            step = lifecycle.create_failed(record, member.name, why, refused, attempt, retry, now)
            self.following.carry_out(record, step)
            return
        if superseded():
            log.info("member Job %s/%s outlived its dispatch: deleting it", member.name, name)
            await self.state.call(quiet, member.delete_job, name)
            return
        self.state.observer.dispatched(record)
        self.state.calibrator.started(record.key, self.state.clock.wall())
        self.state.event(record, "Dispatched", record.message)
        if record.preemptions:
            self.state.event(record, "Resumed", record.message)
        self.state.write_soon(record)
        existing = member.jobs.get(name)
        if not uid and existing is not None:
            # It existed already (made before a crash): its watch events may all be past,
            # so take its state from the mirror now or a finished Job would never be seen.
            self.following.follow(member, "MODIFIED", existing)

    def requeue_uncreated(self) -> None:
        """After a restart: a record whose status says Dispatched but whose member Job the
        (synced) member does not have was cut off between status write and create."""
        mirrors = {name: m.jobs for name, m in self.state.members.items() if m.synced()}
        for record in uncreated(self.state.store.active(), mirrors):
            step = lifecycle.member_job_missing(record)
            log.warning("%s: %s", record.key, step.record.message)
            self.following.carry_out(record, step)


def _product_label(member: Member, start: Start) -> str | None:
    for name in start.nodes:
        node = member.nodes.get(name)
        if node is not None:
            labels = (node.get("metadata") or {}).get("labels") or {}
            value = labels.get(k.GPU_PRODUCT_LABEL)
            if value:
                return str(value)
    return None


def _shared_data(data: DataPolicy, record: Record) -> tuple[str, str] | None:
    """(claim, path) a member Job mounts: with ``data.staging_scope: cluster``, the shared
    claim its inputs are staged into, when it reads any (None otherwise)."""
    if data.staging_scope != "cluster" or not data.shared_claim:
        return None
    if record.job is None or not record.job.inputs:
        return None
    return data.shared_claim, data.copy_dest
