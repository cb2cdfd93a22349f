"""Per-group max_priority: a priority a user writes in spec cannot outrank the policy's bound."""

from __future__ import annotations

import pytest

from cpn.api.policy import parse_policy
from cpn.core.errors import PolicyError
from cpn.core.queue import effective_priority, order_jobs
from tests.builders import job, snapshot

POLICY = """
quotas:
  max_priority: 0
  groups:
    vision: {max_priority: 5}
    ops: {max_priority: 1000}
levels:
  - {name: urgent, min_priority: 100}
  - {name: normal}
"""


def test_policy_reads_max_priority_per_group_and_default() -> None:
    """quotas.max_priority is the default; a group's own max_priority overrides it."""
    policy = parse_policy(POLICY)
    assert policy.quotas.max_priority == 0
    assert policy.quotas.groups["vision"].max_priority == 5
    assert effective_priority(job("a", group="vision", priority=1000), policy) == 5
    assert effective_priority(job("b", group="other", priority=1000), policy) == 0
    assert effective_priority(job("c", group="vision", priority=-3), policy) == -3


def test_capped_priority_neither_reaches_a_level_nor_outranks() -> None:
    """A job claiming priority 1000 beyond its group's cap ranks and levels as the cap."""
    policy = parse_policy(POLICY)
    claimed = job("vision/claims-1000", group="vision", priority=1000, submitted_s=0.0)
    honest = job("ops/asks-50", group="ops", priority=50, submitted_s=10.0)
    urgent = job("ops/asks-500", group="ops", priority=500, submitted_s=20.0)
    ranked = order_jobs([claimed, honest, urgent], snapshot(policy=policy, now_s=30.0))
    assert [r.job.key for r in ranked] == ["ops/asks-500", "ops/asks-50", "vision/claims-1000"]
    assert {r.job.key: r.level_name for r in ranked}["vision/claims-1000"] == "normal"


def test_without_a_cap_priority_is_taken_as_written() -> None:
    """No max_priority anywhere: the written priority counts (backwards compatible)."""
    policy = parse_policy("quotas: {groups: {vision: {gpus: 4}}}")
    assert effective_priority(job("a", group="vision", priority=700), policy) == 700


@pytest.mark.parametrize("text", ["quotas: {max_priority: 1.5}", "quotas: {max_priority: yes}"])
def test_max_priority_must_be_an_integer(text: str) -> None:
    """max_priority is an integer; anything else is refused with its path."""
    with pytest.raises(PolicyError) as err:
        parse_policy(text)
    assert [e.path for e in err.value.errors] == ["quotas.max_priority"]
