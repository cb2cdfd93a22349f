"""The policy's ``domains`` section: parsed into core Domains, every mistake refused with
the field that holds it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cpn.api.policy import parse_policy
from cpn.core.errors import PolicyError
from cpn.core.model import Cluster, Node, Snapshot
from cpn.core.policy import Domain
from cpn.decisions import decode, encode

EXAMPLE = """
domains:
  interactive:
    clusters: [north]
    labels: {gpu: a100}
    queues: [debug]
  batch:
    default: true
    groups: [team-b]
"""


def test_the_example_is_read_in_order_and_its_queues_become_known() -> None:
    policy = parse_policy(EXAMPLE)
    assert policy.domains == (
        Domain(
            name="interactive",
            clusters=frozenset({"north"}),
            labels={"gpu": "a100"},
            queues=frozenset({"debug"}),
        ),
        Domain(name="batch", default=True, groups=frozenset({"team-b"})),
    )
    assert "debug" in policy.queues  # a job of queue debug is not told UnknownQueue


def test_no_domains_is_the_default() -> None:
    assert parse_policy("").domains == ()


@pytest.mark.parametrize(
    ("document", "error"),
    [
        (
            "domains: {a: {queues: [q]}}",
            "domains.a: selects no node: give clusters, labels or both (or default: true)",
        ),
        (
            "domains: {a: {clusters: []}}",
            "domains.a.clusters: is empty: name a cluster, or leave it out",
        ),
        ("domains: {Big_One: {clusters: [c]}}", "domains.Big_One: not a domain name"),
        (
            "domains: {a: {default: true, labels: {x: y}}}",
            "domains.a: the default domain holds the nodes no other domain selects: "
            "it takes no clusters or labels",
        ),
        (
            "domains: {a: {default: true}, b: {default: true}}",
            "domains: only one default domain, got a, b",
        ),
        (
            "domains: {a: {labels: {x: y}, groups: [g]}, b: {clusters: [c], groups: [g]}}",
            "domains.b.groups: group g is also bound to domain a: a group has one domain",
        ),
        (
            "domains: {a: {labels: {gpu: true}}}",
            "domains.a.labels.gpu: a boolean (true) is not a label value "
            "(quote it: labels are strings)",
        ),
        (
            "domains: {a: {labels: {'no spaces': x}}}",
            "domains.a.labels: 'no spaces' is not a label key",
        ),
        ("domains: {a: {labels: {x: y}, colour: red}}", "domains.a.colour: unknown key"),
        ("domains: [a, b]", "domains: expected a mapping of domain names"),
    ],
)
def test_mistakes_are_refused_naming_the_field(document: str, error: str) -> None:
    with pytest.raises(PolicyError) as raised:
        parse_policy(document)
    assert error in str(raised.value)


def test_domains_survive_the_decision_log_so_replay_decides_the_same() -> None:
    node = Node(cluster="north", name="n1", gpu_type="A100-80GB", gpus=8, free_gpus=8.0)
    snap = Snapshot(
        now_s=1.0,
        policy=parse_policy(EXAMPLE),
        clusters=(Cluster(name="north", nodes=(replace(node, domain="interactive"),)),),
    )
    logged = json.loads(json.dumps(encode(snap)))
    assert decode(Snapshot, logged) == snap
