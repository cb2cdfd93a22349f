"""Domains in the operator: a policy whose domains overlap on the members' nodes is refused,
one with a domain of no node is taken with a warning, and a dispatched job's status names
the domain it was placed in."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from cpn.api import constants as k
from cpn.api.policy import parse_policy
from cpn.core.model import Cluster, Start
from cpn.core.policy import QueuePolicy
from cpn.runtime.engine import Runtime
from cpn.runtime.lifecycle import dispatched, unplaced
from cpn.runtime.status import render_status
from cpn.runtime.store import Store
from tests.builders import nodes
from tests.runtime.fakes import FakeMember, upsert
from tests.runtime.test_runtime_shell import shell  # noqa: F401 - the fixture
from tests.runtime.test_store import FixedEstimator, body

OVERLAPPING = "domains: {a: {labels: {gpu: a100}}, b: {clusters: [m1]}}"
EMPTY = "domains: {a: {labels: {gpu: h100}}, rest: {default: true}}"


def configmap(text: str, version: str) -> dict:
    meta = {"name": "cpn-policy", "namespace": "cpn-system", "resourceVersion": version}
    return {"metadata": meta, "data": {"policy.yaml": text}}


def with_member(runtime: Runtime) -> None:
    """Member m1 with one GPU node labelled gpu=a100, as the last cycle saw it."""
    member = FakeMember("m1")
    node = nodes("m1", 1)[0]
    member.nodes[node.name] = {"metadata": {"name": node.name, "labels": {"gpu": "a100"}}}
    runtime.members["m1"] = member
    runtime.state.views["m1"] = Cluster(name="m1", nodes=(node,))


def test_domains_overlapping_on_a_node_are_refused_and_the_last_good_policy_stays(shell):  # noqa: F811
    runtime = shell[0]
    with_member(runtime)
    runtime._use_policy(parse_policy("name: good"))
    error = runtime.policy_event(configmap(OVERLAPPING, "8"))
    assert error == (
        "domains: domains a and b both select 1 node(s) (m1/m1-0): "
        "a node may be in one domain only; make their selectors exclusive"
    )
    assert runtime.store.policy.name == "good"


def test_a_domain_of_no_node_is_taken_with_a_warning(shell):  # noqa: F811
    runtime = shell[0]
    with_member(runtime)

    async def taken() -> str:
        return runtime.policy_event(configmap(EMPTY, "9"))

    assert asyncio.run(taken()) == ""
    assert [d.name for d in runtime.store.policy.domains] == ["a", "rest"]
    assert runtime.hub_watch.policy_warnings == [
        "domain a has no GPU node (labels gpu=h100): its jobs cannot start"
    ]


def test_a_dispatched_job_shows_its_domain_until_it_is_requeued() -> None:
    store = Store(QueuePolicy(), FixedEstimator())
    record = upsert(store, body("a", "uid-a"), user="u", group="g")
    start = Start(
        job_key="ns/a", cluster="m1", gpu_type="A100-80GB", nodes=("n1",), predicted_runtime_s=60.0
    )
    step = dispatched(record, start, None, 100.0, nonce="n", restart_cost_s=0.0, domain="fast")
    assert step.record.domain == "fast"
    assert "node n1, domain fast)" in step.record.message
    status, _ = render_status(step.record, 100.0)
    assert (status["phase"], status["domain"]) == (k.PHASE_DISPATCHED, "fast")
    again = upsert(
        Store(QueuePolicy(), FixedEstimator()),
        {**body("a", "uid-a"), "status": status},
        user="u",
        group="g",
    )
    assert again.domain == "fast"  # read back after a restart
    back = unplaced(replace(step.record))
    assert back.domain == "" and "domain" not in render_status(back, 100.0)[0]


def test_a_member_shows_its_free_gpus_per_domain(shell):  # noqa: F811
    runtime, hub = shell[0], shell[1]
    fast, other = nodes("m1", 2)
    view = (replace(fast, domain="fast", free_gpus=2.0), other)
    runtime.members["m1"] = FakeMember("m1")
    runtime.state.views["m1"] = Cluster(name="m1", nodes=view)
    asyncio.run(runtime.writer.write_member_status("m1"))
    (status,) = [p[2] for p in hub.patches if p[:2] == ("member", "m1")]
    assert status["domains"] == [{"domain": "fast", "nodes": 1, "gpusTotal": 8.0, "gpusFree": 2.0}]
    assert status["domainsFree"] == "fast 2/8"
    assert status["gpusFree"] == 10.0  # every node, in a domain or not
