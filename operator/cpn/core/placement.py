"""Joint placement of the head of the queue: a PuLP MILP solved by HiGHS.

For each job of the window and each (cluster, GPU type) where it fits now, a
binary ``x[j, o]`` starts it there; ``y[j]`` defers it. The objective is the
priority-weighted completion time::

    minimise  sum_j w_j * ( sum_o cost(j, o) * x[j, o]  +  defer(j) * y[j] )

where ``cost = transfer_weight * transfer_s + runtime_weight * runtime_s``.
With ``placement.wait_for_faster``, ``defer(j) = wait_weight * (time until it
would fit as running jobs end) + its best cost``, so a job may wait for a
faster GPU type; without it (the default) ``defer(j)`` is a penalty larger than
any cost, so the solver first starts as much weighted work as fits and only
then minimises completion time: work-conserving. ``w_j`` (:func:`defer_weights`)
halves every :data:`RANK_HALF_LIFE` ranks and grows with the job's GPUs, but never
above a higher-ranked job's: the queue order decides contention unless lower-ranked
jobs gain much more, and small jobs ranked after a bigger one cannot take its room.
Constraints: GPUs, CPU and memory of each group; nodes held by a reservation
only for jobs that end before it starts; group and user quotas (total and per
GPU type, and concurrent jobs: a group's, user's or domain's starts in the window are at most
its ``jobs`` minus those it has running); one choice per job.

The solver is HiGHS, named explicitly, single-threaded with a fixed seed and the
policy's time limit; tiny rank-based tie-break terms make the optimum unique.
When it fails or times out without a solution, :func:`solve_window` says so in
its stats and the caller keeps its greedy decisions.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import highspy
import pulp

from cpn.core.capacity import Capacity, GroupKey, worker_gpus
from cpn.core.model import SolveStats
from cpn.core.policy import QueuePolicy
from cpn.core.queue import Ranked
from cpn.core.quota import QuotaLedger


def _quiet_banner() -> None:
    """Have HiGHS print its banner now, into /dev/null.

    HiGHS writes "Running HiGHS ... Copyright ..." on the process's C-level stdout
    when the process creates its first solver, whatever ``msg`` says, and never
    again. Creating that first one here, at import, with file descriptor 1 pointed
    at /dev/null keeps stdout for what the commands print (``--json``: one document)
    and the banner out of the operator's log, for every caller of the MILP.
    """
    if sys.stdout is not None:
        sys.stdout.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to keep clean
        saved = -1
    try:
        if saved >= 0:
            os.dup2(null, 1)
        highspy.Highs()  # type: ignore[no-untyped-call]
    finally:
        if saved >= 0:
            os.dup2(saved, 1)
            os.close(saved)
        os.close(null)


_quiet_banner()

#: The weight of a job halves every this many ranks.
RANK_HALF_LIFE = 4.0
_TIE = 1e-6


class Candidate(NamedTuple):
    """Where a job could run, and what it would cost there.

    A named tuple, not a frozen dataclass: every cycle makes one per job and group
    (400,000 at 10,000 pending over 40 groups), and a tuple is made in half the time.
    """

    key: GroupKey
    runtime_s: float
    transfer_s: float
    cost: float


@dataclass(frozen=True, slots=True)
class Choice:
    """A candidate that fits now, and the reserved nodes it must avoid."""

    candidate: Candidate
    exclude: frozenset[str]


@dataclass(frozen=True, slots=True)
class WindowResult:
    """Candidate chosen per job key (None = defer), or no assignment on failure."""

    assignment: Mapping[str, Candidate | None] | None
    stats: SolveStats


def greedy_is_optimal(
    window: Sequence[Ranked], choices: Mapping[str, Sequence[Choice]], capacity: Capacity
) -> bool:
    """True when every job can have its cheapest fitting choice at once (no contention)."""
    demand: dict[GroupKey, float] = {}
    for item in window:
        options = choices.get(item.job.key, ())
        if not options:
            continue
        best = min(options, key=lambda c: (c.candidate.cost, c.candidate.key))
        key = best.candidate.key
        demand[key] = demand.get(key, 0.0) + item.job.gpus
    return all(need <= capacity.free_gpus(key) + 1e-9 for key, need in demand.items())


def defer_weights(window: Sequence[Ranked]) -> list[float]:
    """Each job's weight in the objective: by rank and by size, never above a higher rank's.

    ``w_j = max(g_j * 0.5 ** (j / RANK_HALF_LIFE), w_{j+1} * 2 ** (1 / RANK_HALF_LIFE))``
    with ``g_j`` the job's GPUs: deferring a 4-GPU job costs what deferring four 1-GPU
    jobs of its rank would, so 1-GPU jobs ranked just after it cannot take its room
    cycle after cycle (weighing by rank alone let them: on Gavel's trace b436b2 a 4-GPU
    job of 0.38 h waited 118 h); and a job never weighs less than one ranked below it,
    so a small job still wins a conflict with a bigger job ranked just after it.
    """
    step = 0.5 ** (1.0 / RANK_HALF_LIFE)
    out = [0.0] * len(window)
    after = 0.0
    for j in range(len(window) - 1, -1, -1):
        gpus = window[j].job.gpus
        out[j] = after = max(
            (gpus if gpus > 0 else 1.0) * 0.5 ** (j / RANK_HALF_LIFE), after / step
        )
    return out


def solve_window(
    window: Sequence[Ranked],
    choices: Mapping[str, Sequence[Choice]],
    defer_cost: Mapping[str, float],
    capacity: Capacity,
    quota: QuotaLedger,
    policy: QueuePolicy,
) -> WindowResult:
    """Solve the window's placement MILP; see the module docstring."""
    if greedy_is_optimal(window, choices, capacity):
        return WindowResult(
            assignment=None, stats=SolveStats(method="greedy", status="Optimal", window=len(window))
        )
    finite = [c for c in defer_cost.values() if math.isfinite(c)]
    finite += [o.candidate.cost for opts in choices.values() for o in opts]
    big = 10.0 * max(finite, default=1.0) + 1.0
    problem = pulp.LpProblem("cpn_window", pulp.LpMinimize)
    x: dict[tuple[int, int], pulp.LpVariable] = {}
    y: dict[int, pulp.LpVariable] = {}
    objective = []
    weights = defer_weights(window)
    for j, item in enumerate(window):
        weight = weights[j]
        options = choices.get(item.job.key, ())
        y[j] = problem.add_variable(f"y_{j}", 0, 1, cat="Binary")
        defer = defer_cost.get(item.job.key, math.inf)
        defer = defer if math.isfinite(defer) else big
        objective.append(weight * defer * y[j])
        for o, choice in enumerate(options):
            var = problem.add_variable(f"x_{j}_{o}", 0, 1, cat="Binary")
            x[(j, o)] = var
            tie = _TIE * big * (j + 1) * (o + 1) / (len(window) * max(len(options), 1))
            objective.append((weight * choice.candidate.cost + tie) * var)
        problem += pulp.lpSum(x[(j, o)] for o in range(len(options))) + y[j] == 1, f"one_{j}"
    problem += pulp.lpSum(objective)
    _capacity_constraints(problem, window, choices, x, capacity)
    _quota_constraints(problem, window, choices, x, quota)
    solver = pulp.HiGHS(
        msg=False, timeLimit=policy.placement.time_limit_s, threads=1, random_seed=0
    )
    try:
        problem.solve(solver)
    except pulp.PulpSolverError as err:  # pragma: no cover - solver crash
        return WindowResult(
            assignment=None,
            stats=SolveStats(method="milp", status="Error", window=len(window), fallback=str(err)),
        )
    status = pulp.LpStatus[problem.status]
    if status != "Optimal" and problem.sol_status not in (pulp.LpSolutionIntegerFeasible,):
        return WindowResult(
            assignment=None,
            stats=SolveStats(
                method="milp", status=status, window=len(window), fallback=f"solver {status}"
            ),
        )
    assignment: dict[str, Candidate | None] = {}
    for j, item in enumerate(window):
        chosen: Candidate | None = None
        for o, choice in enumerate(choices.get(item.job.key, ())):
            value = x[(j, o)].value()
            if value is not None and value > 0.5:
                chosen = choice.candidate
        assignment[item.job.key] = chosen
    value = pulp.value(problem.objective)
    return WindowResult(
        assignment=assignment,
        stats=SolveStats(
            method="milp", status=status, objective=float(value or 0.0), window=len(window)
        ),
    )


def _capacity_constraints(
    problem: pulp.LpProblem,
    window: Sequence[Ranked],
    choices: Mapping[str, Sequence[Choice]],
    x: Mapping[tuple[int, int], pulp.LpVariable],
    capacity: Capacity,
) -> None:
    for key in sorted(capacity.groups):
        usable = [s for s in capacity.groups[key] if s.usable]
        terms_gpu, terms_cpu, terms_mem, terms_held = [], [], [], []
        held: frozenset[str] = frozenset()
        for j, item in enumerate(window):
            job = item.job
            for o, choice in enumerate(choices.get(job.key, ())):
                if choice.candidate.key != key:
                    continue
                need = worker_gpus(job) * job.workers
                terms_gpu.append(need * x[(j, o)])
                terms_cpu.append(job.cpu * job.workers * x[(j, o)])
                terms_mem.append(job.memory_gib * job.workers * x[(j, o)])
                if choice.exclude:
                    terms_held.append(need * x[(j, o)])
                    held |= choice.exclude
        if not terms_gpu:
            continue
        tag = "_".join(key)
        problem += pulp.lpSum(terms_gpu) <= sum(s.free_gpus for s in usable), f"gpu_{tag}"
        problem += pulp.lpSum(terms_cpu) <= sum(s.free_cpu for s in usable), f"cpu_{tag}"
        problem += pulp.lpSum(terms_mem) <= sum(s.free_memory_gib for s in usable), f"mem_{tag}"
        if terms_held:
            room = sum(s.free_gpus for s in usable if s.name not in held)
            problem += pulp.lpSum(terms_held) <= room, f"held_{tag}"


def _quota_constraints(
    problem: pulp.LpProblem,
    window: Sequence[Ranked],
    choices: Mapping[str, Sequence[Choice]],
    x: Mapping[tuple[int, int], pulp.LpVariable],
    quota: QuotaLedger,
) -> None:
    rows: dict[tuple[str, str, str], list[pulp.LpAffineExpression]] = {}
    room: dict[tuple[str, str, str], float] = {}
    job_rows: dict[tuple[str, str], list[pulp.LpVariable]] = {}
    slots: dict[tuple[str, str], int] = {}
    for j, item in enumerate(window):
        job = item.job
        for bucket in quota.buckets(job):
            limit = bucket.limit
            left = quota.job_room(bucket)
            if left is not None:
                slots[bucket.usage_key] = left
                terms = job_rows.setdefault(bucket.usage_key, [])
                terms += (x[(j, o)] for o in range(len(choices.get(job.key, ()))))
            for o, choice in enumerate(choices.get(job.key, ())):
                gpu_type = choice.candidate.key[1]
                if limit.gpus is not None:
                    row = (*bucket.usage_key, "")
                    rows.setdefault(row, []).append(job.gpus * x[(j, o)])
                    room[row] = limit.gpus - quota.used(bucket)
                if gpu_type in limit.per_type:
                    row = (*bucket.usage_key, gpu_type)
                    rows.setdefault(row, []).append(job.gpus * x[(j, o)])
                    room[row] = limit.per_type[gpu_type] - quota.used(bucket, gpu_type)
    for index, row in enumerate(sorted(rows)):
        problem += pulp.lpSum(rows[row]) <= room[row], f"quota_{index}"
    # one row per group, user or domain with a job limit: its starts <= limit - running
    for index, key in enumerate(sorted(slots)):
        if job_rows[key]:
            problem += pulp.lpSum(job_rows[key]) <= slots[key], f"jobs_{index}"
