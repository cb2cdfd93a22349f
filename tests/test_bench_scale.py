"""bench/benchbed.py's scale layout (pure): the nodes file bench_scale.py brings a bed up
with (the bed itself: tests/e2e/test_bench_scale.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.benchbed import SCALE_GPU_MODELS, scale_layout
from testbed.spec import PORT_BLOCK, parse_spec


def test_ten_members_of_a_thousand_nodes_spread_four_gpu_types() -> None:
    spec = parse_spec(scale_layout(10, 1000), port_base=25400)
    assert len(spec.clusters) == 11
    assert spec.clusters[-1].port(spec.port_base, "kwok") < spec.port_base + 11 * PORT_BLOCK
    assert [len(c.nodes) for c in spec.members] == [1000] * 10
    assert sum(n.gpus for c in spec.members for n in c.nodes) == 80_000
    members_per_type = Counter(
        gpu for c in spec.members for gpu in {n.gpu_model.key for n in c.nodes}
    )
    # two types per member in turn (A100+V100, V100+H100, H100+T4, T4+A100, ...)
    assert members_per_type == {"A100-80GB": 5, "V100-32GB": 6, "H100-80GB": 5, "T4-16GB": 4}
    assert set(members_per_type) == set(SCALE_GPU_MODELS)
    assert all(len({n.gpu_model.key for n in c.nodes}) == 2 for c in spec.members)
    assert all("prometheus" not in c.components for c in spec.members)


def test_one_node_per_member_is_one_group() -> None:
    spec = parse_spec(scale_layout(3, 1))
    assert [len(c.nodes) for c in spec.members] == [1, 1, 1]
    assert len({n.name for c in spec.members for n in c.nodes}) == 3


def test_empty_layouts_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        scale_layout(0, 10)
