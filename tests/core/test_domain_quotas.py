"""Per-domain group quotas (``quotas.groups.G.domains.D``): the ledger counts a group's
jobs in a domain against that domain's limit, on top of the group's limit over all."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from cpn.api.policy import parse_policy
from cpn.core.check import check_plan
from cpn.core.cycle import plan_cycle
from cpn.core.errors import PolicyError
from cpn.core.model import WaitReason
from cpn.core.policy import Domain, GroupQuota, Limit, QueuePolicy, Quotas
from cpn.core.quota import QuotaLedger
from tests.builders import cluster, job, nodes, running, snapshot

INTERACTIVE = Domain(name="interactive", clusters=frozenset({"north"}), queues=frozenset({"debug"}))
BATCH = Domain(name="batch", default=True)


def _policy(**domains: Limit) -> QueuePolicy:
    quota = GroupQuota(limit=Limit(gpus=16), domains=MappingProxyType(domains))
    return QueuePolicy(
        domains=(INTERACTIVE, BATCH),
        quotas=Quotas(groups=MappingProxyType({"team-a": quota})),
    )


def _clusters() -> list:
    north = tuple(replace(n, domain="interactive") for n in nodes("north", 2, gpus=8))
    south = tuple(replace(n, domain="batch") for n in nodes("south", 2, gpus=8))
    return [cluster("north", north), cluster("south", south)]


def test_the_domain_limit_counts_only_the_groups_jobs_in_that_domain() -> None:
    policy = _policy(interactive=Limit(gpus=4))
    busy = running(job("r", gpus=4, group="team-a", queue="debug"), "north", "A100-80GB", ("n",))
    ledger = QuotaLedger(policy, [busy])
    debug = job("d", gpus=1, group="team-a", queue="debug")
    assert ledger.exceeds(debug) == (
        "quota of group team-a in domain interactive: 4 of 4 GPUs in use, job needs 1"
    )
    assert ledger.exceeds(job("b", gpus=8, group="team-a")) == ""  # batch: only the group's 16
    assert ledger.exceeds(job("o", gpus=4, group="team-b", queue="debug")) == ""  # no quota


def test_a_job_over_its_domain_quota_waits_with_the_domains_quota_as_reason() -> None:
    snap = snapshot(
        jobs=[
            job("debug-1", gpus=4, group="team-a", queue="debug", submitted_s=0.0),
            job("debug-2", gpus=4, group="team-a", queue="debug", submitted_s=1.0),
            job("batch-1", gpus=8, group="team-a", submitted_s=2.0),
        ],
        clusters=_clusters(),
        policy=_policy(interactive=Limit(gpus=4)),
    )
    plan = plan_cycle(snap)
    assert {s.job_key for s in plan.starts} == {"debug-1", "batch-1"}
    (hold,) = plan.holds
    assert hold.job_key == "debug-2"
    assert hold.reason == WaitReason.Quota
    assert "quota of group team-a in domain interactive: 4 of 4 GPUs" in hold.message
    assert check_plan(plan, snap) == ()


def test_the_per_type_limit_of_a_domain_is_enforced() -> None:
    policy = _policy(interactive=Limit(per_type=MappingProxyType({"A100-80GB": 2.0})))
    ledger = QuotaLedger(policy, [])
    assert "in domain interactive on A100-80GB: 0 of 2 in use, job needs 4" in ledger.exceeds(
        job("d", gpus=4, group="team-a", queue="debug"), "A100-80GB"
    )
    assert ledger.exceeds(job("d", gpus=2, group="team-a", queue="debug"), "A100-80GB") == ""


def test_without_domain_limits_nothing_changes() -> None:
    ledger = QuotaLedger(_policy(), [])
    assert [b.label for b in ledger.buckets(job("d", group="team-a", queue="debug"))] == [
        "group team-a"
    ]


POLICY_TEXT = """
domains:
  interactive: {clusters: [north], queues: [debug]}
  batch: {default: true}
quotas:
  groups:
    team-a:
      gpus: 16
      domains:
        interactive: {gpus: 4, per_type: {a100-80gb: 2}}
"""


def test_the_policy_reads_a_domain_quota() -> None:
    quota = parse_policy(POLICY_TEXT).quotas.groups["team-a"]
    assert quota.domains["interactive"] == Limit(
        gpus=4.0, per_type=MappingProxyType({"A100-80GB": 2.0})
    )


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (
            ("interactive: {gpus: 4", "research: {gpus: 4"),
            "quotas.groups.team-a.domains.research",
            "no domain research in the policy's domains (defined: batch, interactive)",
        ),
        (
            ("{gpus: 4,", "{gpus: 32,"),
            "quotas.groups.team-a.domains.interactive.gpus",
            "32 GPUs exceeds the group's 16",
        ),
        (
            ("{gpus: 4,", "{cpus: 4,"),
            "quotas.groups.team-a.domains.interactive.cpus",
            "",
        ),
    ],
)
def test_a_bad_domain_quota_is_refused_at_its_field(
    change: tuple[str, str], path: str, message: str
) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(POLICY_TEXT.replace(*change))
    found = {e.path: e.message for e in caught.value.errors}
    assert path in found, found
    assert message in found[path]
