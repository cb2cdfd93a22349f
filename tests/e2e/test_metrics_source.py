"""The Prometheus adapter against a member's real Prometheus (node-exporter series of the bed)."""

from __future__ import annotations

import time

import pytest

from cpn.adapters.prometheus import MetricsSource
from testbed.bed import Testbed
from testbed.workloads import wait_for
from tests.e2e.test_gpubenchmark import MEMBER, add_node, added_nodes

pytestmark = pytest.mark.e2e
__all__ = ["added_nodes"]  # the fixture, shared


@pytest.mark.timeout(120)
def test_a_node_that_just_joined_reads_idle_not_busy(
    testbed: Testbed, added_nodes: list[str]
) -> None:
    """An idle node whose CPU series is seconds old reads near 0, as it is: a rate over a
    window longer than the series underestimates its idle time (Prometheus extrapolates a
    young series' increase only half a scrape back), so the busy share read as
    1 - rate(idle) put every new node above the CPU ceiling for its first half minute
    (seen at `make demo`: 0.96, 0.80, 0.64 at 0, 10, 20 s on idle nodes)."""
    source = MetricsSource(testbed.prometheus_url(MEMBER), max_age_s=120)
    node = add_node(testbed, added_nodes)
    joined = time.time()
    reading = wait_for(
        lambda: source.refresh().cpu.get(node), timeout_s=60, what=f"{node}'s CPU series"
    )
    age = time.time() - joined
    assert age < 30, f"read {age:.0f}s after the join: too late to tell a young series"
    assert reading.value < 0.2, f"idle node {node} read {reading.value:.2f} busy at {age:.0f}s"
    assert source.cpu_util(time.time(), {}).get(node, 0.0) < 0.2
