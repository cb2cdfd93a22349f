"""The runtime law an estimate states, and what it says about a job that has already run.

An :class:`~cpn.core.model.Estimate` gives, per GPU type, a median and a 90th
percentile: cpn reads them as a log-normal law. Given that a job has already run
``age`` seconds, the median of what it will run in total is :func:`conditional_median_s`.
Under a wide law that grows with age: a job that outlives its estimate is expected to
run on, not to end at once. Ordering (:mod:`cpn.core.queue`) and projection
(:mod:`cpn.core.eta`) read the law the same way through this module.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

from cpn.core.model import Running

#: z-score of the 90th percentile (``Estimate.high_s``).
Z90 = 1.2815515655446004
_NORMAL = NormalDist()


def sigma_of(median_s: float, high_s: float | None) -> float:
    """Log-space spread of the law with this median and 90th percentile (0 if none)."""
    if not high_s or median_s <= 0 or high_s <= median_s:
        return 0.0
    return math.log(high_s / median_s) / Z90


def conditional_median_s(median_s: float, sigma: float, age_s: float) -> float:
    """Median total runtime of a job of this law that has already run ``age_s``.

    With no spread (or no age) it is the median, or ``age_s`` once past it (an exact
    estimate). With a spread: the law's median given the age, and beyond the law's 90th
    percentile about twice the age (see the code for why).
    """
    if age_s <= 0 or median_s <= 0:
        return median_s
    if sigma <= 0:
        return max(median_s, age_s)
    survived = _NORMAL.cdf(math.log(age_s / median_s) / sigma)
    q = min(survived + (1.0 - survived) / 2.0, 1.0 - 1e-12)
    total = max(age_s, median_s * math.exp(sigma * _NORMAL.inv_cdf(q)))
    # Past the law's 90th percentile the law has failed for this job: real runtimes are
    # heavy-tailed, and a job that outlived 90% of its peers is expected to run about as
    # long again (2 x age - p90: continuous at the p90, 2 x age far beyond it).
    p90 = median_s * math.exp(Z90 * sigma)
    return max(total, 2.0 * age_s - p90) if age_s > p90 else total


def quantile_s(median_s: float, sigma: float, q: float) -> float:
    """The ``q`` quantile of the law."""
    if sigma <= 0:
        return median_s
    return median_s * math.exp(sigma * _NORMAL.inv_cdf(q))


def expected_end_s(item: Running, now_s: float, *, at_least_s: float = 1.0) -> float:
    """When a job running at ``now_s`` is expected to end: its planned duration
    (predicted end - start) taken as the median of the law its estimate states on its
    GPU type, given that it already ran ``now_s - start``. Its predicted end early on;
    later, as it outlives it, further out (never before ``now_s + at_least_s``).
    The cycle's reservations and the ETA projection both read running jobs' ends here.
    """
    fallback = now_s + at_least_s
    median = item.job.estimate.on(item.gpu_type)
    sigma = sigma_of(median or 0.0, item.job.estimate.high_s.get(item.gpu_type))
    planned = item.predicted_end_s - item.start_s
    elapsed = now_s - item.start_s
    if not sigma or planned <= 0 or elapsed <= 0:
        return max(item.predicted_end_s, fallback)
    return max(item.start_s + conditional_median_s(planned, sigma, elapsed), fallback)


def conditional_quantile_s(median_s: float, sigma: float, age_s: float, q: float) -> float:
    """The ``q`` quantile of the total runtime of a job of this law that has already run
    ``age_s`` (at least ``age_s``). With no spread: the median, or ``age_s`` once past it.

    The law's quantile given survival; past the law's 90th percentile the heavy-tail rule of
    :func:`conditional_median_s` moves the whole range with it (its median is then
    2 x age - p90, so the quantile is that scaled by the law's quantile q / median ratio,
    never below the age).
    """
    if median_s <= 0:
        return max(median_s, age_s)
    if sigma <= 0:
        return max(median_s, age_s)
    if age_s <= 0:
        return quantile_s(median_s, sigma, q)
    below = _NORMAL.cdf(math.log(age_s / median_s) / sigma)
    level = min(below + (1.0 - below) * q, 1.0 - 1e-12)
    total = max(age_s, median_s * math.exp(sigma * _NORMAL.inv_cdf(level)))
    p90 = median_s * math.exp(Z90 * sigma)
    if age_s > p90:
        tail = 2.0 * age_s - p90  # the median beyond the p90 (conditional_median_s)
        remaining = (tail - age_s) * quantile_s(1.0, sigma, q)
        total = max(total, age_s + remaining)
    return total


def quantile_end_s(item: Running, now_s: float, q: float, *, at_least_s: float = 1.0) -> float:
    """When a job running at ``now_s`` ends with probability ``q``: :func:`expected_end_s`
    with the ``q`` quantile of its law given its age in place of the median."""
    fallback = now_s + at_least_s
    median = item.job.estimate.on(item.gpu_type)
    sigma = sigma_of(median or 0.0, item.job.estimate.high_s.get(item.gpu_type))
    planned = item.predicted_end_s - item.start_s
    elapsed = now_s - item.start_s
    if not sigma or planned <= 0:
        return max(item.predicted_end_s, fallback)
    total = conditional_quantile_s(planned, sigma, max(elapsed, 0.0), q)
    return max(item.start_s + total, fallback)


def gittins_remaining_s(median_s: float, sigma: float, age_s: float) -> float:
    """The inverse Gittins index of a job of this law that has run ``age_s``: over every
    quantum end ``b > age``, the least expected service to ``b`` per unit of probability
    of ending by ``b``, ``min_b E[min(S, b) - age | S > age] / P(S <= b | S > age)``.

    Ranking preemptible jobs by it (smallest first) is the Gittins-index policy, which
    minimises mean completion time in a single-server queue with preemption when each
    job's law is known (Gittins 1989; for the M/G/1 queue, Aalto, Ayesta and Righter,
    Queueing Systems 2009). With no spread it is ``median - age``; under a wide law a job
    not yet started can rank ahead of its median (it may end within a short quantum, and
    is stopped if it does not), and one that outlived most of its law ranks behind it.
    The law is scale-free, so one table per (sigma, age / median) serves every median.
    """
    if median_s <= 0:
        return 0.0
    if sigma <= _SIGMA_EXACT:
        return max(median_s - age_s, 0.0)
    log_age = round(math.log(age_s / median_s), 2) if age_s > 0 else None
    unit = _gittins_unit(round(sigma, 2), log_age)
    if math.isfinite(unit):
        return median_s * unit
    # so far in the tail that the law gives no quantum a chance: the conditional median
    return max(conditional_median_s(median_s, sigma, age_s) - age_s, 0.0)


#: Below this spread a law is an exact estimate.
_SIGMA_EXACT = 0.01
#: Quantum ends tried per index: quantiles of the law beyond the age, denser near it.
_QUANTA = 60


def _partial_mean(sigma: float, x: float) -> float:
    """``E[min(S, x)]`` for ``S`` log-normal of median 1 and spread ``sigma``."""
    if x <= 0:
        return 0.0
    z = math.log(x) / sigma
    return math.exp(sigma * sigma / 2.0) * _NORMAL.cdf(z - sigma) + x * (1.0 - _NORMAL.cdf(z))


@lru_cache(maxsize=65536)
def _gittins_unit(sigma: float, log_age: float | None) -> float:
    """:func:`gittins_remaining_s` for median 1 (inf when no quantum can end the job)."""
    age = 0.0 if log_age is None else math.exp(log_age)
    done_by_age = _NORMAL.cdf(log_age / sigma) if log_age is not None else 0.0
    served_by_age = _partial_mean(sigma, age)
    survive = 1.0 - done_by_age
    best = math.inf
    if survive > 1e-12:  # the quantum that never ends: the mean residual life
        best = (math.exp(sigma * sigma / 2.0) - served_by_age) / survive
    low = max(done_by_age, 1e-6)
    for i in range(1, _QUANTA + 1):
        q = min(low + (1.0 - 1e-6 - low) * (i / _QUANTA) ** 1.5, 1.0 - 1e-9)
        end = math.exp(sigma * _NORMAL.inv_cdf(q))
        chance = q - done_by_age
        if end > age and chance > 1e-12:
            best = min(best, (_partial_mean(sigma, end) - served_by_age) / chance)
    return best


def mean_level(sigma: float) -> float:
    """The level of the law's mean among its quantiles: Phi(sigma / 2) (one half with no
    spread; about 0.92 for a law whose p90 is 40x its median)."""
    return _NORMAL.cdf(sigma / 2.0) if sigma > 0 else 0.5
