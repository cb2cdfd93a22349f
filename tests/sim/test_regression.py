"""Runs through the real ``plan_cycle``: invariants for every preset, and metric bounds.

The bounds live in ``tests/data/rangespec.yaml`` (Kueue's rangespec idea): each run
simulates a small trace in-process and each listed metric must lie in [min, max].
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
import yaml
from simkit import DATA

from cpn.core.cycle import plan_cycle
from cpn.core.model import CyclePlan, Snapshot
from cpn.core.presets import PRESETS, preset_policy
from cpn.sim import report
from cpn.sim.clusters import read_clusters
from cpn.sim.runner import simulate
from cpn.sim.trace import read_trace

SPEC: dict[str, Any] = yaml.safe_load((DATA / "rangespec.yaml").read_text(encoding="utf-8"))
TRACE = read_trace(DATA / "tiny.csv")
CLUSTERS = read_clusters(DATA / "small-clusters.yaml")


def checked_plan(seen: list[Snapshot]):
    """plan_cycle, with each snapshot's bookkeeping checked independently before planning."""

    def plan(snapshot: Snapshot) -> CyclePlan:
        used: dict[tuple[str, str], float] = defaultdict(float)
        for run in snapshot.running:
            for name in run.nodes:
                used[(run.cluster, name)] += run.job.gpus_per_worker
        for cluster in snapshot.clusters:
            for node in cluster.nodes:
                assert node.free_gpus == pytest.approx(node.gpus - used[(node.cluster, node.name)])
                assert node.free_gpus >= -1e-9, f"{node.name} overcommitted"
        keys = [j.key for j in snapshot.pending] + [r.job.key for r in snapshot.running]
        assert len(keys) == len(set(keys)), "a job is both pending and running, or listed twice"
        seen.append(snapshot)
        return plan_cycle(snapshot)

    return plan


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_finishes_every_job_without_overcommit(name):
    """Under each preset every admitted job finishes and no snapshot shows an overcommitted node."""
    seen: list[Snapshot] = []
    policy = preset_policy(name)
    result = simulate(
        TRACE, CLUSTERS, policy, name=name, estimator="noisy", plan=checked_plan(seen)
    )
    metrics = report.metrics(result)
    assert metrics["finished"] == metrics["jobs"] == len(TRACE)
    assert seen, "the plan function was never called"


@pytest.mark.parametrize("name", ["default", "las"])
def test_same_seed_same_metrics(name):
    """Two runs with the same inputs and seed give identical metrics (wall time aside)."""
    policy = preset_policy(name)
    runs = [
        report.metrics(simulate(TRACE, CLUSTERS, policy, name=name, estimator="noisy", seed=5))
        for _ in range(2)
    ]
    for m in runs:
        m.pop("wall_s")
        m.pop("plan_wall_s")
    assert runs[0] == runs[1]


def _cases() -> list[Any]:
    defaults = SPEC["defaults"]
    return [pytest.param({**defaults, **run}, id=name) for name, run in SPEC["runs"].items()]


@pytest.mark.parametrize("run", _cases())
def test_metrics_within_rangespec(run):
    """Each regression run's metrics lie within the bounds of tests/data/rangespec.yaml."""
    trace = read_trace(DATA / run["trace"])
    clusters = read_clusters(DATA / run["clusters"])
    policy = preset_policy(run["policy"])
    metrics = report.metrics(
        simulate(trace, clusters, policy, name=run["policy"], estimator=run["estimator"])
    )
    failures = []
    for key, bound in run["bounds"].items():
        value = metrics[key]
        if "min" in bound and value < bound["min"]:
            failures.append(f"{key}={value} < {bound['min']}")
        if "max" in bound and value > bound["max"]:
            failures.append(f"{key}={value} > {bound['max']}")
    assert not failures, "; ".join(failures)


def test_oracle_beats_fifo_on_average_jct():
    """Shortest true runtime first gives a lower average JCT than FIFO on the tiny trace."""
    fifo = report.metrics(simulate(TRACE, CLUSTERS, preset_policy("fifo"), name="fifo"))
    oracle = report.metrics(simulate(TRACE, CLUSTERS, preset_policy("oracle"), name="oracle"))
    assert oracle["avg_jct_s"] < fifo["avg_jct_s"]
