"""Property tests of the world through the real ``plan_cycle``: random small traces."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simkit import clusters

from cpn.core.cycle import plan_cycle
from cpn.core.model import CyclePlan, Snapshot
from cpn.core.presets import PRESETS, preset_policy
from cpn.sim import report
from cpn.sim.runner import simulate
from cpn.sim.trace import TraceJob

CLUSTERS = clusters(
    {"east": [(2, "V100", 4)], "west": [(1, "K80", 4), (1, "P100", 2)]},
    bandwidth={"east": {"west": 10}},
)

jobs = st.lists(
    st.builds(
        lambda i, submit, gpus, duration, model, data: (i, submit, gpus, duration, model, data),
        st.integers(0, 10**6),
        st.integers(0, 2000),
        st.sampled_from([1, 1, 1, 2, 3, 4, 6, 8, 12]),
        st.integers(10, 5000),
        st.sampled_from(["", "resnet50", "transformer", "a3c"]),
        st.sampled_from([None, "east", "west"]),
    ),
    min_size=1,
    max_size=14,
)


def to_trace(rows: list[tuple[int, int, int, int, str, str | None]]) -> list[TraceJob]:
    return [
        TraceJob(
            job_id=f"j{k}",
            submit_s=float(submit),
            gpus=float(gpus),
            duration_s=float(duration),
            model=model,
            data_cluster=data,
            data_gb=50.0 if data else None,
        )
        for k, (_, submit, gpus, duration, model, data) in enumerate(rows)
    ]


def checked(snapshot: Snapshot) -> CyclePlan:
    """plan_cycle, after checking the snapshot's node accounting independently."""
    used: dict[tuple[str, str], float] = defaultdict(float)
    for run in snapshot.running:
        for name in run.nodes:
            used[(run.cluster, name)] += run.job.gpus_per_worker
    for cluster in snapshot.clusters:
        for node in cluster.nodes:
            assert abs(node.free_gpus - (node.gpus - used[(node.cluster, node.name)])) < 1e-9
            assert node.free_gpus >= -1e-9
    return plan_cycle(snapshot)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=jobs, name=st.sampled_from(sorted(PRESETS)))
def test_every_admitted_job_finishes_without_overcommit(rows, name):
    """For any small trace and any preset, every job that fits a cluster finishes, the rest are
    refused as infeasible, and no snapshot shows an overcommitted node."""
    trace = to_trace(rows)
    result = simulate(
        trace, CLUSTERS, preset_policy(name), name=name, estimator="noisy", plan=checked
    )
    m = report.metrics(result)
    assert m["finished"] == m["jobs"]
    assert m["infeasible"] == sum(1 for j in trace if j.gpus > 8)  # east has 8 GPUs
    for r in result.records:
        if r.finish_s is not None:
            assert r.first_start_s is not None and r.submit_s <= r.first_start_s <= r.finish_s


@settings(max_examples=8, deadline=None)
@given(rows=jobs, name=st.sampled_from(["default", "las", "sjf"]))
def test_equal_inputs_give_equal_outcomes(rows, name):
    """Simulating the same trace twice gives the same start and finish of every job."""
    trace = to_trace(rows)

    def outcome():
        result = simulate(
            trace, CLUSTERS, preset_policy(name), name=name, estimator="noisy", seed=3
        )
        return [(r.job_id, r.first_start_s, r.finish_s, r.gpu_type) for r in result.records]

    assert outcome() == outcome()
