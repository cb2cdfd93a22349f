"""The simulator's cluster file: parsing, canonical GPU names, errors naming the field."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from simkit import DATA, SIM_DATA

from cpn.core.errors import InvalidSpec
from cpn.sim.clusters import parse_clusters, read_clusters


def node(**overrides):
    base = {"count": 2, "gpu_type": "V100", "gpus_per_node": 4, "cpu": 8, "memory_gib": 64}
    return {**base, **overrides}


def doc(**overrides):
    base = {
        "reference_gpu": "V100",
        "clusters": [{"name": "east", "nodes": [node()]}, {"name": "west", "nodes": [node()]}],
        "bandwidth_gbps": {"east": {"west": 10}},
    }
    return {**base, **overrides}


def test_expands_nodes_and_canonicalises_gpu_types():
    """``count`` nodes are created per group, GPU types are canonical, all free at first."""
    parsed = parse_clusters(doc())
    assert parsed.reference_gpu == "V100-16GB"
    east = parsed.clusters[0]
    assert [n.name for n in east.nodes] == ["east-g0-000", "east-g0-001"]
    assert {n.gpu_type for n in east.nodes} == {"V100-16GB"}
    assert all(n.free_gpus == n.gpus == 4 for n in east.nodes)
    assert parsed.total_gpus == 16 and parsed.gpu_types == ("V100-16GB",)


def test_bandwidth_is_symmetric_and_missing_pairs_have_no_link():
    """A link written once works both ways; an unnamed pair has no link."""
    three = doc(
        clusters=[{"name": c, "nodes": [node()]} for c in ("a", "b", "c")],
        bandwidth_gbps={"a": {"b": 25}},
    )
    parsed = parse_clusters(three)
    assert parsed.bandwidth_gbps["a"]["b"] == parsed.bandwidth_gbps["b"]["a"] == 25
    assert "c" not in parsed.bandwidth_gbps


@pytest.mark.parametrize(
    ("change", "want_path"),
    [
        pytest.param({"reference_gpu": "Z9000"}, "reference_gpu", id="unknown reference"),
        pytest.param(
            {"clusters": [{"name": "east", "nodes": [node(), node(gpu_type="Z9000")]}]},
            "clusters[0].nodes[1].gpu_type",
            id="unknown node GPU",
        ),
        pytest.param(
            {"clusters": [{"name": "east", "nodes": [node(gpus_per_node="many")]}]},
            "clusters[0].nodes[0].gpus_per_node",
            id="not a number",
        ),
        pytest.param(
            {"clusters": [{"name": "east", "nodes": [node(gpus_per_node=None)]}]},
            "clusters[0].nodes[0].gpus_per_node",
            id="missing",
        ),
        pytest.param(
            {"bandwidth_gbps": {"east": {"north": 5}}},
            "bandwidth_gbps.east.north",
            id="unknown link",
        ),
        pytest.param(
            {"bandwidth_gbps": {"east": {"west": 0}}}, "bandwidth_gbps.east.west", id="zero link"
        ),
        pytest.param(
            {
                "clusters": [{"name": "x", "nodes": [node()]}, {"name": "x", "nodes": [node()]}],
                "bandwidth_gbps": {},
            },
            "clusters[1].name",
            id="duplicate name",
        ),
        pytest.param({"clusters": []}, "clusters", id="no clusters"),
        pytest.param({"colour": "blue"}, "colour", id="unknown field"),
    ],
)
def test_errors_name_the_field_path(change, want_path):
    """Every bad field is reported with its path."""
    with pytest.raises(InvalidSpec) as err:
        parse_clusters(doc(**change), where="c.yaml")
    assert want_path in [e.path for e in err.value.errors]
    assert str(err.value).startswith("c.yaml: ")


def test_read_names_the_file(tmp_path: Path):
    """A file that is not YAML, or not there, is refused naming the file."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [", encoding="utf-8")
    with pytest.raises(InvalidSpec, match=r"bad\.yaml"):
        read_clusters(bad)
    with pytest.raises(InvalidSpec, match=r"nope\.yaml"):
        read_clusters(tmp_path / "nope.yaml")


def test_shipped_gavel_cluster_is_gavels():
    """The shipped Gavel cluster: 36 K80, 36 P100, 36 V100 GPUs, 3 clusters of 4-GPU nodes."""
    parsed = read_clusters(SIM_DATA / "gavel-cluster.yaml")
    assert len(parsed.clusters) == 3
    per_type = Counter()
    for cluster in parsed.clusters:
        assert len({n.gpu_type for n in cluster.nodes}) == 1
        for n in cluster.nodes:
            assert n.gpus == 4
            per_type[n.gpu_type] += n.gpus
    assert per_type == {"K80": 36, "P100": 36, "V100-16GB": 36}
    assert parsed.reference_gpu == "V100-16GB"


def test_small_test_clusters_parse():
    """The tests' small cluster file parses: 8 V100 and 4 K80 GPUs with one link."""
    parsed = read_clusters(DATA / "small-clusters.yaml")
    assert parsed.total_gpus == 12
    assert parsed.bandwidth_gbps["west"]["east"] == 10


def test_gpu_memory_defaults_to_the_catalog():
    """A node group without gpu_memory_gib gets its GPU type's memory from the catalog."""
    parsed = parse_clusters(
        doc(clusters=[{"name": "east", "nodes": [node(gpu_type="a100-80gb")]}], bandwidth_gbps={})
    )
    assert parsed.clusters[0].nodes[0].gpu_memory_gib == 80
