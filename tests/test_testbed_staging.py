"""The bed's staging simulator (testbed/staging.py): a running staging pod ends after its
bytes over the bed's true link, a node can make stagings fail, and nothing else is touched."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from testbed.staging import (
    DEFAULT_LINK_GBPS,
    read_links,
    read_sizes,
    staging_annotations,
    write_links,
)

NOW = 1_800_000_000.0


def pod(size: int, source: str, *, phase: str = "Running", label: bool = True) -> dict[str, Any]:
    labels = {"cpn.io/staging": "abc"} if label else {}
    notes = {"cpn.io/staging-bytes": str(size), "cpn.io/staging-source": source}
    return {"metadata": {"labels": labels, "annotations": notes}, "status": {"phase": phase}}


def seconds_to(notes: dict[str, str]) -> float:
    end = datetime.strptime(notes["testbed.cpn.io/finish-at"], "%Y-%m-%dT%H:%M:%S.%f%z")
    return end.timestamp() - NOW


def test_a_staging_pod_ends_after_its_bytes_over_the_true_link(tmp_path: Path) -> None:
    path = tmp_path / "links.yaml"
    write_links(path, {("member-a", "member-b"): 2.0})
    links = read_links(path)
    notes = staging_annotations(pod(10 * 10**9, "member-b"), "member-a", False, links, NOW)
    assert notes is not None and abs(seconds_to(notes) - 40.0) < 0.01  # 80 Gbit at 2 Gbit/s
    assert "testbed.cpn.io/outcome" not in notes
    other = staging_annotations(pod(10**9, "member-c"), "member-a", False, links, NOW)
    assert other is not None and abs(seconds_to(other) - 8 / DEFAULT_LINK_GBPS) < 0.01


def test_a_failing_node_fails_its_staging_pods() -> None:
    notes = staging_annotations(pod(10**9, "member-b"), "member-a", True, {}, NOW)
    assert notes is not None and notes["testbed.cpn.io/outcome"] == "Failed"


def test_other_pods_and_pods_not_running_or_already_ending_are_left_alone(tmp_path: Path) -> None:
    assert staging_annotations(pod(1, "b", label=False), "a", False, {}, NOW) is None
    assert staging_annotations(pod(1, "b", phase="Pending"), "a", False, {}, NOW) is None
    ending = pod(1, "b")
    ending["metadata"]["annotations"]["testbed.cpn.io/finish-at"] = "x"
    assert staging_annotations(ending, "a", False, {}, NOW) is None
    assert read_links(tmp_path / "absent.yaml") == {}
    (tmp_path / "bad.yaml").write_text("links: [{between: [a], gbps: nope}]")
    assert read_links(tmp_path / "bad.yaml") == {}


def test_a_staging_pod_reports_its_bytes_and_an_unsized_input_copies_its_true_size(
    tmp_path: Path,
) -> None:
    path = tmp_path / "links.yaml"
    write_links(path, {("member-a", "member-b"): 8.0}, {"weights@v2": 2 * 10**9})
    links, sizes = read_links(path), read_sizes(path)
    sized = staging_annotations(pod(10**9, "member-b"), "member-a", False, links, NOW, sizes)
    assert sized is not None
    assert json.loads(sized["testbed.cpn.io/termination-message"])["bytes"] == 10**9
    unsized = pod(0, "member-b")
    unsized["metadata"]["annotations"]["cpn.io/staging-input"] = "weights@v2"
    notes = staging_annotations(unsized, "member-a", False, links, NOW, sizes)
    assert notes is not None
    assert json.loads(notes["testbed.cpn.io/termination-message"])["bytes"] == 2 * 10**9
    assert abs(seconds_to(notes) - 2.0) < 0.01  # 2 GB over 8 Gbit/s
    failed = staging_annotations(unsized, "member-a", True, links, NOW, sizes)
    assert failed is not None and "testbed.cpn.io/termination-message" not in failed
