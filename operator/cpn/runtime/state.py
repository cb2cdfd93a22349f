"""The runtime's shared state and plumbing: what every collaborator of
:class:`~cpn.runtime.engine.Runtime` is handed (the store, the members, the pools, the
clock and the other ports), how a blocking call runs off the loop (:meth:`~RuntimeState.call`),
how a cycle is asked for (:meth:`~RuntimeState.kick`), how a callback from another thread
reaches the loop (:meth:`~RuntimeState.threadsafe`), and how Events and status writes are
queued (:meth:`~RuntimeState.event`, :meth:`~RuntimeState.write_soon`), and what the
estimator is to learn before the next cycle (:meth:`~RuntimeState.learn_soon`). It calls no
collaborator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cpn.api import constants as k
from cpn.config import OperatorConfig
from cpn.core.benchmarks import SlowNode
from cpn.core.estimator import Estimator
from cpn.core.eta_calibration import WaitCalibrator
from cpn.core.fence import member_timeout
from cpn.core.health import Probes
from cpn.core.model import Cluster, Job
from cpn.core.policy import QueuePolicy
from cpn.runtime.accounting import Accounting
from cpn.runtime.metrics import Observer
from cpn.runtime.ports import Clock, Hub, Leadership, Member, MetricsSource, Watch
from cpn.runtime.store import Record, Store
from cpn.runtime.writes import Pace, WriteQueue

log = logging.getLogger(__name__)

#: Threads for AIJob status patches and Events.
WRITE_WORKERS = 8
EventPoster = Callable[[Mapping[str, Any], str, str, bool], None]


class RuntimeState:
    """The state every collaborator of the runtime shares (see
    :class:`~cpn.runtime.engine.Runtime`); what only one of them needs is kept there."""

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
        self.config = config
        self.hub = hub
        self.leadership = leadership
        self.store = Store(QueuePolicy(), estimator)
        self.estimator = estimator
        self.members: dict[str, Member] = {}
        self.member_status: dict[str, tuple[bool, str]] = {}
        self.clock = clock
        self.post_event: EventPoster = post_event if post_event is not None else self._post_event
        self.pool = ThreadPoolExecutor(
            max_workers=config.dispatch_workers, thread_name_prefix="cpn-api"
        )
        # Status patches and Events go through their own threads, so that a burst of them
        # never queues ahead of member Job creation.
        self.write_pool = ThreadPoolExecutor(max_workers=WRITE_WORKERS, thread_name_prefix="cpn-w")
        self.hub_writes = Pace(config.hub_write_qps, config.hub_write_burst, clock=clock.monotonic)
        self.writes = WriteQueue()
        self.write_workers: list[asyncio.Task[None]] = []
        self.views: dict[str, Cluster] = {}  # each member as the last cycle saw it
        self.inflight: dict[str, asyncio.Task[None]] = {}  # member Job creates, by AIJob key
        self.loop: asyncio.AbstractEventLoop | None = None
        self.kicked = asyncio.Event()
        self.policy_informer: Watch | None = None
        self.hub_informers: list[Watch] = []
        self.aijobs_listed = False  # the sweep waits for it
        self.stopping = False
        self.not_ready_since: dict[str, float] = {}  # member -> when it turned not ready
        self.probes: dict[str, Probes] = {}  # each member's probe results, folded
        self.member_specs: dict[str, Any] = {}
        self.metrics: dict[str, MetricsSource] = {}
        # Projected waits scaled by how much later than projected jobs really started.
        self.calibrator = WaitCalibrator()
        self.observer = Observer(config, clock=clock)
        self.learned: set[str] = set()  # UIDs of the finished AIJobs the estimator has seen
        # what it is to learn before the next cycle: (job, GPU type, runtime, AIJob key)
        self.to_learn: list[tuple[Job, str, float, str]] = []
        self.observer.metrics.status_writes_pending.set_function(self.writes.statuses)
        # GPU-hour accounting (runtime/accounting.py): runs ended, written once per cycle
        self.usage = Accounting(
            self.observer.metrics.gpu_hours, retention_s=config.usage_retention_days * 86400.0
        )
        # the slow-node rule's verdict (runtime/benchmarks.py): the members with slow nodes
        # (core.benchmarks.slow_nodes), for the MemberClusters' SlowNodes condition
        self.slow_nodes: dict[str, tuple[SlowNode, ...]] = {}

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking API call in the pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: fn(*args, **kwargs))

    def member_timeout(self) -> tuple[float, str]:
        """Seconds a member may stay not ready before its jobs are given up on there, read
        from the policy in force at each call (so an edit of the ConfigMap applies at once),
        and where the figure comes from (:func:`cpn.core.fence.member_timeout`)."""
        return member_timeout(
            self.store.policy.retry.member_timeout_s, self.config.member_timeout_s
        )

    def domain_at(self, cluster: str, nodes: Sequence[str]) -> str:
        """The domain of ``nodes`` (their first) of member ``cluster``, as the last cycle saw
        it ("" for none, or a node it did not see)."""
        view = self.views.get(cluster)
        if view is None or not nodes:
            return ""
        return next((node.domain for node in view.nodes if node.name == nodes[0]), "")

    def kick(self) -> None:
        """Ask for a cycle soon (merged with other kicks)."""
        self.kicked.set()

    def threadsafe(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    def _post_event(
        self, body: Mapping[str, Any], reason: str, message: str, warning: bool
    ) -> None:
        self.writes.add_event((body, reason, message, warning))

    def event(self, record: Record, reason: str, message: str, warning: bool = False) -> None:
        body = {"apiVersion": f"{k.GROUP}/{k.VERSION}", "kind": "AIJob", **record.body}
        try:
            self.post_event(body, reason, message, warning)
        except Exception:  # events are best effort
            log.debug("event not posted", exc_info=True)

    def write_soon(self, record: Record) -> None:
        self.writes.add(record.key)

    def learn_soon(self, record: Record) -> None:
        """The estimator is to see finished ``record``'s real runtime before the next cycle
        (:meth:`cpn.runtime.following.Following.learn`); its UID counts as seen now."""
        self.learned.add(record.uid)
        if record.job is not None and record.actual_s > 0:
            self.to_learn.append((record.job, record.gpu_type, record.actual_s, record.key))


def quiet(fn: Callable[..., None], *args: Any) -> None:
    try:
        fn(*args)
    except Exception as err:  # noqa: BLE001 - best effort, the sweep retries; logged
        log.warning("cleanup call failed: %s", err)
