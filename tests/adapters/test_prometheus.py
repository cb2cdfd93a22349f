"""Staleness rules of the Prometheus adapter (pure parts; the real server is used end to end)."""

from __future__ import annotations

import logging

import pytest

from cpn.adapters.prometheus import MetricsSource, Reading, Sample, _vector, read_error


def source_with(cpu: dict[str, Sample], ok: bool = True) -> MetricsSource:
    source = MetricsSource("http://127.0.0.1:1", max_age_s=120)
    source.reading = Reading(cpu=cpu, ok=ok, read_at_s=1000.0)
    return source


def test_fresh_samples_are_trusted_and_clamped():
    """A recent sample is used, clamped into 0..1."""
    source = source_with({"n1": Sample(0.4, 990.0), "n2": Sample(1.7, 990.0)})
    assert source.cpu_util(1000.0, {}) == {"n1": 0.4, "n2": 1.0}


def test_old_samples_are_ignored():
    """A sample older than max_age_s says nothing about now."""
    source = source_with({"n1": Sample(0.9, 800.0)})
    assert source.cpu_util(1000.0, {}) == {}
    assert source.fresh(1000.0)[0] is False


def test_sample_older_than_the_newest_workload_is_ignored():
    """A sample taken before (or just after) a job started cannot reflect that job."""
    source = source_with({"n1": Sample(0.1, 990.0), "n2": Sample(0.1, 990.0)})
    assert source.cpu_util(1000.0, {"n1": 980.0}) == {"n2": 0.1}


def test_unreachable_prometheus_is_not_fresh_and_says_why(caplog: pytest.LogCaptureFixture):
    """After a failed read the source reports the error, and logs it once (not at every
    refresh while it stays the same)."""
    source = MetricsSource("http://127.0.0.1:9", max_age_s=120, timeout_s=1)
    with caplog.at_level(logging.WARNING, logger="cpn.adapters.prometheus"):
        reading = source.refresh()
        source.refresh()
    assert reading.ok is False and reading.error
    fresh, why = source.fresh(1000.0)
    assert fresh is False and why == reading.error
    ours = [r.getMessage() for r in caplog.records if r.name == "cpn.adapters.prometheus"]
    assert ours == [f"prometheus http://127.0.0.1:9 not read: {reading.error}"]


def test_vector_parsing_skips_nan_and_unlabelled_rows():
    """Only labelled, numeric samples are kept."""
    rows = [
        {"metric": {"instance": "a"}, "value": [5, "0.5"]},
        {"metric": {"instance": "b"}, "value": [5, "NaN"]},
        {"metric": {}, "value": [5, "0.3"]},
    ]
    assert _vector(rows, "instance") == {"a": Sample(0.5, 5.0)}


def test_a_read_that_timed_out_says_so_within_the_cut() -> None:
    """A slow Prometheus: the client's error names the whole query URL before its cause;
    the reason shown leads with the timeout (before, the 300-character cut hid it)."""
    url = "/api/v1/query?query=" + "%28rate%28node_cpu_seconds_total%29%29" * 10
    err = ConnectionError(
        f"HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url: {url} "
        '(Caused by ReadTimeoutError("Read timed out. (read timeout=5)"))'
    )
    said = read_error(err, 5)
    assert said.startswith("no answer in 5s (read timed out): ConnectionError:")
    assert len(said) <= 300
    assert read_error(ValueError("bad payload"), 5) == "ValueError: bad payload"
