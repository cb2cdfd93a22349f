"""Runtime laws learned from finished jobs (predictor.runtimes.RuntimeHistory)."""

from __future__ import annotations

import math

import pytest

from predictor.runtimes import RuntimeHistory


def test_nothing_learned_gives_no_law():
    """Before any job finished there is no law to give."""
    assert RuntimeHistory().law("", "ann", "vision", 1) is None


def test_the_most_specific_key_with_many_runtimes_decides():
    """Dozens of one group's 4-GPU jobs at ~1 h outweigh the other groups' 10 s jobs, and the
    law says on what it rests."""
    h = RuntimeHistory()
    for i in range(40):
        h.add("", "", "other", 1, 10.0 + i % 3)
        h.add("", "", "vision", 4, 3600.0 * (1.0 + 0.01 * (i % 5)))
    law = h.law("", "", "vision", 4)
    assert law is not None and law.key == "group+gpus" and law.n == 40
    assert law.median_s == pytest.approx(3600.0 * 1.02, rel=0.05)
    other = h.law("", "", "other", 1)
    assert other is not None and other.median_s < 20.0


def test_a_key_with_one_runtime_only_moves_the_law_a_little():
    """One 4-GPU job of a new group moves the group's law a quarter of the way (n / (n + 3))
    from the all-jobs law, in log space, and its spread stays wide."""
    h = RuntimeHistory()
    for _ in range(30):
        h.add("", "", "a", 1, 100.0)
    h.add("", "", "new", 4, 10_000.0)
    law = h.law("", "", "new", 4)
    assert law is not None and law.key == "group+gpus" and law.n == 1
    assert 100.0 < law.median_s < 10_000.0
    assert law.sigma > 0.5


def test_only_the_last_window_runtimes_count():
    """The law follows a workload that drifts: old runtimes leave the window."""
    h = RuntimeHistory(window=10)
    for _ in range(10):
        h.add("", "", "g", 1, 100.0)
    for _ in range(10):
        h.add("", "", "g", 1, 5000.0)
    law = h.law("", "", "g", 1)
    assert law is not None and law.median_s == pytest.approx(5000.0)


def test_bad_runtimes_are_ignored():
    """Zero, negative and non-finite runtimes teach nothing."""
    h = RuntimeHistory()
    for value in (0.0, -5.0, math.inf, math.nan):
        h.add("", "", "g", 1, value)
    assert h.observed == 0 and h.law("", "", "g", 1) is None
