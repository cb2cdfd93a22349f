"""The inverse Gittins index of a log-normal runtime law (cpn.core.runtime_law) and the
ordering of checkpointing jobs under ``preemption.gittins`` (cpn.core.queue)."""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cpn.core.model import Estimate, frozen_map
from cpn.core.policy import Preemption, QueuePolicy
from cpn.core.queue import order_jobs, runtime_for_order
from cpn.core.runtime_law import gittins_remaining_s, sigma_of
from tests.builders import job, snapshot

A100 = "A100-80GB"


def _brute_force(median: float, sigma: float, age: float) -> float:
    """min over quantum ends b of E[min(S, b) - age | S > age] / P(S <= b | S > age),
    by numerical integration of the survival function on a fine grid."""
    law = NormalDist(math.log(median), sigma)
    grid = np.geomspace(max(age, median * 1e-4), median * math.exp(7 * sigma), 2_000)
    survival = np.array([1.0 - law.cdf(math.log(t)) for t in grid])
    served = np.concatenate([[0.0], np.cumsum(np.diff(grid) * (survival[1:] + survival[:-1]) / 2)])
    if age == 0:  # the stretch below the grid's first point: survival ~ 1 there
        served += grid[0]
    alive = 1.0 - law.cdf(math.log(age)) if age > 0 else 1.0
    chance = alive - survival
    ok = chance > 1e-9
    return float(np.min(served[ok] / chance[ok]))


@pytest.mark.parametrize(
    ("sigma", "age"), [(0.5, 0.0), (1.0, 0.0), (2.0, 0.0), (1.0, 2.0), (2.0, 5.0)]
)
def test_the_index_is_the_least_service_per_chance_of_ending(sigma, age):
    """Against a brute-force search over quantum ends: within 2%."""
    assert gittins_remaining_s(1.0, sigma, age) == pytest.approx(
        _brute_force(1.0, sigma, age), rel=0.02
    )


def test_an_exact_law_gives_what_is_left_of_the_median():
    assert gittins_remaining_s(100.0, 0.0, 0.0) == 100.0
    assert gittins_remaining_s(100.0, 0.0, 30.0) == 70.0
    assert gittins_remaining_s(100.0, 0.0, 300.0) == 0.0


@given(
    st.floats(1.0, 1e7),
    st.floats(0.05, 3.0),
    st.floats(0.0, 50.0),
    st.floats(0.1, 1000.0),
)
def test_the_law_is_scale_free(median, sigma, age_ratio, scale):
    """Times scale with the median: the same table serves every median."""
    one = gittins_remaining_s(median, sigma, age_ratio * median)
    scaled = gittins_remaining_s(median * scale, sigma, age_ratio * median * scale)
    assert scaled == pytest.approx(one * scale, rel=1e-6)
    assert math.isfinite(one) and one >= 0.0


def test_a_wide_law_puts_a_fresh_job_ahead_and_one_that_outlived_it_behind():
    """Under a wide law a job not yet started may well end within a short quantum, so it
    ranks ahead of its median; once it outlived most of its law it ranks far behind it. A
    narrow law ranks a job that ran most of its median close to ending."""
    wide = 2.0
    assert gittins_remaining_s(100.0, wide, 0.0) < 100.0
    assert gittins_remaining_s(100.0, wide, 1000.0) > 1000.0
    narrow = 0.3
    assert gittins_remaining_s(100.0, narrow, 100.0) < 50.0


def _law(key: str, median: float, p90: float, **fields):
    estimate = Estimate(runtime_s=frozen_map({A100: median}), high_s=frozen_map({A100: p90}))
    return replace(job(key, runtime_s={A100: median}, **fields), estimate=estimate)


def test_gittins_ranks_a_wide_law_checkpointing_job_ahead_only_when_on():
    """Two jobs of the same median (1 h): one checkpoints under a wide law (p90 13x its
    median), one does not. By the conditional median they tie and arrival order decides;
    under ``preemption.gittins`` the one that may be stopped goes first."""
    steady = _law("a-steady", 3600.0, 3600.0 * 13, submitted_s=0.0)
    stoppable = _law("b-stoppable", 3600.0, 3600.0 * 13, submitted_s=1.0, checkpoint=True)
    pending = (steady, stoppable)
    plain = QueuePolicy()
    on = replace(plain, preemption=replace(plain.preemption, gittins=True))
    first_plain = order_jobs(pending, snapshot(jobs=pending, now_s=10.0, policy=plain))[0]
    first_on = order_jobs(pending, snapshot(jobs=pending, now_s=10.0, policy=on))[0]
    assert first_plain.job.key == "a-steady"
    assert first_on.job.key == "b-stoppable"
    off = replace(on, preemption=Preemption(enabled=False, gittins=True))
    first_off = order_jobs(pending, snapshot(jobs=pending, now_s=10.0, policy=off))[0]
    assert first_off.job.key == "a-steady"  # nothing can be stopped: no index


def test_a_checkpointing_job_that_outlived_its_law_ranks_behind_a_fresh_one():
    """Attained service moves a checkpointing job back under the index."""
    sigma_p90 = 3600.0 * 13
    old = _law("old", 3600.0, sigma_p90, checkpoint=True, attained_gpu_s=20 * 3600.0)
    fresh = _law("fresh", 3600.0, sigma_p90, checkpoint=True)
    sigma = sigma_of(3600.0, sigma_p90)
    assert runtime_for_order(old, frozenset(), gittins=True) == pytest.approx(
        gittins_remaining_s(3600.0, sigma, 20 * 3600.0)
    )
    assert runtime_for_order(old, frozenset(), gittins=True) > runtime_for_order(
        fresh, frozenset(), gittins=True
    )
