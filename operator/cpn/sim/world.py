"""The discrete-event world: simulated clusters running a trace under a scheduling plan.

The loop advances to the next event time (arrivals, completions, a retry's
``not_before_s``, and a periodic tick only when asked for), handles every event
of that instant, builds one :class:`~cpn.core.model.Snapshot`, calls the plan
function (the same :func:`cpn.core.cycle.plan_cycle` the operator calls), and
carries out the plan strictly: a plan that overcommits a node, names an unknown
job or starts a job twice raises :class:`InvalidPlan`, because it is a bug.

Per-event work is proportional to what changed: node and cluster values are
rebuilt only when their allocation changes, jobs are rebuilt only when they
arrive or are preempted; the snapshot's tuples are built from dicts kept up to
date incrementally.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from cpn.core.capacity import worker_gpus
from cpn.core.check import check_plan
from cpn.core.errors import CpnError, FieldError, InvalidSpec
from cpn.core.estimator import Estimator
from cpn.core.eta import Projection
from cpn.core.eta_calibration import CalibrationConfig, WaitCalibrator
from cpn.core.fairshare import FairShare
from cpn.core.fifodue import (
    Outcome,
    due_times,
    resumed_due_s,
    runtime_ratio,
    stamped,
)
from cpn.core.model import CyclePlan, Job, Running, Snapshot, Start
from cpn.core.policy import QueuePolicy
from cpn.core.preemption import saved_s
from cpn.sim.caches import Caches
from cpn.sim.clusters import ClusterSet
from cpn.sim.fleet import Fleet
from cpn.sim.jobs import scheduler_job, truth_for
from cpn.sim.records import JobRecord, SimResult
from cpn.sim.speed import TrueRuntime
from cpn.sim.staleness import Staleness
from cpn.sim.trace import TraceJob

PlanFn = Callable[[Snapshot], CyclePlan]
#: (snapshot, max_cycles, plan, until[, arrivals]) -> projections (:func:`cpn.core.eta.project`).
ProjectFn = Callable[..., Mapping[str, Projection]]

#: Windows of past submissions a projection expects again (``eta_arrivals_s``).
ETA_ARRIVAL_REPEATS = 10
TransferFn = Callable[[Job, str, Snapshot], float | None]
#: (cycle, wall seconds, snapshot, plan) of every cycle: the operator's decision log
#: (:meth:`cpn.decisions.DecisionLog.write`) takes exactly this.
CycleRecorder = Callable[[int, float, Snapshot, CyclePlan], None]

# Event kinds, in the order they are handled within one instant.
_COMPLETE, _ARRIVE, _WAKE, _TICK = 0, 1, 2, 3


class InvalidPlan(CpnError):
    """A plan the world cannot carry out (a scheduler bug): over capacity, unknown job, ..."""


@dataclass(slots=True)
class _State:
    """Simulator-side state of one admitted job."""

    job: Job
    record: JobRecord
    remaining: float = 1.0  # fraction of the work still to do
    token: int = 0  # bumped at each start/preempt; stale completion events are ignored
    running: Running | None = None
    compute_start_s: float = 0.0  # when useful work began in this attempt
    full_runtime_s: float = 0.0  # true runtime of the whole job on this attempt's GPU type
    predicted_offset_s: float = 0.0  # predicted transfer + restart of this attempt
    predicted_remaining: float = 1.0  # fraction of the work left when this attempt started


def _default_plan() -> PlanFn:
    from cpn.core.cycle import plan_cycle

    return plan_cycle


def _default_project(
    snapshot: Snapshot,
    max_cycles: int,
    plan: PlanFn,
    until: Collection[str],
    arrivals: Sequence[Job] = (),
) -> dict[str, Projection]:
    from cpn.core.eta import project_range

    return project_range(snapshot, max_cycles=max_cycles, plan=plan, until=until, arrivals=arrivals)


def _default_transfer() -> TransferFn:
    from cpn.core.transfer import transfer_s

    return transfer_s


class World:
    """Simulated member clusters running a trace under a plan function.

    ``plan`` defaults to :func:`cpn.core.cycle.plan_cycle` and ``transfer`` to
    :func:`cpn.core.transfer.transfer_s`. ``tick_s`` adds a cycle every
    ``tick_s`` seconds while jobs are pending and running (preemptive policies
    such as ``las`` need it; None = cycles only on events). Jobs whose trace
    leaves ``checkpoint`` blank declare a checkpoint with probability ``checkpointable``
    (drawn once per job from its id and ``seed``, so the draw does not depend on the
    policy or on arrival order). A preempted job pays the policy's
    ``preemption.restart_cost_s`` when it starts again and, if it checkpoints, loses the
    compute done since its last checkpoint (see :func:`cpn.core.preemption.saved_s`);
    one that does not checkpoint starts over. With ``unlabelled`` the scheduler sees
    only what most real submissions carry (submit time, GPUs, user, group): the trace's
    model, batch size and declared work stay with the truth. ``progress`` is called
    with the number of jobs that just finished.

    With ``skip_full_cycles`` (the default) the world skips a cycle when no node has
    room for one worker of any pending job and the policy cannot preempt: every
    valid plan would then start nothing, so the outcome is the same and overloaded
    traces run much faster. Only the hold statistics differ. New jobs get their FIFO
    due time at their arrival instant all the same, as in the operator's cycle: a due
    time stamped later would rest on later estimates and change the outcome.

    With ``eta`` the world records each job's first ETA the way the operator
    computes it: at every instant where jobs arrived, after that instant's cycle,
    :func:`cpn.core.eta.project` (``project``, bounded by ``eta_max_cycles``
    future cycles and replaying ``plan``) runs on the snapshot and each job
    still pending and never projected gets its ``eta_*`` fields. Projections use
    the run's estimator (what the scheduler believes), never the truth. They stop
    once the new jobs are placed (the same ETAs for them, less work); with
    ``eta_every`` = k only every k-th admitted job is projected (a sample, k
    times cheaper on long queues). Each first ETA is also calibrated from
    experience (``eta_cal_start_s``): a :class:`~cpn.core.eta_calibration.WaitCalibrator`
    configured by ``eta_calibration`` follows the projected jobs (their first
    projected wait, the starts later projections give them, their actual start)
    and scales each new projection by what it learnt up to that instant: nothing
    of the future.

    With ``reestimate`` (the default) waiting and running jobs are re-estimated when
    the estimator learned something that may change their estimate, before the next
    snapshot is taken (see :meth:`refresh_estimates`): a job of a model nobody had
    run yet gets the better estimate as soon as a job of its model finished, and a
    running one a better predicted end. Estimators that learn nothing (``learns = False``: oracle,
    noisy, user) are never asked twice.

    ``on_cycle`` is called with every cycle's number, planning time, snapshot and plan, as
    the operator writes them to its decision log (``cpn simulate --decisions``).
    """

    def __init__(
        self,
        trace: Sequence[TraceJob],
        clusters: ClusterSet,
        policy: QueuePolicy,
        estimator: Estimator,
        *,
        truth: TrueRuntime | None = None,
        plan: PlanFn | None = None,
        transfer: TransferFn | None = None,
        tick_s: float | None = None,
        checkpointable: float = 0.0,
        unlabelled: bool = False,
        seed: int = 0,
        progress: Callable[[int], None] | None = None,
        policy_name: str | None = None,
        estimator_name: str = "",
        skip_full_cycles: bool = True,
        eta: bool = False,
        eta_max_cycles: int = 400,
        eta_every: int = 1,
        eta_arrivals_s: float | None = None,
        eta_calibration: CalibrationConfig | None = None,
        project: ProjectFn | None = None,
        reestimate: bool = True,
        on_cycle: CycleRecorder | None = None,
    ) -> None:
        if tick_s is not None and tick_s <= 0:
            raise ValueError("tick_s must be positive")
        self.clusters = clusters
        self.policy = policy
        self.policy_name = policy_name or policy.name
        self.estimator = estimator
        self.estimator_name = estimator_name
        self.plan = plan or _default_plan()
        self.transfer = transfer or _default_transfer()
        self.tick_s = tick_s
        if not 0.0 <= checkpointable <= 1.0:
            raise ValueError("checkpointable must be between 0 and 1")
        self.checkpointable = checkpointable
        self.unlabelled = unlabelled
        self.seed = seed
        self.progress = progress
        self.gpu_types = clusters.gpu_types
        self.total_gpus = clusters.total_gpus
        self.truth = truth or truth_for(trace, clusters.reference_gpu)

        self._fleet = Fleet(clusters.in_domains(policy.domains), policy)
        self._caches = Caches(policy)
        half_life_s = policy.fair_share.half_life_h * 3600.0
        self._usage = FairShare(half_life_s, policy.quotas.budget_period)  # finished attempts

        self._trace = sorted(trace, key=lambda j: j.submit_s)
        self._check_trace()
        self._records: list[JobRecord] = []
        self._states: dict[str, _State] = {}
        self._pending: dict[str, Job] = {}
        self._needs: dict[float, int] = {}  # GPUs one worker needs -> pending jobs needing it
        self._unstamped = False  # a pending job has no FIFO due time yet
        self._outcomes: list[Outcome] = []  # finished jobs, for the runtime ratio
        self.skip_full_cycles = skip_full_cycles
        self._skipped = 0
        self._running: dict[str, Running] = {}
        self._events: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._tick_armed = False
        self._busy_gpus = 0.0
        self._times: list[float] = []
        self._busy: list[float] = []
        self._queue: list[int] = []
        self._cycles = 0
        self._plan_wall_s = 0.0
        self._preemptions = 0
        self.now_s = 0.0
        if eta and (eta_max_cycles < 1 or eta_every < 1):
            raise ValueError("eta_max_cycles and eta_every must be at least 1")
        self.eta = eta
        self.eta_max_cycles = eta_max_cycles
        self.eta_every = eta_every
        # Expected arrivals in projections: the last eta_arrivals_s of submissions, repeated.
        self.eta_arrivals_s = eta_arrivals_s
        self._submitted: list[Job] = []
        self._admitted = 0
        self.project = project or _default_project
        self.on_cycle = on_cycle
        self._unprojected: list[str] = []  # arrived jobs awaiting their first ETA
        self._eta_calls = 0
        self._eta_wall_s = 0.0
        self.calibrator = WaitCalibrator(eta_calibration)
        # Re-estimation of waiting jobs (refresh_estimates).
        self.reestimate = reestimate and estimator.learns
        self.reestimates = 0  # estimate() calls made for jobs already estimated
        self.reestimate_wall_s = 0.0  # time spent making them
        self._staleness = Staleness(estimator)

    # ------------------------------------------------------------------ setup

    def _check_trace(self) -> None:
        names = set(self._fleet.names)
        for job in self._trace:
            places = [("data_cluster", job.data_cluster)]
            places += [("dataset_cluster", i.location) for i in job.inputs]
            for column, place in places:
                if place is not None and place not in names:
                    raise InvalidSpec(
                        [FieldError(column, f"unknown cluster {place!r}")],
                        where=f"job {job.job_id}",
                    )

    # ------------------------------------------------------------------ events

    def _push(self, at_s: float, kind: int, key: str = "", token: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at_s, kind, self._seq, key, token))

    def run(self) -> SimResult:
        """Run the whole trace; returns every job's record and the time series."""
        started = time.perf_counter()
        for trace in self._trace:
            self._push(trace.submit_s, _ARRIVE, trace.job_id)
        by_id = {t.job_id: t for t in self._trace}
        events = self._events
        while events:
            now = events[0][0]
            self.now_s = now
            finished = 0
            while events and events[0][0] == now:
                _, kind, _, key, token = heapq.heappop(events)
                if kind == _COMPLETE:
                    finished += self._complete(key, token)
                elif kind == _ARRIVE:
                    self._arrive(by_id[key])
                elif kind == _TICK:
                    self._tick_armed = False
            if finished and self.progress is not None:
                self.progress(finished)
            if self._pending and self._may_start():
                self._cycle()
            elif self._unstamped:
                self.snapshot()  # due times stamped now, as the operator's cycle does
            if self._unprojected:
                self._first_etas()
            self._record_sample()
            if self.tick_s is not None and not self._tick_armed and self._pending and self._running:
                self._tick_armed = True
                self._push(now + self.tick_s, _TICK)
        wall = time.perf_counter() - started
        return SimResult(
            policy=self.policy_name,
            estimator=self.estimator_name,
            records=tuple(self._records),
            total_gpus=self.total_gpus,
            times_s=tuple(self._times),
            busy_gpus=tuple(self._busy),
            queue_len=tuple(self._queue),
            cycles=self._cycles,
            wall_s=wall,
            plan_wall_s=self._plan_wall_s,
            preemptions=self._preemptions,
            skipped_cycles=self._skipped,
            moved_gb=self._caches.moved_gb,
            eta_calls=self._eta_calls,
            eta_wall_s=self._eta_wall_s,
            eta_max_cycles=self.eta_max_cycles if self.eta else 0,
        )

    def _record_sample(self) -> None:
        self._times.append(self.now_s)
        self._busy.append(self._busy_gpus)
        self._queue.append(len(self._pending))

    def _arrive(self, trace: TraceJob) -> None:
        job = scheduler_job(
            trace,
            max_node_gpus=self._fleet.max_node_gpus,
            unlabelled=self.unlabelled,
            seed=self.seed,
            checkpointable=self.checkpointable,
        )
        record = JobRecord(
            job_id=trace.job_id,
            submit_s=trace.submit_s,
            gpus=trace.gpus,
            duration_s=trace.duration_s,
            model=trace.model,
            user=trace.user,
            group=trace.group,
        )
        self._records.append(record)
        if not self._fleet.fits_somewhere(job):
            record.infeasible = True
            return
        job = replace(job, estimate=self.estimator.estimate(job, self.gpu_types))
        self._staleness.estimated(job.key)
        self._states[job.key] = _State(job=job, record=record)
        self._enqueue(job)
        if self.eta:
            self._admitted += 1
            if (self._admitted - 1) % self.eta_every == 0:
                self._unprojected.append(job.key)
            if self.eta_arrivals_s:
                self._submitted.append(job)

    def refresh_estimates(self) -> int:
        """Re-estimate the jobs whose estimate may be out of date; returns how many.

        Waiting jobs get the new estimate; running jobs too, with their predicted end
        recomputed from it (what the scheduler believes about when their room frees).

        Which jobs, :class:`~cpn.sim.staleness.Staleness` says: those of a model or user
        the estimator observed since their estimate, or all when it retrained. The
        estimates are asked for in one batch (``Estimator.estimate_many``).
        """
        waiting = self._pending.values()
        stale = self._staleness.stale([*waiting, *(r.job for r in self._running.values())])
        if not stale:
            return 0
        started = time.perf_counter()
        estimates = self.estimator.estimate_many(stale, self.gpu_types)
        self.reestimate_wall_s += time.perf_counter() - started
        self.reestimates += len(stale)
        for job, estimate in zip(stale, estimates, strict=True):
            self._staleness.estimated(job.key)
            if estimate == job.estimate:
                continue
            new = replace(job, estimate=estimate)
            state = self._states[job.key]
            state.job = new
            running = self._running.get(job.key)
            if running is None:
                self._pending[job.key] = new
                continue
            predicted = estimate.on(running.gpu_type)
            end = running.predicted_end_s
            if predicted is not None:
                end = running.start_s + state.predicted_offset_s
                end += predicted * state.predicted_remaining
            state.running = self._running[job.key] = replace(running, job=new, predicted_end_s=end)
        return len(stale)

    def _enqueue(self, job: Job) -> None:
        self._pending[job.key] = job
        self._unstamped = self._unstamped or job.fifo_due_s is None
        need = worker_gpus(job)
        self._needs[need] = self._needs.get(need, 0) + 1
        if job.not_before_s > self.now_s:
            self._push(job.not_before_s, _WAKE, job.key)

    # ------------------------------------------------------------------ cycle

    def _may_start(self) -> bool:
        """False when no valid plan could start or preempt anything now."""
        if not self.skip_full_cycles:
            return True
        if self.policy.preemption.enabled and any(r.job.checkpoint for r in self._running.values()):
            return True  # a preemption may be possible
        if self._fleet.has_room(min(self._needs)):
            return True
        self._skipped += 1
        return False

    def snapshot(self) -> Snapshot:
        """The world as the scheduler sees it now (waiting jobs' estimates brought up to date,
        new jobs stamped with their FIFO due time)."""
        if self.reestimate:
            self.refresh_estimates()
        snapshot = Snapshot(
            now_s=self.now_s,
            policy=self.policy,
            pending=tuple(self._pending.values()),
            running=tuple(self._running.values()),
            clusters=self._fleet.clusters(),
            bandwidth_gbps=self.clusters.bandwidth_gbps,
            data_cache=self._caches.view(),
            usage=self._usage.view(),
        )
        if self._unstamped:
            snapshot = self._stamp_due(snapshot)
        return snapshot

    def _stamp_due(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with a FIFO due time on each pending job first seen in it
        (:func:`cpn.core.fifodue.due_times`, as the operator stamps them)."""
        ratio = runtime_ratio(self._outcomes, snapshot.running, snapshot.now_s)
        due = due_times(snapshot, ratio)
        for key, stamp in due.items():
            job = stamped(self._pending[key], stamp)
            self._pending[key] = self._states[key].job = job
        # Still unstamped only while the fleet has no GPUs (due_times then stamps none).
        self._unstamped = len(due) < sum(j.fifo_due_s is None for j in snapshot.pending)
        if not due:
            return snapshot
        return replace(snapshot, pending=tuple(self._pending.values()))

    def _cycle(self) -> None:
        snapshot = self.snapshot()
        started = time.perf_counter()
        plan = self.plan(snapshot)
        wall_s = time.perf_counter() - started
        self._plan_wall_s += wall_s
        self._cycles += 1
        if self.on_cycle is not None:
            self.on_cycle(self._cycles, wall_s, snapshot, plan)
        self.apply(plan, snapshot)

    def _first_etas(self) -> None:
        """Project the queue (after this instant's cycle) for jobs that just arrived."""
        waiting = [k for k in self._unprojected if k in self._pending]
        self._unprojected.clear()
        if not waiting:
            return  # every new job started in its arrival cycle: nothing to tell anyone
        snapshot = self.snapshot()
        started = time.perf_counter()
        if self.eta_arrivals_s:
            projection = self.project(
                snapshot, self.eta_max_cycles, self.plan, waiting, self._expected_arrivals()
            )
        else:
            projection = self.project(snapshot, self.eta_max_cycles, self.plan, waiting)
        self._eta_wall_s += time.perf_counter() - started
        self._eta_calls += 1
        now = self.now_s
        told = self.calibrator.tell(projection, self._pending, now, waiting)
        for key in waiting:
            record = self._states[key].record
            record.eta_at_s = now
            found = projection.get(key)
            if found is not None:
                record.eta_start_s = found.start_s
                record.eta_end_s = found.end_s
                stated = told[key]
                record.eta_cal_start_s = stated.start_s
                record.eta_low_s, record.eta_high_s = stated.start_low_s, stated.start_high_s

    def _expected_arrivals(self) -> list[Job]:
        """The jobs submitted in the last ``eta_arrivals_s``, as if submitted again one, two, ...
        windows later (ETA_ARRIVAL_REPEATS windows): what the projection expects to arrive."""
        window = self.eta_arrivals_s or 0.0
        recent = []
        for job in reversed(self._submitted):
            if job.submit_s <= self.now_s - window:
                break
            recent.append(job)
        return [
            replace(job, key=f"{job.key}+{k}", submit_s=job.submit_s + k * window)
            for k in range(1, ETA_ARRIVAL_REPEATS + 1)
            for job in reversed(recent)
        ]

    def apply(self, plan: CyclePlan, snapshot: Snapshot) -> None:
        """Carry out ``plan`` (made from ``snapshot``) strictly: InvalidPlan on any violation
        :func:`cpn.core.check.check_plan` finds."""
        violations = check_plan(plan, snapshot)
        if violations:
            raise InvalidPlan("; ".join(str(v) for v in violations))
        for preempt in plan.preemptions:
            self._preempt(preempt.job_key)
        for start in plan.starts:
            self._start(start, snapshot)

    def _start(self, start: Start, snapshot: Snapshot) -> None:
        key, cluster, gpu_type, nodes = start.job_key, start.cluster, start.gpu_type, start.nodes
        state = self._states[key]
        # Each start is an attempt, as the operator counts them (bumped at dispatch), so the
        # formula's ``attempts`` reads the same in both.
        waiting = self._pending[key]
        job = state.job = replace(waiting, attempts=waiting.attempts + 1)
        self._fleet.take(job, cluster, gpu_type, nodes)
        transfer_s = self.transfer(job, cluster, snapshot)
        if transfer_s is None:
            raise InvalidPlan(f"job {key!r}: its data cannot reach cluster {cluster!r}")
        if job.inputs:  # with what the caches hold and this cycle's shared stagings
            transfer_s = start.transfer_s

        record = state.record
        restart_s = self.policy.preemption.restart_cost_s if record.preemptions else 0.0
        full = self.truth.runtime_s(key, gpu_type)
        now = self.now_s
        state.token += 1
        state.full_runtime_s = full
        state.compute_start_s = now + transfer_s + restart_s
        true_end = state.compute_start_s + full * state.remaining
        predicted = start.predicted_runtime_s * state.remaining
        running = Running(
            job=job,
            cluster=cluster,
            gpu_type=gpu_type,
            nodes=tuple(nodes),
            start_s=now,
            predicted_end_s=now + start.transfer_s + restart_s + predicted,
            alone=start.alone,
        )
        state.running = running
        state.predicted_offset_s = start.transfer_s + restart_s
        state.predicted_remaining = state.remaining
        del self._pending[key]
        need = worker_gpus(job)
        self._needs[need] -= 1
        if not self._needs[need]:
            del self._needs[need]
        self._running[key] = running
        self._busy_gpus += job.gpus
        record.moved_gb += self._caches.started(job, start, now, self._running.values())
        if record.first_start_s is None:
            record.first_start_s = now
            self.calibrator.started(key, now)
        record.cluster = cluster
        record.gpu_type = gpu_type
        record.estimate_s = job.estimate.on(gpu_type)
        self._push(true_end, _COMPLETE, key, state.token)

    def _release(self, state: _State) -> float:
        """Free the job's resources; returns the time it held them in this attempt."""
        running = state.running
        assert running is not None
        job = state.job
        self._fleet.release(job, running.cluster, running.nodes)
        del self._running[job.key]
        self._caches.ended(running.cluster, self._running.values())
        self._busy_gpus -= job.gpus
        held = self.now_s - running.start_s
        self._usage.add_run(job.group, job.user, job.gpus, running.start_s, self.now_s)
        state.record.run_s += held
        state.record.gpu_s += held * job.gpus
        state.running = None
        return held

    def _complete(self, key: str, token: int) -> int:
        state = self._states[key]
        if state.token != token or state.running is None:
            return 0  # a completion scheduled before a preemption
        gpu_type = state.running.gpu_type
        self._release(state)
        state.remaining = 0.0
        record = state.record
        record.finish_s = self.now_s
        record.runtime_s = state.full_runtime_s
        self.estimator.observe(state.job, gpu_type, state.full_runtime_s)
        if state.job.fifo_basis_s:
            done = Outcome(state.job.gpus, state.job.fifo_basis_s, state.full_runtime_s)
            self._outcomes.append(done)
        if self.reestimate:
            self._staleness.observed(state.job)
        self._staleness.forget(key)
        return 1

    def _preempt(self, key: str) -> None:
        state = self._states[key]
        job = state.job
        held = self._release(state)
        state.token += 1
        kept = 0.0
        if job.checkpoint:
            interval = job.checkpoint_interval_s or self.policy.preemption.checkpoint_interval_s
            kept = saved_s(self.now_s - state.compute_start_s, interval)
            state.remaining = max(0.0, state.remaining - kept / state.full_runtime_s)
        state.record.lost_gpu_s += max(0.0, held - kept) * job.gpus
        state.record.preemptions += 1
        self._preemptions += 1
        job = replace(
            job,
            attained_gpu_s=job.attained_gpu_s + held * job.gpus,
            fifo_due_s=resumed_due_s(job.fifo_due_s, held),
        )
        state.job = job
        self._enqueue(job)
