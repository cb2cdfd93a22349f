"""The runtime law an estimate states, what it says about a job that already ran, and
what a preemption costs (cpn.core.runtime_law, cpn.core.preemption)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from cpn.core.eta import Projection
from cpn.core.eta_calibration import CalibrationConfig, WaitCalibrator
from cpn.core.model import Estimate, frozen_map
from cpn.core.policy import Preemption
from cpn.core.preemption import preemption_cost_gpu_s, saved_s
from cpn.core.runtime_law import Z90, conditional_median_s, expected_end_s, quantile_s, sigma_of
from tests.builders import job, running

A100 = "A100-80GB"


def test_sigma_and_quantiles_round_trip():
    """A law with median 100 and p90 400 gives back its p90 and a p50 of 100."""
    sigma = sigma_of(100.0, 400.0)
    assert sigma == pytest.approx(math.log(4.0) / Z90)
    assert quantile_s(100.0, sigma, 0.9) == pytest.approx(400.0)
    assert quantile_s(100.0, sigma, 0.5) == pytest.approx(100.0)
    assert sigma_of(100.0, None) == 0.0 and sigma_of(100.0, 90.0) == 0.0


def test_an_exact_estimate_ends_at_its_median_or_now_once_past_it():
    """No spread: the total is the median, or the age once the job outran it."""
    assert conditional_median_s(100.0, 0.0, 50.0) == 100.0
    assert conditional_median_s(100.0, 0.0, 150.0) == 150.0


def test_a_wide_law_grows_with_age_and_far_past_its_p90_doubles_the_age():
    """The longer a job of a wide law has run, the longer it is expected to run in total;
    far beyond the law's p90 it is expected to run about as long again."""
    sigma = sigma_of(100.0, 400.0)
    totals = [conditional_median_s(100.0, sigma, age) for age in (0.0, 50.0, 200.0, 400.0)]
    assert totals[0] == 100.0
    assert totals == sorted(totals) and totals[-1] > 400.0
    far = conditional_median_s(100.0, sigma, 1_000_000.0)
    assert far == pytest.approx(2 * 1_000_000.0 - 400.0)


def test_a_running_job_past_a_wide_law_is_not_expected_to_end_now():
    """Room held by a job that outlived its law frees later, not 'now' on paper (the cycle's
    reservations read it); with an exact estimate it frees at its predicted end or now."""
    law = Estimate(runtime_s=frozen_map({A100: 100.0}), high_s=frozen_map({A100: 400.0}))
    wide = replace(job("w"), estimate=law)
    r = running(wide, "m", A100, ("m-0",), start_s=0, end_s=100)
    assert expected_end_s(r, 10_000.0, at_least_s=0.0) > 15_000.0
    exact = running(job("e", runtime_s={A100: 100.0}), "m", A100, ("m-0",), start_s=0, end_s=100)
    assert expected_end_s(exact, 50.0, at_least_s=0.0) == 100.0
    assert expected_end_s(exact, 500.0, at_least_s=0.0) == 500.0


@pytest.mark.parametrize(
    ("elapsed", "interval", "kept"),
    [(0.0, 10.0, 0.0), (25.0, 10.0, 20.0), (30.0, 10.0, 30.0), (9.0, 10.0, 0.0), (5.0, 0.0, 5.0)],
)
def test_saved_is_the_work_up_to_the_last_checkpoint(elapsed, interval, kept):
    """Checkpoints every ``interval`` of compute; interval 0 means every instant."""
    assert saved_s(elapsed, interval) == pytest.approx(kept)


def test_preemption_cost_is_lost_work_plus_restart_in_gpu_seconds():
    """4 GPUs, 25 s run, checkpoints every 10 s (its own interval wins), restart 6 s."""
    rules = Preemption(enabled=True, restart_cost_s=6.0, checkpoint_interval_s=1800.0)
    r = running(
        job("v", gpus=4, checkpoint=True, checkpoint_interval_s=10.0),
        "m",
        A100,
        ("m-0",),
        start_s=100,
        end_s=1000,
    )
    assert preemption_cost_gpu_s(r, 125.0, rules) == pytest.approx(4 * (5.0 + 6.0))
    # with the policy's interval nothing was checkpointed yet: all 25 s are lost
    plain = running(job("p", gpus=4, checkpoint=True), "m", A100, ("m-0",), start_s=100, end_s=1000)
    assert preemption_cost_gpu_s(plain, 125.0, rules) == pytest.approx(4 * (25.0 + 6.0))


def test_the_stated_range_spans_the_p20_to_p80_of_followed_ratios():
    """No range before min_samples; then the projected wait scaled by the ratios' p20 and
    p80, holding the point; a new observation changes the (cached) answer."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=5))
    found = Projection(start_s=1000.0 + 600.0, end_s=5000.0, cluster="c", gpu_type=A100)
    for _ in range(4):
        calibrator.observe("q", 600.0, 600.0)
    told = calibrator.state("q", found, 1000.0)
    assert told.start_low_s is None and told.start_high_s is None
    for ratio in (0.5, 1.0, 2.0, 3.0, 4.0, 1.0):
        calibrator.observe("q", 600.0, 600.0 * ratio)
    told = calibrator.state("q", found, 1000.0)
    assert told.start_low_s is not None and told.start_high_s is not None
    assert told.start_low_s <= told.start_s <= told.start_high_s
    assert told.start_high_s - 1000.0 == pytest.approx(
        600.0 * float(np.quantile([1, 1, 1, 1, 0.5, 1, 2, 3, 4, 1], 0.8))
    )
    calibrator.observe("q", 600.0, 600.0 * 10)
    assert calibrator.state("q", found, 1000.0).start_high_s != told.start_high_s


@pytest.mark.parametrize("age", [0.0, 30.0, 100.0, 399.0, 401.0, 5_000.0, 1_000_000.0])
def test_the_conditional_quantile_at_one_half_is_the_conditional_median(age):
    """The range's quantile function and the median the cycle and the ETA read agree at q=0.5
    (so the point ETA stays the scheduling's), inside the law and past its p90 alike."""
    from cpn.core.runtime_law import conditional_quantile_s

    sigma = sigma_of(100.0, 400.0)
    assert conditional_quantile_s(100.0, sigma, age, 0.5) == pytest.approx(
        conditional_median_s(100.0, sigma, age)
    )


@pytest.mark.parametrize("age", [0.0, 50.0, 300.0, 2_000.0])
def test_conditional_quantiles_rise_with_q_and_never_fall_below_the_age(age):
    """q -> quantile is non-decreasing and at least the age; a wider law spreads further."""
    from cpn.core.runtime_law import conditional_quantile_s

    narrow, wide = sigma_of(100.0, 150.0), sigma_of(100.0, 1_000.0)
    for sigma in (narrow, wide):
        values = [conditional_quantile_s(100.0, sigma, age, q) for q in (0.05, 0.2, 0.5, 0.8, 0.95)]
        assert values == sorted(values) and values[0] >= age
    spread = [
        conditional_quantile_s(100.0, s, age, 0.8) / conditional_quantile_s(100.0, s, age, 0.2)
        for s in (narrow, wide)
    ]
    assert spread[1] > spread[0]
    assert conditional_quantile_s(100.0, 0.0, age, 0.9) == max(100.0, age)  # no spread: exact


def test_a_running_job_ends_within_its_quantiles():
    """quantile_end_s brackets expected_end_s: q=0.2 no later, q=0.8 no earlier; an exact
    estimate ends at its predicted end whatever q."""
    from cpn.core.runtime_law import quantile_end_s

    law = Estimate(runtime_s=frozen_map({A100: 100.0}), high_s=frozen_map({A100: 400.0}))
    r = running(replace(job("w"), estimate=law), "m", A100, ("m-0",), start_s=0, end_s=100)
    for now in (10.0, 150.0, 5_000.0):
        mid = expected_end_s(r, now, at_least_s=0.0)
        assert quantile_end_s(r, now, 0.2, at_least_s=0.0) <= mid + 1e-6
        assert quantile_end_s(r, now, 0.8, at_least_s=0.0) >= mid - 1e-6
        assert quantile_end_s(r, now, 0.5, at_least_s=0.0) == pytest.approx(mid)
    exact = running(job("e", runtime_s={A100: 100.0}), "m", A100, ("m-0",), start_s=0, end_s=100)
    assert quantile_end_s(exact, 50.0, 0.9, at_least_s=0.0) == 100.0
