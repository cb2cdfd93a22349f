"""The operator's engine: ingest events, run cycles, dispatch, follow, report; the
collaborators that do it wired together (:class:`Runtime`).

Everything here runs on the asyncio loop's thread, except the pure
``plan_cycle`` (in a worker thread, off kopf's loop), the ETA projection (in a
worker process: :mod:`cpn.runtime.projector`) and blocking API calls (in a
thread pool). Member informers call back from their own threads and hop
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
import contextlib
from collections.abc import Mapping
from typing import Any

from cpn.config import OperatorConfig
from cpn.core.estimator import Estimator
from cpn.core.model import CyclePlan, Snapshot
from cpn.core.policy import QueuePolicy
from cpn.runtime.benchmarks import Benchmarking
from cpn.runtime.dispatch import Dispatching
from cpn.runtime.following import Following
from cpn.runtime.hubwatch import HubWatch
from cpn.runtime.hubwrites import HubWrites
from cpn.runtime.loop import Loop
from cpn.runtime.membership import Membership
from cpn.runtime.ports import Clock, Hub, Leadership, Member
from cpn.runtime.staging import Staging
from cpn.runtime.state import EventPoster, RuntimeState
from cpn.runtime.store import Record


class _Shared:
    """An attribute of the runtime's shared state, read and set through the runtime."""

    def __init__(self, name: str = "") -> None:
        self.name = name

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = self.name or name

    def __get__(self, runtime: Runtime | None, owner: type | None = None) -> Any:
        if runtime is None:  # looked up on the class
            return self
        return getattr(runtime.state, self.name)

    def __set__(self, runtime: Runtime, value: Any) -> None:
        setattr(runtime.state, self.name, value)


class Runtime:
    """The live scheduler: one per operator process. Composed of collaborators that share
    one :class:`~cpn.runtime.state.RuntimeState` (the store, the members, the pools, the
    clock and the other ports), each with its own small interface:
    :class:`~cpn.runtime.hubwrites.HubWrites` (status writes),
    :class:`~cpn.runtime.following.Following` (member Jobs and the records' transitions
    carried out), :class:`~cpn.runtime.membership.Membership` (member clusters),
    :class:`~cpn.runtime.hubwatch.HubWatch` (AIJobs, Namespaces, the policy),
    :class:`~cpn.runtime.dispatch.Dispatching` (a plan carried out),
    :class:`~cpn.runtime.benchmarks.Benchmarking` (GPUBenchmarks) and
    :class:`~cpn.runtime.loop.Loop` (when to cycle, and a cycle). Here they are wired
    together, and the runtime's surface for the handlers, the CLI and the tests kept."""

    config = _Shared()
    store = _Shared()
    members = _Shared()
    member_specs = _Shared()
    member_status = _Shared()
    probes = _Shared()
    calibrator = _Shared()
    loop = _Shared()
    pool = _Shared()
    write_pool = _Shared()
    writes = _Shared()
    _not_ready_since = _Shared("not_ready_since")

    def __init__(
        self,
        config: OperatorConfig,
        hub: Hub,
        estimator: Estimator,
        *,
        clock: Clock,
        leadership: Leadership,
        post_event: EventPoster | None = None,
    ) -> None:
        self.state = state = RuntimeState(
            config, hub, estimator, clock=clock, leadership=leadership, post_event=post_event
        )
        self.writer = HubWrites(state)
        self.following = Following(state)
        self.membership = Membership(state, self.writer, self.following)
        self.hub_watch = HubWatch(state, self.following)
        self.dispatching = Dispatching(state, self.writer, self.following)
        self.benchmarking = Benchmarking(state, self.writer.write_all_soon)
        self.staging = Staging(state, self.following, self.dispatching.launch)
        self.dispatching.staging = self.staging
        self.following.staging_seen = self.staging.seen
        self.membership.restore_cache = self.staging.restore
        self.writer.member_cache = self.staging.member_status
        self.scheduler = Loop(
            state,
            writer=self.writer,
            following=self.following,
            membership=self.membership,
            hub_watch=self.hub_watch,
            dispatching=self.dispatching,
            benchmarking=self.benchmarking,
        )
        self.scheduler.staging = self.staging

    async def run(self) -> None:
        """Cycle whenever kicked (debounced), and every ``interval_s`` at least."""
        await self.scheduler.run()

    @property
    def cycles(self) -> int:
        """Scheduling cycles run so far."""
        return self.scheduler.cycles

    def member_timeout(self) -> tuple[float, str]:
        return self.state.member_timeout()

    async def member_event(self, event: str, body: Mapping[str, Any]) -> None:
        """A MemberCluster was added, changed or removed (:mod:`cpn.handlers.members`)."""
        await self.membership.member_event(event, body)

    async def connect_members(self) -> None:
        await self.membership.connect_members()

    def clusters_view(self) -> tuple[list[Any], dict[str, dict[str, float]]]:
        return self.membership.clusters_view()

    async def sweep(self) -> int:
        """Delete the member Jobs no live attempt owns
        (:meth:`~cpn.runtime.membership.Membership.sweep`)."""
        return await self.membership.sweep()

    def policy_event(self, body: Mapping[str, Any]) -> str:
        """A new policy ConfigMap: "" when taken, else why not
        (:meth:`~cpn.runtime.hubwatch.HubWatch.policy_event`)."""
        return self.hub_watch.policy_event(body)

    def _use_policy(self, policy: QueuePolicy) -> None:
        self.hub_watch.use_policy(policy)

    def _follow(self, member: Member, event: str, job: Mapping[str, Any]) -> None:
        self.following.follow(member, event, job)

    async def _write_status(self, record: Record) -> None:
        await self.writer.write_status(record)

    def _requeue_lost(self) -> None:
        self.dispatching.requeue_lost()

    async def _create(
        self, record: Record, member: Member, manifest: Mapping[str, Any], attempt: int
    ) -> None:
        await self.dispatching.create(record, member, manifest, attempt)

    def _next_wake_s(self) -> float:
        return self.scheduler.next_wake_s()

    async def refresh_etas(self) -> None:
        await self.scheduler.refresh_etas()

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

    async def stop(self) -> None:
        state = self.state
        state.stopping = True
        with contextlib.suppress(TimeoutError):  # the runs ended since the last cycle
            await asyncio.wait_for(state.usage.flush(state.call, state.clock.wall()), 10.0)
        state.kick()
        for task in state.write_workers:
            task.cancel()
        state.observer.stop()
        for member in state.members.values():
            member.stop()
        for informer in [state.policy_informer, *state.hub_informers]:
            if informer is not None:
                informer.stop()
        state.pool.shutdown(wait=False, cancel_futures=True)
        state.write_pool.shutdown(wait=False, cancel_futures=True)
        self.scheduler.projector.close()
