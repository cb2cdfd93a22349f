"""Projected waits calibrated from experience: how long jobs really waited, told ``x``.

:func:`cpn.core.eta.project` answers "when would this job start if every
prediction came true and nothing new arrived". Jobs that arrive later and rank
higher overtake it, so on a busy queue the real wait tends to be longer than the
projected one. :class:`WaitCalibrator` learns that drift the way a production
estimator would, online and from the past only: each time a job that had been
given a first ETA starts, ``observe(queue, projected_wait_s, actual_wait_s)``
records the ratio actual / projected; ``calibrate(queue, projected_wait_s)``
scales a new projection by a robust statistic of the queue's most recent ratios.

- ``statistic="fit"`` (default) takes the factor that minimises the median of
  ``|factor x projected - actual| / actual`` over the recent observations (the
  figure issue 6 measures ETAs by); ``"median"`` takes the median ratio.
- With fewer than ``min_samples`` observations of its own a queue borrows the
  pooled observations of all queues; with fewer than that too, the projection is
  returned unchanged (factor ``prior_factor``, 1 by default).
- ``prior_weight`` pseudo-observations at ``prior_factor`` join every history
  (shrinkage towards the prior; 0 by default: none).
- Projected waits under ``floor_s`` count as ``floor_s`` (the ratio of a wait
  projected at zero says nothing), and the factor is clamped to
  [``min_factor``, ``max_factor``].

Pure and deterministic: no clock, no I/O. Not thread-safe (the operator calls it
from its event loop only).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

#: The key the pooled history of all queues is kept under.
ALL_QUEUES = "\x00all"

Statistic = Literal["fit", "median"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationConfig:
    """How a :class:`WaitCalibrator` learns (see the module docstring)."""

    window: int = 200  # most recent observations kept per queue (and pooled)
    min_samples: int = 20  # fewer than this: borrow the pool, then the prior
    statistic: Statistic = "fit"
    floor_s: float = 60.0  # projected waits below this count as this
    min_factor: float = 0.5
    max_factor: float = 4.0
    prior_factor: float = 1.0
    prior_weight: int = 0  # pseudo-observations at prior_factor in every history

    def __post_init__(self) -> None:
        if self.window < 1 or self.min_samples < 1:
            raise ValueError("window and min_samples must be at least 1")
        if self.statistic not in ("fit", "median"):
            raise ValueError(f"unknown statistic {self.statistic!r}")
        if self.floor_s <= 0 or not 0 < self.min_factor <= self.max_factor:
            raise ValueError("floor_s must be positive and 0 < min_factor <= max_factor")
        if self.prior_factor <= 0 or self.prior_weight < 0:
            raise ValueError("prior_factor must be positive and prior_weight not negative")


def fit_factor(ratios: npt.NDArray[np.float64]) -> float:
    """The factor c minimising the median of ``|c / r - 1|`` over ratios r = actual / projected.

    ``|c x projected - actual| / actual = |c x - 1|`` with x = 1 / r. The median
    error is at most e when k = n // 2 + 1 of the x lie in [(1 - e) / c, (1 + e) / c];
    for k consecutive sorted x from x_a to x_b the smallest such e is
    (x_b - x_a) / (x_a + x_b), at c = 2 / (x_a + x_b). The best window wins
    (exact for an odd count; the upper median for an even one).
    """
    x = np.sort(1.0 / ratios.astype(np.float64))
    k = len(x) // 2 + 1
    low, high = x[: len(x) - k + 1], x[k - 1 :]
    spread = (high - low) / (high + low)
    best = int(np.argmin(spread))
    return float(2.0 / (low[best] + high[best]))


class WaitCalibrator:
    """Online per-queue calibration of projected waits (see the module docstring)."""

    def __init__(self, config: CalibrationConfig | None = None) -> None:
        self.config = config or CalibrationConfig()
        self._ratios: dict[str, deque[float]] = {}
        self._factors: dict[str, float | None] = {}  # cache, dropped on observe
        self.observations = 0

    def observe(self, queue: str, projected_wait_s: float, actual_wait_s: float) -> None:
        """A job of ``queue`` projected to wait ``projected_wait_s`` waited ``actual_wait_s``.

        Both are measured from the moment the projection was made. Negative or
        non-finite values are ignored.
        """
        if not (np.isfinite(projected_wait_s) and np.isfinite(actual_wait_s)):
            return
        if projected_wait_s < 0 or actual_wait_s < 0:
            return
        ratio = max(actual_wait_s, self.config.floor_s) / max(projected_wait_s, self.config.floor_s)
        for key in (queue, ALL_QUEUES):
            history = self._ratios.get(key)
            if history is None:
                history = self._ratios[key] = deque(maxlen=self.config.window)
            history.append(ratio)
            self._factors.pop(key, None)
        self.observations += 1

    def samples(self, queue: str) -> int:
        """Observations kept for ``queue``."""
        return len(self._ratios.get(queue, ()))

    def _factor_of(self, key: str) -> float | None:
        if key in self._factors:
            return self._factors[key]
        history = self._ratios.get(key, ())
        config = self.config
        value: float | None = None
        if len(history) >= config.min_samples:
            ratios = np.fromiter(history, dtype=np.float64, count=len(history))
            if config.prior_weight:
                ratios = np.concatenate([ratios, np.full(config.prior_weight, config.prior_factor)])
            median = config.statistic == "median"
            value = float(np.median(ratios)) if median else fit_factor(ratios)
            value = min(max(value, config.min_factor), config.max_factor)
        self._factors[key] = value
        return value

    def factor(self, queue: str) -> float:
        """What ``queue``'s projected waits are multiplied by now."""
        for key in (queue, ALL_QUEUES):
            value = self._factor_of(key)
            if value is not None:
                return value
        return self.config.prior_factor

    def calibrate(self, queue: str, projected_wait_s: float) -> float:
        """The wait to state for a job of ``queue`` projected to wait ``projected_wait_s``."""
        if projected_wait_s <= 0:
            return max(projected_wait_s, 0.0)
        return projected_wait_s * self.factor(queue)
