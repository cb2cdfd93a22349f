"""The simulator's nodes take labels from the cluster file and are put in the policy's
domains by the operator's own function (cpn.core.domains.node_domain)."""

from __future__ import annotations

import pytest
from simkit import tjob
from test_world import by_id, world

from cpn.api.policy import parse_policy
from cpn.core.cycle import plan_cycle
from cpn.core.domains import node_domain
from cpn.core.errors import InvalidSpec
from cpn.sim.clusters import parse_clusters

DOC = {
    "reference_gpu": "V100",
    "clusters": [
        {
            "name": "north",
            "nodes": [
                {"count": 1, "gpu_type": "V100", "gpus_per_node": 4, "labels": {"pool": "fast"}},
                {"count": 2, "gpu_type": "V100", "gpus_per_node": 4},
            ],
        },
        {"name": "south", "nodes": [{"count": 2, "gpu_type": "V100", "gpus_per_node": 4}]},
    ],
}
POLICY = parse_policy(
    """
domains:
  interactive: {clusters: [north], labels: {pool: fast}, groups: [live]}
  batch: {default: true}
"""
)


def test_nodes_are_in_the_domains_the_operator_would_put_them_in() -> None:
    cluster_set = parse_clusters(DOC)
    resolved = cluster_set.in_domains(POLICY.domains)
    domains = {(n.cluster, n.name): n.domain for c in resolved for n in c.nodes}
    assert domains == {
        (n.cluster, n.name): node_domain(
            POLICY.domains, n.cluster, cluster_set.labels.get((n.cluster, n.name), {})
        )
        for c in cluster_set.clusters
        for n in c.nodes
    }
    assert sorted(domains.values()) == ["batch"] * 4 + ["interactive"]
    assert cluster_set.in_domains(()) == cluster_set.clusters  # no domains: as written


def test_overlapping_domains_are_refused() -> None:
    overlapping = parse_policy(
        "domains: {a: {labels: {pool: fast}}, b: {clusters: [north]}}"
    ).domains
    with pytest.raises(InvalidSpec, match="domains a and b both select 1 node"):
        parse_clusters(DOC).in_domains(overlapping)


def test_a_bound_job_runs_only_on_its_domain() -> None:
    jobs = [tjob(f"live-{i}", gpus=4, group="live", duration_s=100.0) for i in range(3)]
    jobs += [tjob(f"other-{i}", gpus=4, duration_s=100.0) for i in range(4)]
    result = world(jobs, parse_clusters(DOC), plan=plan_cycle, policy=POLICY).run()
    records = by_id(result)
    # the one interactive node takes the live jobs one after the other, never south's
    assert {records[f"live-{i}"].cluster for i in range(3)} == {"north"}
    assert all(r.finish_s is not None for r in records.values())


def test_a_groups_quota_in_a_domain_holds_in_the_simulator_too() -> None:
    """Same plan_cycle, same ledger: with 4 GPUs for team in batch, its 4-GPU jobs run there
    one at a time although batch has room for four."""
    limited = parse_policy(
        """
domains:
  interactive: {clusters: [north], labels: {pool: fast}, groups: [live]}
  batch: {default: true}
quotas: {groups: {team: {domains: {batch: {gpus: 4}}}}}
"""
    )
    jobs = [tjob(f"team-{i}", gpus=4, group="team", duration_s=100.0) for i in range(3)]
    result = world(jobs, parse_clusters(DOC), plan=plan_cycle, policy=limited).run()
    spans = sorted((r.first_start_s, r.finish_s) for r in by_id(result).values())
    assert len(spans) == 3 and all(end is not None for _, end in spans)
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(2))  # never two at once
