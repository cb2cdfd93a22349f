"""Projected waits calibrated from the waits of jobs that already started."""

from __future__ import annotations

import numpy as np
import pytest

from cpn.core.eta import Projection
from cpn.core.eta_calibration import CalibrationConfig, WaitCalibrator, fit_factor
from tests.builders import job


def test_no_history_returns_the_raw_projection():
    """With no job observed yet, the stated wait is the projected wait itself."""
    calibrator = WaitCalibrator()
    assert calibrator.factor("q") == 1.0
    assert calibrator.calibrate("q", 3600.0) == 3600.0


def test_too_little_history_returns_the_raw_projection():
    """Below min_samples observations the projection is not scaled, at the threshold it is."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=5))
    for _ in range(4):
        calibrator.observe("q", 1000.0, 3000.0)
    assert calibrator.calibrate("q", 1000.0) == 1000.0
    calibrator.observe("q", 1000.0, 3000.0)
    assert calibrator.calibrate("q", 1000.0) == pytest.approx(3000.0)


@pytest.mark.parametrize("statistic", ["fit", "median"])
def test_converges_to_twice_on_a_stream_where_jobs_wait_twice_as_long(statistic):
    """Actual = 2 x projected (with noise): the factor tends to 2 and ETAs double."""
    rng = np.random.default_rng(7)
    calibrator = WaitCalibrator(CalibrationConfig(statistic=statistic, window=400))
    factors = []
    for _ in range(1000):
        projected = float(rng.uniform(600, 50_000))
        calibrator.observe("q", projected, 2.0 * projected * float(rng.lognormal(0, 0.1)))
        factors.append(calibrator.factor("q"))
    assert factors[10] == 1.0  # before min_samples
    assert abs(factors[-1] - 2.0) < 0.05
    assert calibrator.calibrate("q", 7200.0) == pytest.approx(7200.0 * factors[-1])


def test_only_recent_observations_count():
    """The window forgets old ratios: after a regime change the factor follows the new one."""
    calibrator = WaitCalibrator(CalibrationConfig(window=50, min_samples=10))
    for _ in range(200):
        calibrator.observe("q", 1000.0, 3000.0)
    assert calibrator.factor("q") == pytest.approx(3.0)
    for _ in range(50):
        calibrator.observe("q", 1000.0, 1000.0)
    assert calibrator.factor("q") == pytest.approx(1.0)


def test_factor_uses_only_what_was_observed_so_far():
    """Observing a later job never changes a factor computed earlier (no peeking ahead)."""
    config = CalibrationConfig(min_samples=3)
    stream = [(1000.0, 1500.0), (800.0, 2400.0), (2000.0, 2000.0), (500.0, 3000.0), (100.0, 90.0)]
    online = WaitCalibrator(config)
    seen = []
    for projected, actual in stream:
        seen.append(online.factor("q"))
        online.observe("q", projected, actual)
    for i, factor in enumerate(seen):
        prefix = WaitCalibrator(config)
        for projected, actual in stream[:i]:
            prefix.observe("q", projected, actual)
        assert prefix.factor("q") == factor


def test_queues_are_calibrated_apart_and_borrow_the_pool_when_short():
    """A queue with its own history uses it; a new queue uses the pooled history of all."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=10))
    for _ in range(30):
        calibrator.observe("slow", 1000.0, 4000.0)
        calibrator.observe("exact", 1000.0, 1000.0)
    assert calibrator.factor("slow") == pytest.approx(4.0)
    assert calibrator.factor("exact") == pytest.approx(1.0)
    pooled = calibrator.factor("new")
    assert 1.0 <= pooled <= 4.0
    assert calibrator.samples("new") == 0 and calibrator.samples("slow") == 30


def test_factor_is_clamped_and_short_projections_floored():
    """Ratios of near-zero projections count from floor_s; the factor stays within bounds."""
    config = CalibrationConfig(min_samples=1, floor_s=60.0, max_factor=4.0)
    calibrator = WaitCalibrator(config)
    calibrator.observe("q", 0.0, 30.0)  # both under the floor: ratio 1
    assert calibrator.factor("q") == 1.0
    calibrator = WaitCalibrator(config)
    calibrator.observe("q", 1.0, 100_000.0)
    assert calibrator.factor("q") == 4.0
    assert calibrator.calibrate("q", 0.0) == 0.0


def test_invalid_observations_are_ignored():
    """Negative or non-finite waits are not learnt from."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=1))
    calibrator.observe("q", -5.0, 100.0)
    calibrator.observe("q", 100.0, float("nan"))
    calibrator.observe("q", float("inf"), 100.0)
    assert calibrator.observations == 0 and calibrator.factor("q") == 1.0


def test_fit_factor_minimises_the_median_relative_error():
    """No factor on a fine grid has a smaller median |c x projected - actual| / actual."""
    rng = np.random.default_rng(3)
    ratios = rng.lognormal(0.3, 0.6, size=101)
    best = fit_factor(ratios)
    error = float(np.median(np.abs(best / ratios - 1.0)))
    grid = np.exp(np.linspace(-2, 3, 4001))
    errors = np.median(np.abs(grid[:, None] / ratios[None, :] - 1.0), axis=1)
    assert error <= errors.min() + 1e-12


def test_prior_pseudo_observations_pull_towards_the_prior():
    """prior_weight pseudo-observations at prior_factor shrink a small history's factor."""
    plain = WaitCalibrator(CalibrationConfig(min_samples=5, statistic="median"))
    shrunk = WaitCalibrator(
        CalibrationConfig(min_samples=5, statistic="median", prior_factor=1.0, prior_weight=10)
    )
    for _ in range(5):
        plain.observe("q", 1000.0, 3000.0)
        shrunk.observe("q", 1000.0, 3000.0)
    assert plain.factor("q") == pytest.approx(3.0)
    assert shrunk.factor("q") == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window": 0},
        {"min_samples": 0},
        {"statistic": "mean"},
        {"floor_s": 0.0},
        {"min_factor": 2.0, "max_factor": 1.0},
        {"prior_factor": 0.0},
        {"prior_weight": -1},
    ],
)
def test_bad_config_is_refused(kwargs):
    """Settings that cannot work raise ValueError."""
    with pytest.raises(ValueError):
        CalibrationConfig(**kwargs)


def test_a_waiting_job_whose_eta_slipped_raises_the_factor_before_it_starts():
    """Jobs told 1000 s whose re-projections now say 3000 s teach x3 while still waiting;
    with count_waiting off, or from started jobs only, they teach nothing yet."""
    for count_waiting, expected in ((True, 3.0), (False, 1.0)):
        config = CalibrationConfig(min_samples=5, count_waiting=count_waiting)
        calibrator = WaitCalibrator(config)
        for i in range(5):
            calibrator.projected(f"j{i}", "q", 0.0, 1000.0)
        assert calibrator.factor("q", 0.0) == 1.0  # nothing slipped yet
        for i in range(5):
            calibrator.projected(f"j{i}", "q", 500.0, 3000.0)
        assert calibrator.factor("q", 500.0) == pytest.approx(expected)
        assert calibrator.factor("q") == 1.0  # started jobs only: none started


def test_a_waiting_job_counts_its_wait_so_far_once_past_its_eta():
    """A job still waiting after its projected start has waited at least until now."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=1))
    calibrator.projected("j", "q", 0.0, 1000.0)
    assert calibrator.factor("q", 4000.0) == pytest.approx(4.0)
    calibrator.started("j", 2000.0)
    assert calibrator.factor("q", 4000.0) == pytest.approx(2.0)
    assert calibrator.factor("q") == pytest.approx(2.0)


def test_jobs_first_projected_now_do_not_count():
    """A job projected for the first time at this instant has slipped by nothing: left out."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=2))
    calibrator.projected("old", "q", 0.0, 100.0)
    calibrator.started("old", 400.0)
    calibrator.projected("new", "q", 50.0, 900.0)
    assert calibrator.ratios("q", 50.0) == [pytest.approx(4.0)]
    assert calibrator.factor("q", 50.0) == 1.0  # one ratio: below min_samples
    assert len(calibrator.ratios("q", 60.0)) == 2


def test_only_the_first_start_and_the_first_projection_count():
    """Later starts (after a preemption) and re-projections after the start change nothing."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=1))
    calibrator.projected("j", "q", 0.0, 1000.0)
    calibrator.started("j", 1500.0)
    calibrator.started("j", 9000.0)
    calibrator.projected("j", "q", 10_000.0, 20_000.0)
    assert calibrator.factor("q", 10_000.0) == pytest.approx(1.5)
    assert calibrator.observations == 1


def test_forgotten_and_evicted_jobs_stop_counting():
    """forget() drops a job; the window keeps only the most recently first-projected jobs."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=1, window=3))
    calibrator.projected("slow", "q", 0.0, 100.0)
    calibrator.started("slow", 800.0)
    assert "slow" in calibrator
    calibrator.forget("slow")
    assert "slow" not in calibrator and calibrator.factor("q") == 1.0
    for i in range(5):
        calibrator.projected(f"j{i}", "q", float(i), float(i) + 100.0)
        calibrator.started(f"j{i}", float(i) + 100.0 * (i + 1))
    assert [k for k in ("j0", "j1", "j2", "j3", "j4") if k in calibrator] == ["j2", "j3", "j4"]
    assert sorted(calibrator.ratios("q", None)) == pytest.approx([3.0, 4.0, 5.0])


def test_tell_records_slips_then_states_and_follows_new_jobs():
    """tell(): a followed job records where the projection puts it now (its slip teaches x3),
    the new job is stated with that factor and followed from now on; jobs the projection did
    not reach, or no longer pending, are left out."""
    from cpn.core.eta import Projection

    calibrator = WaitCalibrator(CalibrationConfig(min_samples=1))
    calibrator.projected("old", "q", 0.0, 1000.0)
    pending = {k: job(k, queue="q") for k in ("old", "new", "far")}

    def at(start_s: float) -> Projection:
        return Projection(start_s=start_s, end_s=start_s + 100, cluster="c", gpu_type="K80")

    projection = {"old": at(3000.0), "new": at(1500.0), "gone": at(600.0)}
    told = calibrator.tell(projection, pending, 500.0, ["new", "far", "gone"])
    assert set(told) == {"new"}  # "far" not reached, "gone" not pending
    # old slipped to 3000: ratio (3000 - 0) / 1000 = 3; new's 1000 s wait is stated as 3000 s
    assert told["new"].start_s == pytest.approx(500.0 + 3 * 1000.0)
    assert told["new"].end_s == pytest.approx(told["new"].start_s + 100)
    assert "new" in calibrator and "far" not in calibrator
    # new is followed from its raw projected wait (1000 s), which has not slipped yet
    assert calibrator.ratios("q", 600.0) == [pytest.approx(3.0), pytest.approx(1.0)]


def _ranged(start: float, low: float | None = None, high: float | None = None) -> Projection:
    return Projection(
        start_s=start,
        end_s=start + 1000.0,
        cluster="m",
        gpu_type="g",
        start_low_s=low,
        start_high_s=high,
    )


def test_the_runtimes_range_is_stated_from_the_first_job_and_moves_with_the_start():
    """A projection's own range (project_range) is stated before any experience, also for a
    job projected to start now; once the calibrator scales waits, the range moves with the
    stated start and keeps its width; a projection with no range (or none wide) gets the
    experience range as before; every range holds the stated start."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=5))
    told = calibrator.state("q", _ranged(2000.0, 1500.0, 9000.0), 1000.0)
    assert (told.start_low_s, told.start_s, told.start_high_s) == (1500.0, 2000.0, 9000.0)
    assert calibrator.state("q", _ranged(1000.0, 1000.0, 4000.0), 1000.0).start_high_s == 4000.0
    assert calibrator.state("q", _ranged(2000.0, 2000.0, 2000.0), 1000.0).start_low_s is None
    for _ in range(5):  # experience: jobs wait twice as long as projected
        calibrator.observe("q", 1000.0, 2000.0)
    told = calibrator.state("q", _ranged(2000.0, 1500.0, 9000.0), 1000.0)
    assert told.start_s == pytest.approx(3000.0)
    assert told.start_low_s == pytest.approx(2500.0) and told.start_high_s == pytest.approx(10000.0)
    plain = calibrator.state("q", _ranged(2000.0), 1000.0)
    assert plain.start_low_s is not None and plain.start_high_s is not None
    assert plain.start_low_s <= plain.start_s <= plain.start_high_s


def _spread_experience(calibrator: WaitCalibrator, ratios: list[float]) -> None:
    for ratio in ratios:  # jobs projected to wait 1000 s waited ratio x that
        calibrator.observe("q", 1000.0, 1000.0 * ratio)


def test_a_narrow_law_range_does_not_collapse_the_experience_range():
    """Labelled jobs have narrow runtime laws, so the projection's own range is tiny, yet
    past starts were far from projected (overtaking): the stated range keeps at least the
    experience range (the ratios' p20-p80 around the projected wait), not the law's."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=5))
    ratios = [0.5, 0.8, 1.0, 1.0, 1.2, 2.0, 3.0, 4.0, 0.6, 1.5]
    _spread_experience(calibrator, ratios)
    q20, q80 = calibrator.quantiles("q", (0.2, 0.8), 1000.0) or (0.0, 0.0)
    assert q80 / q20 > 2.5  # the experience is wide
    now, wait = 1000.0, 2000.0
    told = calibrator.state("q", _ranged(now + wait, now + wait - 10, now + wait + 10), now)
    assert told.start_low_s is not None and told.start_high_s is not None
    assert told.start_low_s <= now + wait * q20 + 1e-6
    assert told.start_high_s >= now + wait * q80 - 1e-6
    assert told.start_high_s - told.start_low_s >= wait * (q80 - q20) - 1e-6
    # the point is what it would be without any range
    plain = calibrator.state("q", _ranged(now + wait), now)
    assert told.start_s == plain.start_s and told.end_s == plain.end_s
    assert (told.start_low_s, told.start_high_s) == (plain.start_low_s, plain.start_high_s)


def test_a_wide_law_range_is_kept_when_experience_is_narrow():
    """Jobs ahead with uncertain runtimes: the law range, wider than the (tight) experience,
    is stated whole, moved with the calibrated start."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=5))
    _spread_experience(calibrator, [1.0, 1.05, 0.95, 1.0, 1.02, 0.98])
    now = 0.0
    told = calibrator.state("q", _ranged(1000.0, 200.0, 9000.0), now)
    shift = told.start_s - 1000.0
    assert told.start_low_s == pytest.approx(200.0 + shift)
    assert told.start_high_s == pytest.approx(9000.0 + shift)


def test_each_side_takes_the_wider_source():
    """Law range wide below, experience wide above: the low comes from the law, the high
    from the experience (the union of the two bands, never their intersection)."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=5, min_factor=1.0, max_factor=1.0))
    _spread_experience(calibrator, [0.9, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0, 1.0, 0.95, 2.5])
    q20, q80 = calibrator.quantiles("q", (0.2, 0.8), 0.0) or (0.0, 0.0)
    told = calibrator.state("q", _ranged(1000.0, 100.0, 1100.0), 0.0)
    assert told.start_s == 1000.0  # factor pinned at 1
    assert told.start_low_s == pytest.approx(100.0) and 1000.0 * q20 > 100.0
    assert told.start_high_s == pytest.approx(1000.0 * q80) and 1000.0 * q80 > 1100.0


def _coverage_of_stream(spread: float, law: tuple[float, float], adapt_step: float) -> float:
    """Jobs told one at a time (each projected to wait 1000 s, the law's range ``law`` x that
    wait after now), each starting at 1000 s x a log-normal ratio of sigma ``spread`` before
    the next is told; the share of the last 1,500 of 2,500 whose stated range held the start.
    No experience range (``min_samples`` never reached) and the factor pinned at 1."""
    rng = np.random.default_rng(11)
    config = CalibrationConfig(
        min_samples=10**6, window=10, min_factor=1.0, max_factor=1.0, adapt_step=adapt_step
    )
    calibrator = WaitCalibrator(config)
    held = []
    for i in range(2500):
        now, wait = 10_000.0 * i, 1000.0
        found = _ranged(now + wait, now + wait * law[0], now + wait * law[1])
        told = calibrator.tell({f"j{i}": found}, {f"j{i}": job(f"j{i}", queue="q")}, now, [f"j{i}"])
        start = now + wait * float(rng.lognormal(0.0, spread))
        low, high = told[f"j{i}"].start_low_s, told[f"j{i}"].start_high_s
        assert low is not None and high is not None and low <= told[f"j{i}"].start_s <= high
        held.append(low <= start <= high)
        calibrator.started(f"j{i}", start)
    return float(np.mean(held[1000:]))


def test_a_range_too_narrow_for_the_starts_widens_until_it_holds_sixty_percent():
    """The law's range says +-5% but starts spread by a factor of e: fixed, it holds about
    4% of them; adaptive, each side widens after misses until about 60% are held."""
    assert _coverage_of_stream(1.0, (0.95, 1.05), adapt_step=0.0) < 0.1
    assert 0.55 <= _coverage_of_stream(1.0, (0.95, 1.05), adapt_step=0.1) <= 0.65


def test_a_range_far_too_wide_narrows_until_it_holds_sixty_percent():
    """A range from now to ten times the wait holds every start, and says little; adaptive,
    it narrows after hits until about 60% of starts are held."""
    assert _coverage_of_stream(0.3, (0.0, 10.0), adapt_step=0.0) == 1.0
    assert 0.55 <= _coverage_of_stream(0.3, (0.0, 10.0), adapt_step=0.1) <= 0.65


def test_a_job_still_waiting_past_its_range_is_judged_a_miss_before_it_starts():
    """Once the clock passes a waiting job's stated high bound its start cannot fall in the
    range: the high side widens at the next tell, not at the start; the start then judges
    the low side only, and a forgotten job is never judged."""
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=10**6))
    pending = {k: job(k, queue="q") for k in ("a", "b")}
    first = calibrator.tell({"a": _ranged(1000.0, 900.0, 1100.0)}, pending, 0.0, ["a"])
    assert (first["a"].start_low_s, first["a"].start_high_s) == (900.0, 1100.0)
    calibrator.tell({"a": _ranged(1500.0, 1400.0, 1600.0)}, pending, 1050.0, [])
    assert calibrator.judged == [0, 0]  # 1050 s: still inside its range
    calibrator.tell({"a": _ranged(1500.0, 1400.0, 1600.0)}, pending, 1200.0, [])
    assert calibrator.judged == [0, 1] and calibrator.misses == [0, 1]
    assert calibrator.range_scale[1] == pytest.approx(np.exp(0.1 * 0.8))
    calibrator.started("a", 1500.0)
    assert calibrator.judged == [1, 1] and calibrator.misses == [0, 1]
    assert calibrator.range_scale[0] == pytest.approx(np.exp(-0.1 * 0.2))
    calibrator.tell({"b": _ranged(2000.0, 1900.0, 2100.0)}, pending, 1500.0, ["b"])
    calibrator.forget("b")
    calibrator.started("b", 9000.0)
    assert calibrator.judged == [1, 1]
