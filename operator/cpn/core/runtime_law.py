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
from statistics import NormalDist

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

    With no spread (or no age) it is the median, or ``age_s`` once past it.
    """
    if age_s <= 0 or median_s <= 0:
        return median_s
    if sigma <= 0:
        return max(median_s, age_s)
    survived = _NORMAL.cdf(math.log(age_s / median_s) / sigma)
    q = min(survived + (1.0 - survived) / 2.0, 1.0 - 1e-12)
    return max(age_s, median_s * math.exp(sigma * _NORMAL.inv_cdf(q)))


def quantile_s(median_s: float, sigma: float, q: float) -> float:
    """The ``q`` quantile of the law."""
    if sigma <= 0:
        return median_s
    return median_s * math.exp(sigma * _NORMAL.inv_cdf(q))
