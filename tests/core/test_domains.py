"""Logical node domains (cpn.core.domains): which domain a node and a job are in, the
refusals, and the cycle never placing a job outside its domain (hypothesis)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from cpn.core.check import check_plan
from cpn.core.cycle import plan_cycle
from cpn.core.domains import check_domains, job_domain, node_domain
from cpn.core.model import Snapshot, WaitReason
from cpn.core.policy import Domain, QueuePolicy
from tests.builders import cluster, job, nodes, snapshot
from tests.core.test_properties import PROPERTY, snapshots

INTERACTIVE = Domain(
    name="interactive",
    clusters=frozenset({"north"}),
    labels={"gpu": "a100"},
    queues=frozenset({"debug"}),
)
BATCH = Domain(name="batch", default=True, groups=frozenset({"team-b"}))
POLICY = QueuePolicy(domains=(INTERACTIVE, BATCH))


def test_a_node_is_in_the_domain_that_selects_it_else_the_default() -> None:
    domains = POLICY.domains
    assert node_domain(domains, "north", {"gpu": "a100", "zone": "x"}) == "interactive"
    assert node_domain(domains, "south", {"gpu": "a100"}) == "batch"  # other cluster
    assert node_domain(domains, "north", {"gpu": "v100"}) == "batch"
    assert node_domain((INTERACTIVE,), "north", {}) == ""  # no default: no domain
    assert node_domain((), "north", {"gpu": "a100"}) == ""  # no domains: today's behaviour


def test_a_job_is_bound_by_its_queue_then_its_group_then_the_default() -> None:
    assert job_domain(POLICY, job("a", queue="debug", group="team-b")) == "interactive"
    assert job_domain(POLICY, job("b", group="team-b")) == "batch"
    assert job_domain(POLICY, job("c")) == "batch"
    assert job_domain(QueuePolicy(domains=(INTERACTIVE,)), job("d")) == ""
    assert job_domain(QueuePolicy(), job("e", queue="debug")) == ""


def test_overlapping_domains_are_refused_and_empty_ones_warned() -> None:
    research = Domain(name="research", labels={"team": "research"})
    seen = [
        ("north", "n1", {"gpu": "a100", "team": "research"}),
        ("north", "n2", {"gpu": "a100"}),
        ("south", "s1", {}),
    ]
    refused, warned = check_domains((INTERACTIVE, research, BATCH), seen)
    assert refused == [
        "domains interactive and research both select 1 node(s) (north/n1): "
        "a node may be in one domain only; make their selectors exclusive"
    ]
    assert warned == [
        "domain research has no GPU node (labels team=research): its jobs cannot start"
    ]
    # the node both select is in neither: no job is bound to "interactive+research"
    assert node_domain((INTERACTIVE, research), "north", seen[0][2]) == "interactive+research"
    assert check_domains(POLICY.domains, seen[1:]) == ([], [])


def _north_and_south() -> list:
    north = replace(nodes("north", 1, gpus=8)[0], domain="interactive")
    south = replace(nodes("south", 1, gpus=8)[0], domain="batch")
    return [cluster("north", (north,)), cluster("south", (south,))]


def test_a_bound_job_starts_only_in_its_domain_and_one_it_cannot_fit_is_infeasible() -> None:
    snap = snapshot(
        jobs=[
            job("debug-job", gpus=4, queue="debug"),
            job("batch-job", gpus=4),
            job("too-big", gpus=16, queue="debug"),
        ],
        clusters=_north_and_south(),
        policy=POLICY,
    )
    plan = plan_cycle(snap)
    where = {s.job_key: s.cluster for s in plan.starts}
    assert where == {"debug-job": "north", "batch-job": "south"}
    (hold,) = plan.holds
    assert hold.reason == WaitReason.Infeasible
    assert "in domain interactive (largest matching node has 8 GPUs)" in hold.message
    assert check_plan(plan, snap) == ()


def test_a_job_waits_for_its_domain_while_another_domain_is_free() -> None:
    busy = [
        replace(c, nodes=tuple(replace(n, free_gpus=0.0) for n in c.nodes))
        for c in _north_and_south()[:1]
    ]
    snap = snapshot(
        jobs=[job("debug-job", gpus=4, queue="debug")],
        clusters=[*busy, _north_and_south()[1]],
        policy=POLICY,
    )
    plan = plan_cycle(snap)
    assert plan.starts == ()
    assert plan.holds[0].reason == WaitReason.Capacity


@st.composite
def in_domains(draw: st.DrawFn) -> Snapshot:
    """A random snapshot whose nodes are in domains a, b or the default (or none), and
    whose jobs are bound to them through their group (g: a) or queue (q: b)."""
    snap = draw(snapshots())
    default = draw(st.sampled_from(["", "rest"]))
    domains = (
        Domain(name="a", labels={"pool": "a"}, groups=frozenset({"g"})),
        Domain(name="b", labels={"pool": "b"}, queues=frozenset({"q"})),
        *((Domain(name=default, default=True),) if default else ()),
    )
    choices = st.sampled_from(["a", "b", default])
    clusters = tuple(
        replace(c, nodes=tuple(replace(n, domain=draw(choices)) for n in c.nodes))
        for c in snap.clusters
    )
    queued = st.sampled_from(["", "q"])
    pending = tuple(replace(j, queue=draw(queued)) for j in snap.pending)
    policy = replace(snap.policy, domains=domains)
    return replace(snap, clusters=clusters, pending=pending, policy=policy)


@PROPERTY
@given(in_domains())
def test_no_job_is_ever_placed_or_makes_room_outside_its_domain(snap: Snapshot) -> None:
    plan = plan_cycle(snap)
    domain_of = {(n.cluster, n.name): n.domain for c in snap.clusters for n in c.nodes}
    jobs = {j.key: j for j in snap.pending}
    for start in plan.starts:
        want = job_domain(snap.policy, jobs[start.job_key])
        assert {domain_of[(start.cluster, n)] for n in start.nodes} == {want}
    running = {r.job.key: r for r in snap.running}
    for preempt in plan.preemptions:
        victim = running[preempt.job_key]
        want = job_domain(snap.policy, jobs[preempt.for_key])
        assert {domain_of[(victim.cluster, n)] for n in victim.nodes} == {want}
    assert check_plan(plan, snap) == ()
