"""Plan validity (cpn.core.check): good plans pass, each broken rule is reported."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cpn.core.check import Violation, check_plan
from cpn.core.model import CyclePlan, Hold, Preempt, Snapshot, Start, WaitReason
from cpn.core.policy import GroupQuota, Limit, QueuePolicy, Quotas
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"


def start(key: str, *names: str, where: str = "c", gpu: str = A100) -> Start:
    return Start(job_key=key, cluster=where, gpu_type=gpu, nodes=names, predicted_runtime_s=60)


def world(**fields: object) -> Snapshot:
    """Cluster c: two 8-GPU A100 nodes (c-0 half used by ``r``), one K80 node; d not ready."""
    holder = job("r", gpus=4)
    return snapshot(
        jobs=[job("a", gpus=8), job("b", gpus=4, workers=2), job("s", gpus=1), job("t", gpus=4)],
        clusters=[
            cluster("c", nodes("c", 2, free=[4.0, 8.0]), nodes("c", 1, gpu_type="K80", prefix="k")),
            cluster("d", nodes("d", 1), ready=False),
        ],
        running_jobs=[running(replace(holder, checkpoint=True), "c", A100, ("c-0",))],
        **fields,  # type: ignore[arg-type]
    )


def test_a_valid_plan_has_no_violation() -> None:
    """Starts that fit, a preemption of a running job, holds of pending jobs: nothing to say."""
    plan = CyclePlan(
        preemptions=(Preempt(job_key="r", for_key="a"),),
        starts=(start("a", "c-0"), start("b", "c-1", "c-1"), start("s", "k-0", gpu="K80")),
        holds=(Hold(job_key="t", reason=WaitReason.Capacity, message="full"),),
    )
    assert check_plan(plan, world()) == ()


@pytest.mark.parametrize(
    ("plan", "want"),
    [
        pytest.param(CyclePlan(starts=(start("a", "c-0"),)), "overcommits node c-0", id="over"),
        pytest.param(
            CyclePlan(starts=(start("a", "c-1"), start("b", "c-1", "c-1"))),
            "overcommits node c-1",
            id="over-cumulative",
        ),
        pytest.param(
            CyclePlan(starts=(start("s", "c-1"), start("s", "c-1"))), "started twice", id="twice"
        ),
        pytest.param(CyclePlan(starts=(start("r", "c-1"),)), "not pending", id="running"),
        pytest.param(CyclePlan(starts=(start("ghost", "c-1"),)), "not pending", id="unknown"),
        pytest.param(
            CyclePlan(
                preemptions=(Preempt(job_key="r", for_key="a"),), starts=(start("r", "c-1"),)
            ),
            "not pending",
            id="start-preempted",
        ),
        pytest.param(CyclePlan(starts=(start("s", "d-0", where="d"),)), "unready", id="unready"),
        pytest.param(CyclePlan(starts=(start("s", "x-0", where="x"),)), "unknown", id="no-cluster"),
        pytest.param(CyclePlan(starts=(start("s", "nowhere"),)), "no node 'nowhere'", id="no-node"),
        pytest.param(CyclePlan(starts=(start("s", "k-0"),)), "has K80, plan says", id="gpu-type"),
        pytest.param(CyclePlan(starts=(start("b", "c-1"),)), "2 worker(s) but 1", id="gang-split"),
        pytest.param(
            CyclePlan(preemptions=(Preempt(job_key="a", for_key="b"),)),
            "not running",
            id="preempt-pending",
        ),
        pytest.param(
            CyclePlan(
                preemptions=(Preempt(job_key="r", for_key="a"), Preempt(job_key="r", for_key="b"))
            ),
            "preempted twice",
            id="preempt-twice",
        ),
        pytest.param(
            CyclePlan(holds=(Hold(job_key="ghost", reason=WaitReason.Capacity, message=""),)),
            "unknown job",
            id="hold-unknown",
        ),
    ],
)
def test_each_broken_rule_is_reported(plan: CyclePlan, want: str) -> None:
    """A plan breaking one rule gets exactly one violation that says which."""
    found = check_plan(plan, world())
    assert len(found) == 1, found
    assert want in str(found[0])


def test_a_job_may_not_run_on_a_gpu_type_it_excludes() -> None:
    snap = world()
    only_k80 = replace(snap.pending[2], gpu_types=frozenset({"K80"}))
    snap = replace(snap, pending=(*snap.pending[:2], only_k80, snap.pending[3]))
    assert [v.message for v in check_plan(CyclePlan(starts=(start("s", "c-1"),)), snap)] == [
        f"may not run on {A100}"
    ]


def test_schedulable_and_gpu_memory_are_checked() -> None:
    snap = world()
    cordoned = replace(snap.clusters[0].nodes[1], schedulable=False)
    hungry = replace(snap.pending[2], gpu_memory_gib=100.0)
    snap = replace(
        snap,
        clusters=(replace(snap.clusters[0], nodes=(snap.clusters[0].nodes[0], cordoned)),),
        pending=(*snap.pending[:2], hungry, snap.pending[3]),
    )
    found = check_plan(CyclePlan(starts=(start("s", "c-1"), start("s2", "c-0"))), snap)
    assert found[0] == Violation("s", "node c-1 is not schedulable")
    found = check_plan(CyclePlan(starts=(start("s", "c-0"),)), snap)
    assert found == (Violation("s", "node c-0 GPUs have too little memory"),)


def test_quotas_bind_without_lending_only() -> None:
    """Group g may use 8 GPUs; r (4, in g) runs: starting a (8, in g) breaks it."""
    quotas = Quotas(groups={"g": GroupQuota(limit=Limit(gpus=8.0))})
    snap = world(policy=QueuePolicy(quotas=quotas))
    in_g = [replace(j, group="g") for j in snap.pending]
    holder = replace(snap.running[0], job=replace(snap.running[0].job, group="g"))
    snap = replace(snap, pending=tuple(in_g), running=(holder,))
    plan = CyclePlan(starts=(start("a", "c-1"),))
    (found,) = check_plan(plan, snap)
    assert "quota of group g" in found.message
    preempting = replace(plan, preemptions=(Preempt(job_key="r", for_key="a"),))
    assert check_plan(preempting, snap) == ()  # the preempted job's GPUs no longer count
    lending = replace(snap, policy=QueuePolicy(quotas=replace(quotas, lending=True)))
    assert check_plan(plan, lending) == ()
