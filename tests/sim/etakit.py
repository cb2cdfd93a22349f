"""Simulations with first ETAs recorded, shared by the ETA tests."""

from __future__ import annotations

from typing import Any

from simkit import clusters

from cpn.core.presets import preset_policy
from cpn.sim.estimators import NoisyEstimator, OracleEstimator
from cpn.sim.jobs import truth_for
from cpn.sim.records import SimResult
from cpn.sim.trace import TraceJob
from cpn.sim.world import World


def run_with_eta(
    trace: list[TraceJob],
    policy: str,
    *,
    node_gpus: int,
    noisy: float | None,
    seed: int,
    **kw: Any,
) -> SimResult:
    """``trace`` on one V100 node of ``node_gpus`` GPUs under the preset ``policy``, with true
    runtimes as estimates or, given ``noisy``, estimates off by that sigma (``seed``)."""
    cl = clusters({"a": [(1, "V100", node_gpus)]})
    truth = truth_for(trace, cl.reference_gpu)
    estimator = (
        OracleEstimator(truth) if noisy is None else NoisyEstimator(truth, sigma=noisy, seed=seed)
    )
    world = World(trace, cl, preset_policy(policy), estimator, truth=truth, eta=True, **kw)
    return world.run()
