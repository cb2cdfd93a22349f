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


def test_finished_siblings_decide_the_median():
    """Among a group's 1-GPU jobs that mostly run an hour, a job submitted a minute after a
    sibling that crashed in 20 s is taken for a 20 s job; one submitted an hour later is not."""
    h = RuntimeHistory()
    for i in range(40):
        h.add("", "", "vision", 1, 3600.0, submit_s=-100_000.0 + 1000.0 * i)
    h.add("", "", "vision", 1, 20.0, submit_s=0.0)
    near = h.law("", "", "vision", 1, submit_s=60.0)
    far = h.law("", "", "vision", 1, submit_s=3600.0)
    unknown = h.law("", "", "vision", 1)
    assert near is not None and near.key == "siblings" and near.n == 1
    assert near.median_s == pytest.approx(20.0)
    assert near.p90_s > 3 * near.median_s  # one sibling: the spread stays wide
    assert far is not None and far.key == "group+gpus" and far.median_s > 1000.0
    assert unknown is not None and unknown.key == "group+gpus"


def test_siblings_are_the_same_submitter_and_size():
    """A 20 s job of another group, or of the same group on 4 GPUs, is no sibling."""
    h = RuntimeHistory()
    for i in range(10):
        h.add("", "", "vision", 1, 3600.0, submit_s=-100_000.0 + 1000.0 * i)
    h.add("", "", "speech", 1, 20.0, submit_s=0.0)
    h.add("", "", "vision", 4, 20.0, submit_s=0.0)
    law = h.law("", "", "vision", 1, submit_s=30.0)
    assert law is not None and law.key == "group+gpus" and law.median_s > 1000.0


def test_jobs_of_no_known_submitter_have_no_siblings():
    """With neither user nor group, nothing says two jobs came from one submitter: a 20 s job
    submitted a minute before is no sibling, and the law stays the GPU count's."""
    from types import SimpleNamespace

    from predictor.runtimes import siblings

    h = RuntimeHistory()
    for i in range(10):
        h.add("", "", "", 1, 3600.0, submit_s=-100_000.0 + 1000.0 * i)
    h.add("", "", "", 1, 20.0, submit_s=0.0)
    law = h.law("", "", "", 1, submit_s=60.0)
    assert law is not None and law.key != "siblings" and law.median_s > 1000.0

    def anon(submit_s: float, group: str = "") -> SimpleNamespace:
        return SimpleNamespace(
            model="", user="", group=group, gpus_per_worker=1, workers=1, submit_s=submit_s
        )

    assert not siblings(anon(0.0), anon(60.0))
    assert siblings(anon(0.0, "vision"), anon(60.0, "vision"))
