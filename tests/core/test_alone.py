"""The first job of a model runs alone on its node (placement.first_of_model_alone)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpn.core.alone import runs_alone
from cpn.core.capacity import Capacity
from cpn.core.check import check_plan
from cpn.core.cycle import plan_cycle
from cpn.core.eta import project
from cpn.core.model import Cluster, Job, Node, Running, Snapshot, Start, WaitReason
from cpn.core.policy import Placement, QueuePolicy
from cpn.core.presets import PRESETS
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"
ON = QueuePolicy(placement=Placement(first_of_model_alone=True))


def new(key: str, model: str = "llama3", **fields: object) -> Job:
    """A job of a model the estimator has never seen."""
    j = job(key, model=model, **fields)  # type: ignore[arg-type]
    return replace(j, estimate=replace(j.estimate, new_model=True))


def known(key: str, **fields: object) -> Job:
    return job(key, model="resnet50", **fields)  # type: ignore[arg-type]


def hold_of(plan, key):
    return next(h for h in plan.holds if h.job_key == key)


def half_used() -> tuple[tuple[Node, ...], Running]:
    """Node c-0 with 4 of 8 GPUs taken by a running job, node c-1 empty."""
    ns = nodes("c", 2, free=[4.0, 8.0])
    return ns, running(known("r", gpus=4), "c", A100, ("c-0",), end_s=1000.0)


def test_rule_needs_the_switch_a_model_and_a_new_model():
    """Only a job naming a model the estimator never saw, under the switch, runs alone."""
    assert runs_alone(new("a"), ON)
    assert not runs_alone(new("a"), QueuePolicy())  # switch off (the default)
    assert not runs_alone(new("a", model=""), ON)  # no model label: not new
    assert not runs_alone(known("a"), ON)


def test_first_of_model_goes_to_the_empty_node():
    """Best-fit would put it beside the running job; the rule puts it on the empty node."""
    ns, r = half_used()
    snap = snapshot(jobs=[new("a")], clusters=[cluster("c", ns)], running_jobs=[r], policy=ON)
    (start,) = plan_cycle(snap).starts
    assert start.nodes == ("c-1",) and start.alone


def test_switch_off_keeps_best_fit():
    """Without the switch the same job shares the half-used node (best fit), not alone."""
    ns, r = half_used()
    snap = snapshot(jobs=[new("a")], clusters=[cluster("c", ns)], running_jobs=[r])
    (start,) = plan_cycle(snap).starts
    assert start.nodes == ("c-0",) and not start.alone


def test_no_empty_node_holds_it_and_says_why():
    """GPUs are free, but only beside another job: it waits, and its hold says so."""
    ns = nodes("c", 1, free=[4.0])
    r = running(known("r", gpus=4), "c", A100, ("c-0",), end_s=1000.0)
    snap = snapshot(jobs=[new("a")], clusters=[cluster("c", ns)], running_jobs=[r], policy=ON)
    plan = plan_cycle(snap)
    assert plan.starts == ()
    hold = hold_of(plan, "a")
    assert hold.reason is WaitReason.Capacity
    assert "first job of model llama3 runs alone" in hold.message
    assert "no empty node" in hold.message


def test_nothing_joins_a_node_held_alone():
    """A known job does not go beside a running first-of-model job, even where it fits."""
    ns = nodes("c", 2, free=[7.0, 4.0])
    alone = replace(running(new("first"), "c", A100, ("c-0",), end_s=500.0), alone=True)
    other = running(known("r", gpus=4), "c", A100, ("c-1",), end_s=9000.0)
    snap = snapshot(
        jobs=[known("b", gpus=6)],
        clusters=[cluster("c", ns)],
        running_jobs=[alone, other],
        policy=ON,
    )
    plan = plan_cycle(snap)
    assert plan.starts == ()
    assert "runs alone" in hold_of(plan, "b").message
    # a 1-GPU job goes to the other node instead of the (emptier) one held alone
    snap = replace(snap, pending=(known("c"),))
    (start,) = plan_cycle(snap).starts
    assert start.nodes == ("c-1",)


def test_node_held_alone_frees_at_its_end_for_projections():
    """The ETA projection lets a known job onto a node held alone only at the holder's end."""
    ns = nodes("c", 1, free=[7.0])
    alone = replace(running(new("first"), "c", A100, ("c-0",), end_s=500.0), alone=True)
    snap = snapshot(jobs=[known("b")], clusters=[cluster("c", ns)], running_jobs=[alone], policy=ON)
    assert project(snap)["b"].start_s == 500.0
    capacity = Capacity.from_snapshot(snap)
    found = capacity.earliest_fit(known("b"), ("c", A100), 0.0)
    assert found is not None and found[0] == 500.0
    # the switch is about starts: a node already held alone stays held with it off
    off = replace(snap, policy=QueuePolicy())
    assert plan_cycle(off).starts == ()


def test_two_new_jobs_do_not_share_the_one_empty_node():
    """Two first-of-model jobs, one empty node: one starts, the other waits."""
    snap = snapshot(
        jobs=[new("a"), new("b", model="bert-large")],
        clusters=[cluster("c", nodes("c", 1))],
        policy=ON,
    )
    plan = plan_cycle(snap)
    assert len(plan.starts) == 1
    assert check_plan(plan, snap) == ()


def test_workers_of_one_new_job_may_share_their_node():
    """Its own workers are not "other jobs": two 2-GPU workers on one empty 8-GPU node."""
    snap = snapshot(
        jobs=[new("a", gpus=2, workers=2)], clusters=[cluster("c", nodes("c", 1))], policy=ON
    )
    (start,) = plan_cycle(snap).starts
    assert start.nodes == ("c-0", "c-0") and start.alone


def test_check_plan_catches_a_co_located_first_job():
    """The plan checker (which the simulator applies) refuses a start beside one alone."""
    ns, r = half_used()
    snap = snapshot(jobs=[new("a")], clusters=[cluster("c", ns)], running_jobs=[r], policy=ON)
    bad = plan_cycle(snap)
    bad = replace(bad, starts=(replace(bad.starts[0], nodes=("c-0",)),))
    assert any("must run alone" in v.message for v in check_plan(bad, snap))
    unmarked = replace(
        bad,
        starts=(
            Start(job_key="a", cluster="c", gpu_type=A100, nodes=("c-1",), predicted_runtime_s=1.0),
        ),
    )
    assert any("not started alone" in v.message for v in check_plan(unmarked, snap))


# -- property: no plan ever co-locates a first-of-model job -------------------------------


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    node_list: list[Node] = []
    runs: list[Running] = []
    for n in range(draw(st.integers(1, 4))):
        gpus = draw(st.sampled_from([2, 4, 8]))
        used = draw(st.integers(0, gpus))
        (node,) = nodes("c", 1, gpus=gpus, free=[float(gpus - used)])
        node_list.append(replace(node, name=f"c-{n}"))
        if used:
            holder = job(f"run-{n}", gpus=used, checkpoint=draw(st.booleans()))
            alone = draw(st.booleans()) and used == gpus
            runs.append(
                Running(
                    job=holder,
                    cluster="c",
                    gpu_type=A100,
                    nodes=(f"c-{n}",),
                    start_s=0.0,
                    predicted_end_s=draw(st.floats(0, 5000)),
                    alone=alone,
                )
            )
    pending = []
    for i in range(draw(st.integers(1, 8))):
        j = job(
            f"j{i}",
            gpus=draw(st.sampled_from([1, 2, 4])),
            workers=draw(st.integers(1, 2)),
            submitted_s=draw(st.floats(0, 1000)),
            runtime_s=draw(st.floats(10, 10000)),
            model=draw(st.sampled_from(["", "m1", "m2"])),
            priority=draw(st.integers(0, 2)),
        )
        pending.append(replace(j, estimate=replace(j.estimate, new_model=draw(st.booleans()))))
    base = PRESETS[draw(st.sampled_from(sorted(PRESETS)))]
    policy = replace(base, placement=replace(base.placement, first_of_model_alone=True))
    return Snapshot(
        now_s=1000.0,
        policy=policy,
        pending=tuple(pending),
        running=tuple(runs),
        clusters=(Cluster(name="c", nodes=tuple(node_list)),),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_no_plan_co_locates_a_first_of_model_job(snap: Snapshot) -> None:
    """After any plan, a node holding a job that runs alone (started now, or running alone)
    holds no other job, and a first-of-model start found its nodes empty."""
    plan = plan_cycle(snap)
    pending = {j.key: j for j in snap.pending}
    stopped = {p.job_key for p in plan.preemptions}
    on: dict[str, set[str]] = {}
    alone: dict[str, str] = {}
    for r in snap.running:
        if r.job.key not in stopped:
            for name in r.nodes:
                on.setdefault(name, set()).add(r.job.key)
                if r.alone:
                    alone[name] = r.job.key
    free = {n.name: (n.free_gpus, n.gpus) for n in snap.clusters[0].nodes}
    for s in plan.starts:
        first = runs_alone(pending[s.job_key], snap.policy)
        assert s.alone == first
        for name in s.nodes:
            if first:
                assert not on.get(name), (s, on.get(name))
                assert free[name][0] == free[name][1]
        for name in set(s.nodes):
            on.setdefault(name, set()).add(s.job_key)
            if first:
                alone[name] = s.job_key
    for name, holder in alone.items():
        started = {s.job_key for s in plan.starts}
        others = on[name] - {holder}
        assert not (others and (holder in started or others & started)), (name, holder, others)
    assert check_plan(plan, snap) == ()
