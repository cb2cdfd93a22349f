"""Run a trace under named policies: what the CLI, the benchmarks and the tests call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from cpn.core.policy import QueuePolicy
from cpn.sim.clusters import ClusterSet
from cpn.sim.estimators import make_estimator
from cpn.sim.jobs import truth_for
from cpn.sim.records import SimResult
from cpn.sim.trace import TraceJob
from cpn.sim.world import CycleRecorder, PlanFn, World

#: Cycle interval used for preemptive policies when none is given (seconds).
DEFAULT_TICK_S = 300.0

#: Future cycles one first-ETA projection may replay (``--eta``).
DEFAULT_ETA_MAX_CYCLES = 400


def resolve_policy(spec: str) -> tuple[str, QueuePolicy]:
    """A preset name (``fifo``, ``sjf``, ``oracle``, ``las``, ``gavel``, ``default``) or a
    policy YAML file, as (display name, policy). KeyError for an unknown name."""
    path = Path(spec)
    if spec.endswith((".yaml", ".yml")) or path.is_file():
        from cpn.api.policy import parse_policy

        policy = parse_policy(path.read_text(encoding="utf-8"))
        return path.stem, policy
    from cpn.core.presets import preset_policy

    return spec, preset_policy(spec)


def uses_oracle(name: str, policy: QueuePolicy) -> bool:
    """True for the ``oracle`` baseline: shortest TRUE runtime first."""
    return name == "oracle" or policy.ordering == "oracle"


def simulate(
    trace: Sequence[TraceJob],
    clusters: ClusterSet,
    policy: QueuePolicy,
    *,
    name: str | None = None,
    estimator: str = "oracle",
    sigma: float = 0.5,
    seed: int = 0,
    tick_s: float | None = None,
    plan: PlanFn | None = None,
    progress: Callable[[int], None] | None = None,
    eta: bool = False,
    eta_max_cycles: int = DEFAULT_ETA_MAX_CYCLES,
    eta_every: int = 1,
    eta_arrivals_s: float | None = None,
    checkpointable: float = 0.0,
    unlabelled: bool = False,
    on_cycle: CycleRecorder | None = None,
) -> SimResult:
    """Simulate ``trace`` on ``clusters`` under ``policy`` with the named estimator.

    The ``oracle`` policy always gets the oracle estimator. Preemptive policies
    get a cycle every ``tick_s`` (default :data:`DEFAULT_TICK_S`). With ``eta``
    each job's first ETA is recorded (see :class:`~cpn.sim.world.World`; costly:
    one projection of up to ``eta_max_cycles`` cycles per arrival instant; with
    ``eta_every`` = k only every k-th admitted job is projected; with ``eta_arrivals_s``
    projections expect that window's submissions to recur). ``checkpointable`` is the
    share of jobs that checkpoint where the trace does not say; ``unlabelled`` hides
    each job's model and declared work from the scheduler (see :class:`World`);
    ``on_cycle`` sees every cycle (the decision log: ``cpn simulate --decisions``).
    """
    name = name or policy.name
    truth = truth_for(trace, clusters.reference_gpu)
    if uses_oracle(name, policy):
        estimator = "oracle"
    base = {j.job_id: j.gpu_type or clusters.reference_gpu for j in trace}
    chosen, label = make_estimator(
        estimator, truth, sigma=sigma, seed=seed, base_gpu=base.__getitem__
    )
    if tick_s is None and policy.preemption.enabled:
        tick_s = DEFAULT_TICK_S
    world = World(
        trace,
        clusters,
        policy,
        chosen,
        truth=truth,
        plan=plan,
        tick_s=tick_s,
        progress=progress,
        policy_name=name,
        estimator_name=label,
        eta=eta,
        eta_max_cycles=eta_max_cycles,
        eta_every=eta_every,
        eta_arrivals_s=eta_arrivals_s,
        checkpointable=checkpointable,
        unlabelled=unlabelled,
        seed=seed,
        on_cycle=on_cycle,
    )
    return world.run()
