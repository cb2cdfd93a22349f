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

from collections.abc import Mapping
from typing import Any

from cpn.core.model import CyclePlan, Snapshot
from cpn.core.policy import QueuePolicy
from cpn.runtime.loop import Loop
from cpn.runtime.ports import Member
from cpn.runtime.store import Record


class Runtime(Loop):
    """The live scheduler: one per operator process. Built up one responsibility per
    module, each class on the one before: :mod:`~cpn.runtime.state` (shared state and
    plumbing), :mod:`~cpn.runtime.hubwrites` (status writes), :mod:`~cpn.runtime.following`
    (member Jobs and their records' transitions), :mod:`~cpn.runtime.membership` (member
    clusters), :mod:`~cpn.runtime.hubwatch` (AIJobs, Namespaces, the policy),
    :mod:`~cpn.runtime.dispatch` (a plan carried out), :mod:`~cpn.runtime.loop` (when to
    cycle); here, stopping."""

    @property
    def benchmarks(self) -> dict[str, Mapping[str, Any]]:
        """The GPUBenchmarks on the hub, by name (:class:`~cpn.runtime.benchmarks.Benchmarking`)."""
        return self.benchmarking.benchmarks

    @property
    def benchmarks_listed(self) -> bool:
        return self.benchmarking.listed

    @benchmarks_listed.setter
    def benchmarks_listed(self, listed: bool) -> None:
        self.benchmarking.listed = listed

    @property
    def _bench_busy(self) -> set[str]:
        return self.benchmarking.busy

    def benchmarks_after_cycle(self, snapshot: Snapshot, plan: CyclePlan) -> None:
        self.benchmarking.after_cycle(snapshot, plan)

    async def _write_status(self, record: Record) -> None:
        await self.writer.write_status(record)

    def _follow(self, member: Member, event: str, job: Mapping[str, Any]) -> None:
        self.following.follow(member, event, job)

    async def member_event(self, event: str, body: Mapping[str, Any]) -> None:
        """A MemberCluster was added, changed or removed (:mod:`cpn.handlers.members`)."""
        await self.membership.member_event(event, body)

    async def connect_members(self) -> None:
        await self.membership.connect_members()

    async def sweep(self) -> int:
        """Delete the member Jobs no live attempt owns (:meth:`Membership.sweep`)."""
        return await self.membership.sweep()

    def policy_event(self, body: Mapping[str, Any]) -> str:
        """A new policy ConfigMap: "" when taken, else why not
        (:meth:`~cpn.runtime.hubwatch.HubWatch.policy_event`)."""
        return self.hub_watch.policy_event(body)

    def _use_policy(self, policy: QueuePolicy) -> None:
        self.hub_watch.use_policy(policy)

    def _requeue_lost(self) -> None:
        self.dispatching.requeue_lost()

    async def _create(
        self, record: Record, member: Member, manifest: Mapping[str, Any], attempt: int
    ) -> None:
        await self.dispatching.create(record, member, manifest, attempt)

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
