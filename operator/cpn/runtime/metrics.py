"""The operator's own telemetry: Prometheus metrics, health and readiness, the decision log.

:class:`OperatorMetrics` holds every ``cpn_*`` series in a private
``CollectorRegistry`` (never the process-wide one, so several runtimes, or
tests, do not collide) and is fed from values only (snapshots, plans, times).
:class:`Observer` is what the engine calls: once per cycle, at dispatch, when a
job starts and when it ends. :func:`serve` exposes ``/metrics``, ``/healthz``
and ``/readyz`` on one small HTTP server thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from cpn.config import OperatorConfig
from cpn.core.capacity import worker_gpus
from cpn.core.model import CyclePlan, Snapshot
from cpn.decisions import DecisionLog, open_log
from cpn.runtime.ports import Clock
from cpn.runtime.store import Record

log = logging.getLogger(__name__)

#: Seconds: queue waits and job completion times, from seconds to days.
WAIT_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400, 259200)
#: Seconds: one scheduling cycle (snapshot, plan, apply).
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)
#: |predicted - actual| / actual.
ERROR_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5)

DEFAULT_QUEUE = "default"
#: the sides of an ETA's start range, in the order WaitCalibrator keeps them
SIDES = ("low", "high")


def _queue(name: str) -> str:
    return name or DEFAULT_QUEUE


class OperatorMetrics:
    """Every ``cpn_*`` series, in its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.queue_length = Gauge(
            "cpn_queue_length",
            "Pending AIJobs after the last cycle, per queue and level",
            ["queue", "level"],
            registry=r,
        )
        self.oldest_wait = Gauge(
            "cpn_queue_oldest_wait_seconds",
            "Wait of the longest-waiting pending AIJob, per queue and level",
            ["queue", "level"],
            registry=r,
        )
        self.waiting = Gauge(
            "cpn_jobs_waiting",
            "Pending AIJobs after the last cycle, per reason they wait",
            ["reason"],
            registry=r,
        )
        self.running = Gauge(
            "cpn_jobs_running",
            "AIJobs holding resources after the last cycle, per cluster",
            ["cluster"],
            registry=r,
        )
        self.wait = Histogram(
            "cpn_job_wait_seconds",
            "Time from AIJob creation to its member Job running",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.jct = Histogram(
            "cpn_job_completion_seconds",
            "Job completion time: AIJob creation to success",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.finished = Counter(
            "cpn_jobs_finished", "AIJobs that ended, per phase", ["phase"], registry=r
        )
        self.dispatch_latency = Histogram(
            "cpn_dispatch_latency_seconds",
            "Time from AIJob creation to its member Job created",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.dispatches = Counter(
            "cpn_dispatches", "Member Jobs created, per cluster", ["cluster"], registry=r
        )
        self.dispatch_failures = Counter(
            "cpn_dispatch_failures",
            "Member Jobs that could not be created (the AIJob goes back to the queue), per cluster",
            ["cluster"],
            registry=r,
        )
        self.retries = Counter(
            "cpn_job_retries", "Failed attempts that will be retried after a back-off", registry=r
        )
        self.prediction_error = Histogram(
            "cpn_prediction_error_ratio",
            "Relative error of the predicted runtime: |predicted - actual| / actual",
            ["gpu_type"],
            buckets=ERROR_BUCKETS,
            registry=r,
        )
        self.cycle_duration = Histogram(
            "cpn_cycle_duration_seconds",
            "Wall time of plan_cycle in one scheduling cycle",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.cycle_total = Histogram(
            "cpn_cycle_total_seconds",
            "Wall time of a whole cycle: snapshot, plan_cycle, preemptions and dispatches "
            "(status writes and the ETA projection follow in the background)",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.cycles = Counter("cpn_cycles", "Scheduling cycles run", registry=r)
        self.last_cycle = Gauge(
            "cpn_last_cycle_timestamp_seconds", "When the last cycle ended (epoch)", registry=r
        )
        self.starts = Counter("cpn_plan_starts", "Starts decided by cycles", registry=r)
        self.preemptions = Counter(
            "cpn_plan_preemptions", "Preemptions decided by cycles", registry=r
        )
        self.solver_runs = Counter(
            "cpn_solver_runs",
            "Cycles per placement method and solver status",
            ["method", "status"],
            registry=r,
        )
        self.solver_fallbacks = Counter(
            "cpn_solver_fallbacks", "Cycles where the greedy fallback replaced the MILP", registry=r
        )
        self.solver_objective = Gauge(
            "cpn_solver_objective", "Objective value of the last placement solve", registry=r
        )
        self.solver_window = Gauge(
            "cpn_solver_window_jobs", "Jobs the last placement solve looked at", registry=r
        )
        self.member_ready = Gauge(
            "cpn_member_ready",
            "1 when a member cluster is reachable, else 0",
            ["cluster"],
            registry=r,
        )
        self.gpus_free = Gauge(
            "cpn_gpus_free",
            "GPUs free on schedulable nodes after the last cycle's starts",
            ["cluster", "gpu_type"],
            registry=r,
        )
        self.gpus_total = Gauge(
            "cpn_gpus_total",
            "GPUs on schedulable nodes",
            ["cluster", "gpu_type"],
            registry=r,
        )
        self.domain_gpus_free = Gauge(
            "cpn_domain_gpus_free",
            "GPUs free per logical domain of the policy, after the last cycle's starts",
            ["cluster", "domain"],
            registry=r,
        )
        self.domain_gpus_total = Gauge(
            "cpn_domain_gpus_total",
            "GPUs per logical domain of the policy on schedulable nodes",
            ["cluster", "domain"],
            registry=r,
        )
        self.decision_log_errors = Counter(
            "cpn_decision_log_errors", "Decision records that could not be written", registry=r
        )
        self.status_writes = Counter(
            "cpn_status_writes", "AIJob status patches sent to the hub", registry=r
        )
        self.status_writes_pending = Gauge(
            "cpn_status_writes_pending",
            "AIJobs whose status is due and not yet written",
            registry=r,
        )
        self.gpu_hours = Counter(
            "cpn_gpu_hours",
            "GPU-hours of ended runs (preempted fragments included) as stored in the usage "
            "store on the hub, per group, user and GPU type (runtime/accounting.py)",
            ["group", "user", "gpu_type"],
            registry=r,
        )
        self.eta_range_factor = Gauge(
            "cpn_eta_range_factor",
            "The ETA range's adaptive factor per side (low, high): each side's distance from "
            "the stated start is this times what the runtimes and past waits give "
            "(core/eta_calibration.py); as of the last ETA refresh",
            ["side"],
            registry=r,
        )
        self.eta_range_judged = Counter(
            "cpn_eta_range_judged",
            "Sides of stated ETA ranges judged since the operator started, per side and result: "
            "a miss when the job started, or still waits, outside that side (the factors aim "
            "at one miss in five per side: 60% of starts within the range); as of the last ETA "
            "refresh",
            ["side", "result"],
            registry=r,
        )
        self._judged_seen = {(side, result): 0 for side in SIDES for result in ("hit", "miss")}
        self._labels: dict[int, set[tuple[str, ...]]] = defaultdict(set)

    # -- per cycle -----------------------------------------------------------------------------
    def observe_cycle(
        self, snapshot: Snapshot, plan: CyclePlan, wall_s: float, *, ended_s: float
    ) -> None:
        """Everything one cycle tells: queues, solver, capacity, readiness."""
        self.cycles.inc()
        self.cycle_duration.observe(wall_s)
        self.last_cycle.set(ended_s)
        self.starts.inc(len(plan.starts))
        self.preemptions.inc(len(plan.preemptions))
        self.solver_runs.labels(plan.stats.method, plan.stats.status).inc()
        if plan.stats.fallback:
            self.solver_fallbacks.inc()
        if plan.stats.method != "none":
            self.solver_objective.set(plan.stats.objective)
            self.solver_window.set(plan.stats.window)

        jobs = {j.key: j for j in snapshot.pending}
        length: dict[tuple[str, ...], float] = defaultdict(float)
        oldest: dict[tuple[str, ...], float] = defaultdict(float)
        reasons: dict[tuple[str, ...], float] = defaultdict(float)
        for hold in plan.holds:
            job = jobs.get(hold.job_key)
            if job is None:
                continue
            key = (_queue(job.queue), hold.level or DEFAULT_QUEUE)
            length[key] += 1
            oldest[key] = max(oldest[key], max(snapshot.now_s - job.submit_s, 0.0))
            reasons[(str(hold.reason),)] += 1
        self._replace(self.queue_length, length)
        self._replace(self.oldest_wait, oldest)
        self._replace(self.waiting, reasons)

        running: dict[tuple[str, ...], float] = defaultdict(float)
        for job_running in snapshot.running:
            running[(job_running.cluster,)] += 1
        for start in plan.starts:
            running[(start.cluster,)] += 1
        preempted = {p.job_key for p in plan.preemptions}
        for job_running in snapshot.running:
            if job_running.job.key in preempted:
                running[(job_running.cluster,)] -= 1
        self._replace(self.running, running)

        taken: dict[tuple[str, str], float] = defaultdict(float)
        for start in plan.starts:
            job = jobs.get(start.job_key)
            if job is not None:
                for node_name in start.nodes:
                    taken[(start.cluster, node_name)] += worker_gpus(job)
        # (free, total) per (cluster, GPU type) and per (cluster, domain)
        types: tuple[dict[tuple[str, ...], float], ...] = (defaultdict(float), defaultdict(float))
        domains: tuple[dict[tuple[str, ...], float], ...] = (defaultdict(float), defaultdict(float))
        ready: dict[tuple[str, ...], float] = {}
        for cluster in snapshot.clusters:
            ready[(cluster.name,)] = 1.0 if cluster.ready else 0.0
            for node in cluster.nodes:
                if not node.schedulable or not node.gpu_type:
                    continue
                left = node.free_gpus - taken.get((cluster.name, node.name), 0.0)
                left = max(left, 0.0) if cluster.ready else 0.0
                for figures, by in ((types, node.gpu_type), (domains, node.domain)):
                    if by:  # a node in no domain counts in no domain's series
                        figures[0][(cluster.name, by)] += left
                        figures[1][(cluster.name, by)] += node.gpus
        self._replace(self.gpus_free, types[0])
        self._replace(self.gpus_total, types[1])
        self._replace(self.domain_gpus_free, domains[0])
        self._replace(self.domain_gpus_total, domains[1])
        self._replace(self.member_ready, ready)

    def _replace(self, gauge: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
        """Set a labelled gauge to exactly ``values``: label sets no longer present go."""
        name = id(gauge)
        for labels in self._labels[name] - set(values):
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        self._labels[name] = set(values)

    def eta_ranges(
        self, scale: Sequence[float], judged: Sequence[int], misses: Sequence[int]
    ) -> None:
        """The ETA range's adaptive factors and judgement totals per side (low, high)."""
        for index, side in enumerate(SIDES):
            self.eta_range_factor.labels(side).set(scale[index])
            totals = {"hit": judged[index] - misses[index], "miss": misses[index]}
            for result, total in totals.items():
                seen = self._judged_seen[(side, result)]
                if total > seen:
                    self.eta_range_judged.labels(side, result).inc(total - seen)
                    self._judged_seen[(side, result)] = total

    # -- per job -------------------------------------------------------------------------------
    def dispatched(self, cluster: str, submit_s: float, created_s: float) -> None:
        self.dispatches.labels(cluster).inc()
        self.dispatch_latency.observe(max(created_s - submit_s, 0.0))

    def started(self, queue: str, submit_s: float, start_s: float) -> None:
        self.wait.labels(_queue(queue)).observe(max(start_s - submit_s, 0.0))

    def ended(
        self,
        phase: str,
        *,
        queue: str,
        submit_s: float,
        finish_s: float,
        gpu_type: str = "",
        predicted_s: float = 0.0,
        actual_s: float = 0.0,
    ) -> None:
        self.finished.labels(phase).inc()
        if phase != "Succeeded":
            return
        self.jct.labels(_queue(queue)).observe(max(finish_s - submit_s, 0.0))
        if predicted_s > 0 and actual_s > 0:
            error = abs(predicted_s - actual_s) / actual_s
            self.prediction_error.labels(gpu_type or "unknown").observe(error)

    def render(self) -> bytes:
        """The Prometheus text exposition of every series."""
        return generate_latest(self.registry)


# -- HTTP ------------------------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True


def serve(
    metrics: OperatorMetrics,
    address: str,
    port: int,
    ready: Callable[[], tuple[bool, str]],
) -> ThreadingHTTPServer:
    """Serve /metrics, /healthz and /readyz on ``address:port`` (0 = any free port) in a thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, metrics.render(), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n")
            elif path == "/readyz":
                ok, why = ready()
                self._send(200 if ok else 503, f"{why}\n".encode())
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

        def _send(self, code: int, body: bytes, kind: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args  # scrapes are not worth a log line each

    server = _Server((address, port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="cpn-metrics", daemon=True)
    thread.start()
    return server


# -- what the engine calls ---------------------------------------------------------------------
class Observer:
    """Metrics, readiness and the decision log of one operator process."""

    def __init__(
        self,
        config: OperatorConfig,
        *,
        metrics: OperatorMetrics | None = None,
        clock: Clock,
    ) -> None:
        self.config = config
        self.metrics = metrics if metrics is not None else OperatorMetrics()
        self.monotonic = clock.monotonic
        self.wall = clock.wall
        self.decisions: DecisionLog | None = None
        self.server: ThreadingHTTPServer | None = None
        self.last_cycle_at: float | None = None
        self.ready_intervals = 3.0
        self._writer: ThreadPoolExecutor | None = None
        self._writing: Future[None] | None = None

    def start(self) -> None:
        """Open the decision log and start the HTTP server, as configured."""
        if self.decisions is None:
            self.decisions = open_log(
                self.config.decision_log,
                max_bytes=self.config.decision_log_max_bytes,
                backups=self.config.decision_log_backups,
            )
            if self.decisions is not None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="cpn-decisions")
        if self.server is None and self.config.metrics_port:
            try:
                self.server = serve(
                    self.metrics, self.config.metrics_address, self.config.metrics_port, self.ready
                )
            except OSError:  # e.g. the port is taken: schedule anyway, say why loudly
                log.exception("metrics server not started on port %s", self.config.metrics_port)
                return
            log.info(
                "metrics on http://%s:%s/metrics",
                self.config.metrics_address,
                self.config.metrics_port,
            )

    def ready(self) -> tuple[bool, str]:
        """Ready when a cycle ended within ``ready_intervals`` x the loop's interval."""
        if self.last_cycle_at is None:
            return False, "no scheduling cycle yet"
        age = self.monotonic() - self.last_cycle_at
        limit = self.ready_intervals * max(self.config.interval_s, 1.0)
        if age > limit:
            return False, f"last cycle {age:.0f}s ago (limit {limit:.0f}s)"
        return True, f"last cycle {age:.1f}s ago"

    async def cycle(self, number: int, snapshot: Snapshot, plan: CyclePlan, wall_s: float) -> None:
        """After each cycle: metrics, readiness, and the decision record.

        The record is encoded and written by one writer thread, in cycle order, while the
        plan is applied (about 0.3 s for 5,000 pending jobs). At most one record is in
        flight: a cycle waits for the previous record before handing over its own.
        """
        self.last_cycle_at = self.monotonic()
        self.metrics.observe_cycle(snapshot, plan, wall_s, ended_s=self.wall())
        if self.decisions is None or self._writer is None:
            return
        if self._writing is not None and not self._writing.done():
            await asyncio.wrap_future(self._writing)
        writer = self._writer
        if writer is None:  # stopped while waiting
            return
        with contextlib.suppress(RuntimeError):  # shut down meanwhile: nothing more is logged
            self._writing = writer.submit(self._write, number, wall_s, snapshot, plan)

    def flush(self) -> None:
        """Wait until the decision record in flight, if any, is written."""
        if self._writing is not None:
            self._writing.result()

    def _write(self, number: int, wall_s: float, snapshot: Snapshot, plan: CyclePlan) -> None:
        decisions = self.decisions
        if decisions is None:
            return
        try:
            decisions.write(number, wall_s, snapshot, plan)
        except Exception:  # the log must never stop scheduling
            self.metrics.decision_log_errors.inc()
            log.exception("decision record of cycle %s not written", number)

    def cycle_applied(self, total_s: float) -> None:
        """A cycle's plan has been carried out, ``total_s`` after the cycle began."""
        self.metrics.cycle_total.observe(total_s)

    def dispatched(self, record: Record) -> None:
        if record.job is not None:
            self.metrics.dispatched(record.cluster, record.job.submit_s, self.wall())

    def dispatch_failed(self, cluster: str) -> None:
        self.metrics.dispatch_failures.labels(cluster).inc()

    def retrying(self) -> None:
        self.metrics.retries.inc()

    def started(self, record: Record) -> None:
        if record.job is not None and record.start_s:
            self.metrics.started(record.job.queue, record.job.submit_s, record.start_s)

    def ended(self, record: Record) -> None:
        if record.job is None:
            return
        self.metrics.ended(
            record.phase,
            queue=record.job.queue,
            submit_s=record.job.submit_s,
            finish_s=record.finish_s or self.wall(),
            gpu_type=record.gpu_type,
            predicted_s=record.predicted_runtime_s,
            actual_s=record.actual_s,
        )

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self._writer is not None:
            self._writer.shutdown(wait=True)  # flush the record in flight
            self._writer = None
        if self.decisions is not None:
            self.decisions.close()
            self.decisions = None


__all__ = ["Observer", "OperatorMetrics", "serve"]
