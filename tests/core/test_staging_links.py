"""Learned link bandwidth (cpn.core.staging.Links): the static figure is the prior until
three stagings are in, then the median of the last nine; both directions are apart."""

from __future__ import annotations

import pytest

from cpn.core.model import DataInput, Job
from cpn.core.staging import WINDOW, Links, copied_bytes, gbps, seconds, sized

GB = 10**9


def test_bandwidth_and_seconds_are_inverse() -> None:
    assert gbps(10 * GB, 8.0) == pytest.approx(10.0)
    assert seconds(10 * GB, 10.0) == pytest.approx(8.0)
    assert gbps(0, 5.0) is None and gbps(GB, 0.0) is None
    assert seconds(GB, None) == 0.0


def test_the_prior_counts_until_three_stagings_then_only_the_measurements() -> None:
    links = Links()
    assert links.estimate("b", "a", 10.0) == 10.0  # nothing learned: the static figure
    links.observe("b", "a", 10 * GB, 80.0)  # 1 Gbit/s
    assert links.estimate("b", "a", 10.0) == pytest.approx(5.5)  # median of 1 and the prior
    links.observe("b", "a", 10 * GB, 80.0)
    assert links.estimate("b", "a", 10.0) == pytest.approx(1.0)  # median of 1, 1, 10
    links.observe("b", "a", 10 * GB, 40.0)  # 2 Gbit/s
    assert links.estimate("b", "a", 10.0) == pytest.approx(1.0)  # the prior no longer counts
    assert links.estimate("a", "b", 10.0) == 10.0  # the other direction learned nothing


def test_only_the_last_window_counts() -> None:
    links = Links()
    for _ in range(WINDOW):
        links.observe("b", "a", 10 * GB, 80.0)  # 1 Gbit/s
    for _ in range(WINDOW // 2 + 1):
        links.observe("b", "a", 10 * GB, 20.0)  # 4 Gbit/s: the link got faster
    assert links.count("b", "a") == WINDOW
    assert links.estimate("b", "a", None) == pytest.approx(4.0)


def test_a_staging_within_one_cluster_or_of_unknown_size_teaches_nothing() -> None:
    links = Links()
    assert not links.observe("a", "a", GB, 1.0)
    assert not links.observe("", "a", GB, 1.0)
    assert not links.observe("b", "a", 0, 1.0)
    assert links.rows() == []


def test_the_bytes_copied_are_read_from_the_first_report_that_gives_them() -> None:
    assert copied_bytes(["", "not json", '{"bytes": 0}', '{"bytes": 4096, "seconds": 1}']) == 4096
    assert copied_bytes(['{"bytes": true}', '["bytes"]', '{"bytes": "12"}']) is None
    assert copied_bytes([]) is None


def test_an_unsized_input_takes_the_size_learned_from_its_source_only() -> None:
    job = Job(
        key="ns/a",
        submit_s=0.0,
        inputs=(
            DataInput(name="weights", version="v2", location="member-b"),
            DataInput(name="imagenet", size_gb=5.0, location="member-b"),
            DataInput(name="other", location="member-c"),
        ),
    )
    learned = {
        ("member-b", "weights@v2"): 3 * GB,
        ("member-b", "imagenet"): GB,
        ("member-b", "other"): GB,
    }
    out = sized(job, learned)
    assert [i.size_gb for i in out.inputs] == [3.0, 5.0, 0.0]  # declared sizes win
    assert sized(job, {}) is job
