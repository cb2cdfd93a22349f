"""Writes to the hub: AIJob statuses (rendered by :mod:`cpn.runtime.status`, merged and
paced) and MemberCluster statuses, by the write workers.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cpn.api import constants as k
from cpn.api.benchmarks import slow_message
from cpn.api.status import IMMINENT, condition, merge_patch, rfc3339
from cpn.core.benchmarks import SLOW_RATIO
from cpn.core.model import Node
from cpn.runtime.ports import CallFailed
from cpn.runtime.state import RuntimeState
from cpn.runtime.status import render_status
from cpn.runtime.store import Packed, Record, unpack

log = logging.getLogger(__name__)

#: An AIJob's position, score and ETA alone are rewritten at most this often...
VOLATILE_WRITE_S = 30.0
#: ...and less often with a long queue: about this many such writes per second in all.
VOLATILE_WRITES_PER_S = 20.0
#: A refresh timer that fires this much early (timer and wall clock drift) still counts.
REFRESH_EARLY_S = 0.5


class HubWrites:
    """AIJob and MemberCluster status writes, on the runtime's shared ``state``: each
    AIJob's queued by ``state.writes`` and written by :meth:`worker` tasks, paced by
    ``state.hub_writes``; all of them looked over after each cycle (:meth:`write_all_soon`)."""

    def __init__(self, state: RuntimeState) -> None:
        self.state = state
        self._task: asyncio.Task[None] | None = None  # the write_all in the background
        self._write_again = False
        self._member_written: dict[tuple[str, str], dict[str, Any]] = {}
        # set by the engine: a member's status.cache (runtime/staging.py)
        self.member_cache: Callable[[str], dict[str, Any]] | None = None
        # Per AIJob key, the wall time its refresh is due (moved only to an earlier time),
        # kept in a heap (stale entries skipped) behind one loop timer for the earliest:
        # 10,000 waiting AIJobs cost a dict entry and a tuple each, not a timer each.
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self._wake: tuple[float, asyncio.TimerHandle] | None = None

    def render_status(self, record: Record) -> dict[str, Any]:
        """The status the AIJob should have now (:func:`cpn.runtime.status.render_status`).
        When it shows a start instant, a timer queues the AIJob's next write, ahead of the
        others, a whole imminent window before that instant (that write shows "imminent"):
        not a cycle, which may come late on a loaded operator."""
        now = self.state.clock.wall()
        status, refresh_by = render_status(record, now, self._member_namespace(record.cluster))
        self._refresh_by(record, refresh_by)
        return status

    def _refresh_by(self, record: Record, at_s: float | None, *, after_s: float = 0.0) -> None:
        """Write ``record`` again by wall time ``at_s`` (at the soonest ``after_s`` from now)."""
        record.refresh_by_s = at_s
        armed = self._due.get(record.key)
        if at_s is not None and armed is not None and armed <= at_s:
            return  # it is due first, and is armed again for the later time
        if at_s is None:
            self._due.pop(record.key, None)  # its heap entry is skipped when it comes up
            return
        now = self.state.clock.wall()
        when = max(at_s, now + after_s)
        self._due[record.key] = when
        heapq.heappush(self._heap, (when, record.key))
        self._arm(now)

    def _arm(self, now: float) -> None:
        """One loop timer, for the earliest refresh due."""
        while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)  # dropped or moved earlier since it was pushed
        if not self._heap:
            return
        first = self._heap[0][0]
        if self._wake is not None:
            if self._wake[0] <= first:
                return
            self._wake[1].cancel()
        handle = asyncio.get_running_loop().call_later(max(0.0, first - now), self._fire)
        self._wake = (first, handle)

    def _fire(self) -> None:
        """Every refresh due by now (each queued ahead of the others, so the soonest is
        taken last and written first); then the timer for the next."""
        self._wake = None
        now = self.state.clock.wall()
        due = []
        while self._heap and self._heap[0][0] <= now:
            when, key = heapq.heappop(self._heap)
            if self._due.get(key) == when:
                due.append(key)
        for key in reversed(due):
            self.refresh_due(key)
        self._arm(now)

    def refresh_due(self, key: str) -> None:
        """Queue ``key``'s write first if a start instant its status shows is near (the
        refreshes of deleted AIJobs find nothing to do)."""
        self._due.pop(key, None)
        record = self.state.store.records.get(key)
        if record is None or record.refresh_by_s is None:
            return
        if self.state.clock.wall() >= record.refresh_by_s - REFRESH_EARLY_S:
            self.state.writes.add(key, first=True)
        else:  # early: the instant moved later since it was armed (or the clocks drift)
            self._refresh_by(record, record.refresh_by_s)

    def _member_namespace(self, cluster: str) -> str:
        member = self.state.members.get(cluster)
        return member.spec.namespace if member else ""

    async def worker(self) -> None:
        """Take the next due status (or Event) from the queue and write it, paced."""
        loop = asyncio.get_running_loop()
        while True:
            kind, item = await self.state.writes.get()
            try:
                await self.state.hub_writes.take()
                if kind == "status":
                    record = self.state.store.records.get(item)
                    if record is not None:
                        await self.write_status(record)
                else:
                    await loop.run_in_executor(
                        self.state.write_pool, self.state.hub.post_event, *item
                    )
            except Exception:
                log.exception("hub write failed")
            finally:
                if kind == "status":
                    self.state.writes.done(item)

    async def write_status(self, record: Record) -> None:
        """Merge-patch the AIJob's status with what changed since the last write."""
        if record.deleting or record.key not in self.state.store.records:
            return
        shown_until = record.refresh_by_s  # the hub's instants, until this write lands
        if record.key in self.state.inflight:
            # Its create first (it queues the write when it lands); but the hub must not
            # show it at a place in the queue the others have been renumbered around.
            status = self._starting(record)
            if status is None:
                return
        else:
            status = self.render_status(record)
            record.written_sig = _signature(record)
            record.written_at = self.state.clock.monotonic()
        before = record.written
        patch = merge_patch(unpack(before), status)
        if not patch:
            return
        sent = record.written = Packed(status)
        self.state.observer.metrics.status_writes.inc()
        try:
            await asyncio.get_running_loop().run_in_executor(
                self.state.write_pool,
                self.state.hub.patch_aijob_status,
                record.namespace,
                record.name,
                patch,
            )
        except Exception as err:  # noqa: BLE001 - hub unreachable: logged, rewritten next cycle
            # The hub still shows what it showed (a patch it applied all the same comes back
            # as a watch event): diff the next write against that, not against nothing,
            # which would leave on the hub the keys this status has dropped; and refresh by
            # the earlier of the two, retried a second on at the soonest while the hub fails.
            if record.written is sent:
                record.written = before
            record.written_sig = None
            self._refresh_by(
                record,
                min((t for t in (shown_until, record.refresh_by_s) if t is not None), default=None),
                after_s=1.0,
            )
            if not (isinstance(err, CallFailed) and err.status == 404):
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
                now_s=self.state.clock.wall(),
                previous=written.get("conditions") or (),
            )
            for c in written.get("conditions") or ()
        ]
        return status

    def write_all_soon(self) -> None:
        """:meth:`write_all` in the background (the next cycle need not wait for it)."""
        if self._task is not None and not self._task.done():
            self._write_again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._write_loop())

    async def _write_loop(self) -> None:
        while True:
            self._write_again = False
            try:
                await self.write_all()
            except Exception:
                log.exception("status writes failed; retried after the next cycle")
            if not self._write_again or self.state.stopping:
                return

    async def write_all(self) -> None:
        """Write every AIJob whose status changed in substance; changes only to position,
        score, ETA or the wait message are written at most every :meth:`volatile_period_s`
        per AIJob (with thousands waiting they change for all of them every cycle), and
        never for a finished one."""
        now = self.state.clock.monotonic()
        period = self.volatile_period_s()
        # A finished job's status changes only with its signature: no paced rewrite.
        due = [
            r
            for r in list(self.state.store.records.values())
            if r.written_sig != _signature(r) or (not r.finished and now - r.written_at >= period)
        ]
        for record in due:
            self.state.write_soon(record)
        for name in list(self.state.members):
            await self.write_member_status(name)

    def volatile_period_s(self) -> float:
        """Seconds between writes of an AIJob's position, score and ETA alone: 30 s, longer
        with a long queue (about VOLATILE_WRITES_PER_S such writes per second in all)."""
        waiting = sum(
            1 for r in self.state.store.records.values() if not r.active and not r.finished
        )
        return max(VOLATILE_WRITE_S, waiting / VOLATILE_WRITES_PER_S)

    async def write_member_status(self, name: str, body: Mapping[str, Any] | None = None) -> None:
        ready, why = self.state.member_status.get(name, (False, "not probed yet"))
        # Conditions keep their lastTransitionTime while their status holds.
        written = self._member_written.get(("member", name)) or (body or {}).get("status") or {}
        previous = written.get("conditions") or ()
        member = self.state.members.get(name)
        status: dict[str, Any] = {"lastProbeTime": rfc3339(self.state.clock.wall())}
        if member is not None:
            view = self.state.views.get(name)  # as the last cycle saw it
            if view is None:
                usage = self.state.store.usage_by_node()
                ours = {n: u for (c, n), u in usage.items() if c == name}
                domains = self.state.store.policy.domains
                view = member.cluster(ours, ready=ready, domains=domains)
            types = _tally((node.gpu_type, node) for node in view.nodes)
            status["inventory"] = [{"gpuType": t, **row} for t, row in types.items()]
            # free GPUs per domain of the policy (none when it names none)
            in_domains = _tally((node.domain, node) for node in view.nodes if node.domain)
            status["domains"] = [{"domain": d, **row} for d, row in in_domains.items()] or None
            status["domainsFree"] = (
                ", ".join(
                    f"{d} {row['gpusFree']:g}/{row['gpusTotal']:g}" for d, row in in_domains.items()
                )
                or None
            )
            status["gpusTotal"] = sum(r["gpusTotal"] for r in types.values())
            status["gpusFree"] = sum(r["gpusFree"] for r in types.values())
            status["nodes"] = len(view.nodes)
            status["types"] = ",".join(sorted(types))
            if self.member_cache is not None:  # runtime/staging.py
                status["cache"] = self.member_cache(name)
        source = self.state.metrics.get(name)
        conditions_extra = []
        if source is not None:
            fresh, why_metrics = source.fresh(self.state.clock.wall())
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
                    now_s=self.state.clock.wall(),
                    previous=previous,
                )
            )
        slow = self.state.slow_nodes.get(name, ())
        conditions_extra.append(
            condition(
                k.COND_SLOW_NODES,
                bool(slow),
                "SlowNodes" if slow else "NoneSlow",
                "; ".join(slow_message(s) for s in slow)
                if slow
                else "no node's benchmark is below "
                f"{SLOW_RATIO:g}x the median of its GPU type's other nodes",
                generation=0,
                now_s=self.state.clock.wall(),
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
                now_s=self.state.clock.wall(),
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
            await self.state.call(self.state.hub.patch_member_status, name, status)
        except Exception as err:  # noqa: BLE001 - CallFailed or unreachable: logged, retried
            self._member_written.pop(key, None)
            log.warning("status of member %s not written: %s", name, err)


def _tally(nodes: Iterable[tuple[str, Node]]) -> dict[str, dict[str, Any]]:
    """Nodes, GPUs and free GPUs of ``(name, node)`` pairs per name, sorted by name."""
    rows: dict[str, dict[str, Any]] = {}
    for name, node in sorted(nodes, key=lambda pair: pair[0]):
        row = rows.setdefault(name, {"nodes": 0, "gpusTotal": 0.0, "gpusFree": 0.0})
        row["nodes"] += 1
        row["gpusTotal"] += node.gpus
        row["gpusFree"] += max(node.free_gpus, 0.0)
    return rows


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
        record.fifo_due_s is None,  # its FIFO due time is written at once (kept on restart)
        record.eta_start_s is None,
        record.gpu_usage is None,  # its first reading is written at once, later ones paced
        record.position,
        record.frees.job_key if record.frees else "",
        hold.level if hold else "",
    )
