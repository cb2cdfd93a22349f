"""Per-group max_priority: a priority a user writes in spec cannot outrank the policy's bound."""

from __future__ import annotations

import pytest

from cpn.api.policy import parse_policy
from cpn.core.errors import PolicyError
from cpn.core.policy import QueuePolicy
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


def test_the_default_policy_bounds_every_group_at_priority_0() -> None:
    """Secure by default: without max_priority anywhere (the shipped policy, an empty
    document, the built-in defaults) a job asking 1000 counts with 0, and cannot reach a
    level that asks a higher priority; a negative priority still counts as written."""
    levels = "levels: [{name: urgent, min_priority: 100}, {name: normal}]\n"
    for policy in (QueuePolicy(), parse_policy(""), parse_policy(levels)):
        assert policy.quotas.max_priority == 0
        assert effective_priority(job("a", group="vision", priority=1000), policy) == 0
        assert effective_priority(job("b", group="vision", priority=-5), policy) == -5
    policy = parse_policy(levels)
    asks = job("vision/asks-1000", group="vision", priority=1000, submitted_s=0.0)
    (ranked,) = order_jobs([asks], snapshot(policy=policy, now_s=30.0))
    assert ranked.level_name == "normal"


def test_an_explicit_null_lifts_the_bound() -> None:
    """An admin who means it writes max_priority: null: the written priority counts."""
    policy = parse_policy("quotas: {max_priority: null, groups: {vision: {gpus: 4}}}")
    assert effective_priority(job("a", group="vision", priority=700), policy) == 700
    policy = parse_policy("quotas: {groups: {ops: {max_priority: null}}}")
    assert effective_priority(job("a", group="ops", priority=700), policy) == 0  # falls back


@pytest.mark.parametrize("text", ["quotas: {max_priority: 1.5}", "quotas: {max_priority: yes}"])
def test_max_priority_must_be_an_integer(text: str) -> None:
    """max_priority is an integer; anything else is refused with its path."""
    with pytest.raises(PolicyError) as err:
        parse_policy(text)
    assert [e.path for e in err.value.errors] == ["quotas.max_priority"]
