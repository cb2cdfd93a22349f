"""The scheduling loop: when to cycle (kicks, debounced and paced; back-offs, start
deadlines and the safety-net tick), one cycle (snapshot, plan off the loop, apply), and
the ETA projection in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from cpn.api import constants as k
from cpn.core.check import check_plan
from cpn.core.cycle import plan_cycle
from cpn.core.explain import Choice, Frees, choices, first_to_free
from cpn.core.model import CyclePlan, Snapshot, WaitReason
from cpn.runtime.benchmarks import Benchmarking
from cpn.runtime.delegation import Delegation
from cpn.runtime.dispatch import Dispatching
from cpn.runtime.fairfeed import budget_message
from cpn.runtime.following import Following
from cpn.runtime.hubwatch import HubWatch
from cpn.runtime.hubwrites import HubWrites
from cpn.runtime.membership import Membership
from cpn.runtime.projector import Projector
from cpn.runtime.state import WRITE_WORKERS, RuntimeState

if TYPE_CHECKING:
    from cpn.runtime.staging import Staging

log = logging.getLogger(__name__)


class Loop:
    """When to cycle, and a cycle: the one object that runs the others, on the runtime's
    shared ``state``."""

    def __init__(
        self,
        state: RuntimeState,
        *,
        writer: HubWrites,
        following: Following,
        membership: Membership,
        hub_watch: HubWatch,
        dispatching: Dispatching,
        benchmarking: Benchmarking,
        delegation: Delegation | None = None,
    ) -> None:
        self.state = state
        self.writer = writer
        self.following = following
        self.membership = membership
        self.hub_watch = hub_watch
        self.dispatching = dispatching
        self.benchmarking = benchmarking
        self.delegation = delegation or Delegation(state)
        self.cycles = 0
        self.last_plan: CyclePlan | None = None
        self.last_snapshot: Snapshot | None = None
        self._metrics_task: asyncio.Task[None] | None = None
        self._eta_task: asyncio.Task[None] | None = None
        self.projector = Projector()
        self._eta_at = 0.0
        self._eta_wall_s = 0.0  # how long the last ETA projection took
        self._cycle_wall_s = 0.0  # how long the last cycle took on the loop and in plan_cycle
        self.staging: Staging | None = None  # set by the engine (runtime/staging.py)
        self._cycle_end = 0.0
        self._heap_frozen = False  # freeze_heap() ran (once, after the first cycle)

    async def wait_synced(self, timeout_s: float = 60.0) -> None:
        """Wait until every member has listed nodes, pods and Jobs (or timed out)."""
        deadline = self.state.clock.monotonic() + timeout_s
        while self.state.clock.monotonic() < deadline:
            if all(m.synced() for m in self.state.members.values()):
                return
            await asyncio.sleep(0.05)

    async def run(self) -> None:
        """Cycle whenever kicked (debounced), and every ``interval_s`` at least."""
        self.state.loop = asyncio.get_running_loop()
        self.state.observer.start()
        if self.state.policy_informer is None:
            self.hub_watch.watch_policy()
        try:
            await asyncio.wait_for(self.hub_watch.policy_settled.wait(), timeout=15.0)
        except TimeoutError:
            log.warning(
                "no valid policy ConfigMap %s/%s; scheduling with the defaults",
                self.state.config.namespace,
                self.state.config.policy_configmap,
            )
        await self.hub_watch.watch_hub()
        self.benchmarking.watch()
        self.delegation.watch()
        await self.membership.connect_members()
        await self.wait_synced()
        self.dispatching.requeue_uncreated()
        # recent successes whose usage a kill may have lost (runtime/accounting.py)
        self.state.usage.recover(self.state.store.records.values(), self.state.clock.wall())
        self.state.usage.fair.configure(self.state.store.policy)  # past usage before cycle 1
        await self.state.usage.load(self.state.call, self.state.clock.wall())
        self._metrics_task = asyncio.get_running_loop().create_task(self.membership.metrics_loop())
        self.state.write_workers = [
            asyncio.get_running_loop().create_task(self.writer.worker())
            for _ in range(WRITE_WORKERS)
        ]
        while not self.state.stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.state.kicked.wait(), timeout=self.next_wake_s())
            await asyncio.sleep(self.state.config.debounce_s)
            # Pace: cycles (plan_cycle is a thread holding the GIL) get at most half of the
            # time, so events, dispatches and status writes keep flowing with a long queue.
            rest = self._cycle_wall_s - (self.state.clock.monotonic() - self._cycle_end)
            if rest > 0:
                await asyncio.sleep(rest)
            self.state.kicked.clear()
            if (
                not self.state.leadership.leading()
            ):  # deposed (e.g. paused past the renew deadline): act no more
                log.error("not the leader any more: no cycle")
                continue
            try:
                await self.cycle()
            except Exception:
                log.exception("scheduling cycle failed; retrying on the next kick")
                await asyncio.sleep(1.0)
            else:
                if not self._heap_frozen:
                    self._heap_frozen = True
                    log.info("start-up heap: %d objects frozen", freeze_heap())

    def next_wake_s(self) -> float:
        """Seconds until the safety-net tick, until a backing-off job may retry, or until a
        not-ready member's jobs are due to be requeued."""
        wait = self.state.config.interval_s
        member_timeout_s, _ = self.state.member_timeout()
        placed = {record.cluster for record in self.state.store.active()}
        for name, since in self.state.not_ready_since.items():
            due = since + member_timeout_s - self.state.clock.monotonic()
            if name in placed and due > 0:
                wait = min(wait, due + 0.05)
        now = self.state.clock.wall()
        for record in self.state.store.pending():
            if record.not_before_s > now:
                wait = min(wait, record.not_before_s - now + 0.05)
        timeout_s = self.state.store.policy.retry.start_timeout_s
        for record in self.state.store.active():  # an attempt's start deadline still ahead
            deadline = record.dispatch_s + timeout_s
            if record.phase == k.PHASE_DISPATCHED and record.dispatch_s and deadline > now:
                wait = min(wait, deadline - now + 0.05)
        retry = self.staging.next_wake_s(now) if self.staging is not None else None
        if retry is not None:  # a staging's back-off ends
            wait = min(wait, retry + 0.05)
        return max(wait, 0.0)

    async def cycle(self) -> CyclePlan:
        """One scheduling cycle: snapshot, plan off the loop, apply."""
        began = time.perf_counter()
        self.following.learn()  # finished jobs' runtimes, before the estimates are read
        self.dispatching.requeue_lost()
        self.following.start_deadlines()
        self.dispatching.drained()
        snapshot = self.snapshot()
        plan, wall, chosen, frees = await asyncio.to_thread(_plan_and_explain, snapshot)
        if self.state.config.check_plans:
            for violation in check_plan(plan, snapshot):
                log.error("plan check: %s", violation)
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
        await self.state.observer.cycle(self.cycles, snapshot, plan, wall)
        await self.dispatching.apply(plan, snapshot, chosen, frees)
        self._budget_events(snapshot)
        self.benchmarking.after_cycle(snapshot, plan)
        self.delegation.after_cycle()
        self._cycle_end = self.state.clock.monotonic()
        self._cycle_wall_s = time.perf_counter() - began
        self.state.observer.cycle_applied(self._cycle_wall_s)
        self.state.usage.flush_soon(self.state.call, self.state.clock.wall())
        self._maybe_project()
        return plan

    def snapshot(self) -> Snapshot:
        """The cycle's input: the members as seen now, their links' bandwidth (learned where
        stagings measured it) and their data caches (runtime/staging.py)."""
        clusters, bandwidth = self.membership.clusters_view()
        if self.staging is not None:
            self.staging.tick()
            bandwidth = self.staging.bandwidth(bandwidth)
        snapshot = self.state.store.snapshot(self.state.clock.wall(), clusters, bandwidth)
        if self.staging is not None:
            pending = snapshot.pending
            if self.staging.sizes:  # most clusters never learn a size: no pass over the queue
                pending = tuple(self.staging.sized(job) for job in pending)
            snapshot = replace(snapshot, pending=pending, data_cache=self.staging.data_cache())
        usage = self.state.usage.usage(snapshot.policy, snapshot.now_s)
        return replace(snapshot, usage=usage) if usage is not None else snapshot

    def _budget_events(self, snapshot: Snapshot) -> None:
        """An Event on a job of each group that went over its GPU-hour budget this cycle."""
        for group in self.state.usage.fair.newly_over(snapshot):
            record = next((r for r in self.state.store.pending() if r.group == group), None)
            if record is None:
                self.state.usage.fair.forget(group)  # told when one of its jobs waits
                continue
            message = budget_message(snapshot.policy, snapshot, group)
            log.warning("%s", message)
            self.state.event(record, "OverBudget", message, warning=True)

    def _maybe_project(self) -> None:
        """Refresh ETAs in the background, at most every ``eta_interval_s``."""
        if self._eta_task is not None and not self._eta_task.done():
            return
        # At most every eta_interval_s, and the projection at most a fifth of the time.
        if self.state.clock.monotonic() - self._eta_at < max(
            self.state.config.eta_interval_s, 4 * self._eta_wall_s
        ):
            return
        self._eta_at = self.state.clock.monotonic()
        self._eta_task = asyncio.get_running_loop().create_task(self.refresh_etas())

    async def refresh_etas(self) -> None:
        """Project the queue forward from now (after this cycle's starts) and write ETAs."""
        snapshot = self.snapshot()
        if not snapshot.pending:
            return
        started = self.state.clock.monotonic()
        projection = await self.projector.project(snapshot)  # in its own process
        self._eta_wall_s = self.state.clock.monotonic() - started
        records = self.state.store.pending()
        jobs = {r.key: r.job for r in records if r.job is not None}
        calibrator = self.state.calibrator
        told = calibrator.tell(projection, jobs, snapshot.now_s, jobs)
        self.state.observer.metrics.eta_ranges(
            calibrator.range_scale, calibrator.judged, calibrator.misses
        )
        for record in records:
            found = told.get(record.key)
            if found is None:
                record.eta_start_s = record.eta_finish_s = None
                continue
            record.eta_start_s, record.eta_finish_s = found.start_s, found.end_s
            record.eta_range = (found.start_low_s, found.start_high_s)
        await self.writer.write_all()


def freeze_heap() -> int:
    """Collect, then move every object the collector tracks out of its reach (``gc.freeze``);
    returns how many. Called once, after the first cycle: what start-up built (modules, the
    client libraries, the predictor's tables, the first listing) lives as long as the
    process, and each full collection walked all of it, stopping every thread for a third
    of a second at a time on the bench bed; after it they walk only what came later.
    Frozen objects are still freed by reference counting; only cyclic garbage among them
    would be kept, and the collection just before takes what there is."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


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
