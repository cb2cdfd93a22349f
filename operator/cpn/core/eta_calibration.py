"""Projected waits calibrated from experience: how long jobs really waited, told ``x``.

:func:`cpn.core.eta.project` answers "when would this job start if every
prediction came true and nothing new arrived". Jobs that arrive later and rank
higher overtake it, so on a busy queue the real wait tends to be longer than the
projected one. :class:`WaitCalibrator` learns that drift the way a production
estimator would, online and from the past only. It follows the jobs of each
queue from their first projection: the wait projected then, the start later
projections give them (:meth:`~WaitCalibrator.projected`), and their actual
start (:meth:`~WaitCalibrator.started`). Each job's ratio is

- once started: actual wait / first-projected wait;
- while waiting (``count_waiting``, on by default): its wait so far as the
  latest projection sees it, (max(latest projected start, now) - first
  projection instant) / first-projected wait: how far its ETA has slipped
  already (a lower bound of its final ratio, known before it starts; this is
  what lets a burst of arrivals that overtake one another teach the calibrator
  while it is still going on).

:meth:`~WaitCalibrator.calibrate` scales a projected wait by a robust statistic
of the ratios of the queue's ``window`` most recently first-projected jobs (jobs
first projected at this very instant left out: they have slipped by nothing yet):

- ``statistic="fit"`` (default) takes the factor that minimises the median of
  ``|factor x projected - actual| / actual`` over them (the figure issue 6
  measures ETAs by, :func:`fit_factor`); ``"median"`` takes the median ratio.
- With fewer than ``min_samples`` jobs of its own a queue borrows the pooled
  jobs of all queues; with fewer than that too, the projection is returned
  unchanged (factor ``prior_factor``, 1 by default).
- ``prior_weight`` pseudo-observations at ``prior_factor`` join every history
  (shrinkage towards the prior; 0 by default: none).
- Waits under ``floor_s`` count as ``floor_s`` (the ratio of a wait projected at
  zero says nothing), and the factor is clamped to [``min_factor``, ``max_factor``].

:meth:`~WaitCalibrator.state` also states the start's p20-p80 range: on each side
the wider of the runtimes' range (the projection's, from the runtime laws) and the
experience range (the projected wait scaled by the ratios' 20th and 80th percentiles),
then each side's distance from the stated start scaled by that side's **adaptive
factor**. The factors keep the stated ranges' long-run coverage at 60% whatever the
queue does (adaptive conformal inference, Gibbs and Candes, NeurIPS 2021, one
update per side): every job told a range is judged once, on the high side as soon as
the clock passes its high bound while it waits (a miss) or when it starts (a miss if
it starts later, a hit if not), on the low side when it starts (a miss if before the
low bound); each judgement multiplies that side's factor by ``exp(adapt_step x (miss -
0.2))``. In the long run each side misses 20% of the judged jobs, so the range holds
60%: wider after misses, narrower after hits, where neither source's quantiles can
see how far the queue has moved from what they learnt (a burst of later, shorter
arrivals; laws narrower than the truth).

:meth:`~WaitCalibrator.observe` records a started job directly (projected and
actual wait, no key). Pure and deterministic: time comes from the caller
(``now_s``); no clock, no I/O. Not thread-safe (the operator calls it from its
event loop only).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from cpn.core.eta import Projection
from cpn.core.model import Job

#: The quantiles of the ratios an ETA's range spans (p20-p80: about 60% of starts in it).
RANGE_LOW_Q, RANGE_HIGH_Q = 0.2, 0.8

#: The key the pooled history of all queues is kept under.
ALL_QUEUES = "\x00all"

Statistic = Literal["fit", "median"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationConfig:
    """How a :class:`WaitCalibrator` learns (see the module docstring)."""

    window: int = 200  # most recently first-projected jobs used, per queue (and pooled)
    min_samples: int = 20  # fewer than this: borrow the pool, then the prior
    statistic: Statistic = "fit"
    count_waiting: bool = True  # waiting jobs count with their slip so far
    floor_s: float = 60.0  # waits below this count as this
    min_factor: float = 0.5
    max_factor: float = 4.0
    prior_factor: float = 1.0
    prior_weight: int = 0  # pseudo-observations at prior_factor in every history
    adapt_step: float = 0.1  # the range's adaptive factors' step (log scale); 0: fixed at 1

    def __post_init__(self) -> None:
        if self.window < 1 or self.min_samples < 1:
            raise ValueError("window and min_samples must be at least 1")
        if self.statistic not in ("fit", "median"):
            raise ValueError(f"unknown statistic {self.statistic!r}")
        if self.floor_s <= 0 or not 0 < self.min_factor <= self.max_factor:
            raise ValueError("floor_s must be positive and 0 < min_factor <= max_factor")
        if self.prior_factor <= 0 or self.prior_weight < 0:
            raise ValueError("prior_factor must be positive and prior_weight not negative")
        if not 0 <= self.adapt_step <= 1:
            raise ValueError("adapt_step must be in [0, 1]")


def fit_factor(ratios: npt.NDArray[np.float64]) -> float:
    """The factor c minimising the median of ``|c / r - 1|`` over ratios r = actual / projected.

    ``|c x projected - actual| / actual = |c x - 1|`` with x = 1 / r. The median
    error is at most e when k = ceil(n / 2) of the x lie in [(1 - e) / c, (1 + e) / c];
    for k consecutive sorted x from x_a to x_b the smallest such e is
    (x_b - x_a) / (x_a + x_b), at c = 2 / (x_a + x_b). The best window wins
    (the median being the nearest-rank one, as in the simulator's ETA figures).
    """
    x = np.sort(1.0 / ratios.astype(np.float64))
    k = (len(x) + 1) // 2
    low, high = x[: len(x) - k + 1], x[k - 1 :]
    spread = (high - low) / (high + low)
    best = int(np.argmin(spread))
    return float(2.0 / (low[best] + high[best]))


@dataclass(slots=True)
class _Tracked:
    """One job followed from its first projection."""

    queue: str
    at_s: float  # instant of its first projection
    wait_s: float  # the wait projected then
    latest_start_s: float  # the start its latest projection gave
    start_s: float | None = None  # its actual first start


class WaitCalibrator:
    """Online per-queue calibration of projected waits (see the module docstring)."""

    def __init__(self, config: CalibrationConfig | None = None) -> None:
        self.config = config or CalibrationConfig()
        self._jobs: dict[str, _Tracked] = {}
        self._order: dict[str, deque[str]] = {}  # queue (and ALL_QUEUES) -> keys, oldest first
        self._anonymous = 0
        self._version = 0  # bumped on every change (the factor cache's key)
        self._cache: dict[tuple[str, float | None], tuple[int, float | None]] = {}
        # quantiles() answers, keyed like _cache: every waiting job of a refresh asks them
        self._quantiles: dict[
            tuple[str, float | None, tuple[float, ...]], tuple[int, tuple[float, ...] | None]
        ] = {}
        self.observations = 0  # started jobs seen
        #: the range's adaptive factors (low side, high side): see the module docstring
        self.range_scale = [1.0, 1.0]
        self.judged = [0, 0]  # judgements made per side
        self.misses = [0, 0]  # of which misses
        #: job -> [low, high] of the range stated with its first ETA, each side until judged
        #: (kept apart from the windows: a job that waits past them is judged all the same)
        self._ranges: dict[str, list[float | None]] = {}

    # ------------------------------------------------------------ learning

    def projected(self, key: str, queue: str, now_s: float, start_s: float) -> None:
        """A projection made at ``now_s`` gives waiting job ``key`` of ``queue`` this start.

        The first call for a key fixes its first projection; later ones its latest.
        """
        if not (np.isfinite(now_s) and np.isfinite(start_s)):
            return
        tracked = self._jobs.get(key)
        if tracked is None:
            self._track(key, _Tracked(queue, now_s, max(start_s - now_s, 0.0), max(start_s, now_s)))
        elif tracked.start_s is None:
            tracked.latest_start_s = start_s
            self._version += 1

    def started(self, key: str, now_s: float) -> None:
        """Job ``key`` started at ``now_s`` (only its first start counts)."""
        stated = self._ranges.pop(key, None)
        if stated is not None and np.isfinite(now_s):
            low, high = stated
            if low is not None:
                self._judge(0, miss=now_s < low)
            if high is not None:
                self._judge(1, miss=now_s > high)
        tracked = self._jobs.get(key)
        if tracked is None or tracked.start_s is not None or not np.isfinite(now_s):
            return
        tracked.start_s = max(now_s, tracked.at_s)
        self.observations += 1
        self._version += 1

    def _judge(self, side: int, *, miss: bool) -> None:
        """One judgement of a stated range's ``side`` (0 low, 1 high): adapt its factor."""
        self.judged[side] += 1
        self.misses[side] += miss
        tail = RANGE_LOW_Q if side == 0 else 1.0 - RANGE_HIGH_Q
        step = self.config.adapt_step * ((1.0 if miss else 0.0) - tail)
        self.range_scale[side] = min(max(self.range_scale[side] * math.exp(step), 1e-3), 1e3)

    def forget(self, key: str) -> None:
        """Job ``key`` left without starting (deleted): it no longer counts."""
        self._ranges.pop(key, None)
        tracked = self._jobs.pop(key, None)
        if tracked is None:
            return
        for name in (tracked.queue, ALL_QUEUES):
            order = self._order.get(name)
            if order is not None and key in order:
                order.remove(key)
        self._version += 1

    def observe(self, queue: str, projected_wait_s: float, actual_wait_s: float) -> None:
        """A job of ``queue`` projected to wait ``projected_wait_s`` waited ``actual_wait_s``.

        Both measured from the projection. Negative or non-finite values are ignored.
        """
        if not (np.isfinite(projected_wait_s) and np.isfinite(actual_wait_s)):
            return
        if projected_wait_s < 0 or actual_wait_s < 0:
            return
        self._anonymous += 1
        at = float(-self._anonymous)  # before any instant a caller uses: never "just projected"
        tracked = _Tracked(queue, at, projected_wait_s, at + projected_wait_s, at + actual_wait_s)
        self._track(f"\x00observed-{self._anonymous}", tracked)
        self.observations += 1

    def _track(self, key: str, tracked: _Tracked) -> None:
        self._jobs[key] = tracked
        window = self.config.window
        for name in (tracked.queue, ALL_QUEUES):
            order = self._order.get(name)
            if order is None:
                order = self._order[name] = deque()
            order.append(key)
            if len(order) > window:
                old = order.popleft()
                self._drop_if_unused(old)
        self._version += 1

    def _drop_if_unused(self, key: str) -> None:
        tracked = self._jobs.get(key)
        if tracked is None:
            return
        for name in (tracked.queue, ALL_QUEUES):
            order = self._order.get(name)
            if order is not None and key in order:
                return
        del self._jobs[key]

    def __contains__(self, key: object) -> bool:
        """Whether job ``key`` is followed (first projected and still in a window)."""
        return key in self._jobs

    # ------------------------------------------------------------ answers

    def samples(self, queue: str) -> int:
        """Jobs of ``queue`` followed now (at most ``window``)."""
        return len(self._order.get(queue, ()))

    def ratios(self, queue: str, now_s: float | None) -> list[float]:
        """The ratios the factor of ``queue`` (or ALL_QUEUES) is taken from at ``now_s``
        (None: started jobs only)."""
        floor = self.config.floor_s
        out = []
        for key in self._order.get(queue, ()):
            tracked = self._jobs[key]
            if tracked.start_s is not None:
                waited = tracked.start_s - tracked.at_s
            elif now_s is None or not self.config.count_waiting or tracked.at_s >= now_s:
                continue
            else:
                waited = max(tracked.latest_start_s, now_s) - tracked.at_s
            out.append(max(waited, floor) / max(tracked.wait_s, floor))
        return out

    def _factor_of(self, name: str, now_s: float | None) -> float | None:
        cached = self._cache.get((name, now_s))
        if cached is not None and cached[0] == self._version:
            return cached[1]
        config = self.config
        values = self.ratios(name, now_s)
        value: float | None = None
        if len(values) >= config.min_samples:
            ratios = np.asarray(values, dtype=np.float64)
            if config.prior_weight:
                ratios = np.concatenate([ratios, np.full(config.prior_weight, config.prior_factor)])
            median = config.statistic == "median"
            value = float(np.median(ratios)) if median else fit_factor(ratios)
            value = min(max(value, config.min_factor), config.max_factor)
        if len(self._cache) > 64:
            self._cache.clear()
        self._cache[(name, now_s)] = (self._version, value)
        return value

    def factor(self, queue: str, now_s: float | None = None) -> float:
        """What ``queue``'s projected waits are multiplied by at ``now_s``
        (None: from started jobs only, waiting ones left out)."""
        for name in (queue, ALL_QUEUES):
            value = self._factor_of(name, now_s)
            if value is not None:
                return value
        return self.config.prior_factor

    def quantiles(
        self, queue: str, qs: tuple[float, ...], now_s: float | None = None
    ) -> tuple[float, ...] | None:
        """Quantiles ``qs`` of the ratios of ``queue`` (else of all queues) at ``now_s``;
        None while fewer than ``min_samples`` jobs were followed."""
        for name in (queue, ALL_QUEUES):
            key = (name, now_s, qs)
            cached = self._quantiles.get(key)
            if cached is None or cached[0] != self._version:
                values = self.ratios(name, now_s)
                found = None
                if len(values) >= self.config.min_samples:
                    found = tuple(float(v) for v in np.quantile(np.asarray(values), qs))
                if len(self._quantiles) > 64:
                    self._quantiles.clear()
                cached = self._quantiles[key] = (self._version, found)
            if cached[1] is not None:
                return cached[1]
        return None

    def state(self, queue: str, found: Projection, now_s: float) -> Projection:
        """The ETA to tell for a projection made at ``now_s``: its start (and end) moved by
        the calibrated wait, and the start's range. The simulator and the operator both
        state ETAs through this method.

        The range covers both sources of error, each side the wider of two ranges:

        - the runtimes' range: the projection's own (:func:`cpn.core.eta.project_range`,
          every runtime at its law's p20, then its p80), moved with the stated start; it is
          there from the first job on, and is wide when the jobs ahead have uncertain
          runtimes;
        - the experience range: the projected wait scaled by the 20th and 80th percentiles
          of the ratios actual / projected wait the calibrator follows (None until
          ``min_samples`` jobs were followed); it holds what no runtime law sees (later
          arrivals overtaking, laws narrower than the truth).

        Each is an estimate of the same p20-p80 band from different evidence (the ratios
        already include past runtime misses), so the bounds are not added: the earlier low
        and the later high are taken, and neither source can make the range collapse below
        the other. Past ratios alone miss a queue of new jobs (philly-nov-a, no labels); the
        runtimes' range alone misses overtaking when laws are narrow (Gavel's labelled
        11cb48): docs/results.md, "ETA range". Each side's distance from the stated start is
        then scaled by that side's adaptive factor (``range_scale``, module docstring). The
        range always holds the stated start and never begins before ``now_s``; a bound of
        neither source leaves the range out.
        """
        wait = found.start_s - now_s
        shift = self.calibrate(queue, wait, now_s) - wait
        stated = found.start_s + shift
        lows: list[float] = []
        highs: list[float] = []
        low, high = found.start_low_s, found.start_high_s
        if low is not None and high is not None and high > low:
            # The runtimes' range, moved with the stated start (kept that wide).
            lows.append(low + shift)
            highs.append(high + shift)
        if wait > 0:
            found_q = self.quantiles(queue, (RANGE_LOW_Q, RANGE_HIGH_Q), now_s)
            if found_q is not None:
                lows.append(now_s + wait * found_q[0])
                highs.append(now_s + max(wait, self.config.floor_s) * found_q[1])
        start_low = start_high = None
        if lows:  # each side's distance from the stated start, scaled by its factor
            low_scale, high_scale = self.range_scale
            start_low = max(stated - low_scale * (stated - min(*lows, stated)), now_s)
            start_high = stated + high_scale * (max(*highs, stated) - stated)
        return replace(
            found,
            start_s=stated,
            end_s=found.end_s + shift,
            start_low_s=start_low,
            start_high_s=start_high,
        )

    def tell(
        self,
        projection: Mapping[str, Projection],
        pending: Mapping[str, Job],
        now_s: float,
        keys: Iterable[str],
    ) -> dict[str, Projection]:
        """The ETAs to tell jobs ``keys`` after a projection made at ``now_s``: the one place
        calibration is applied (the simulator and the operator both call it).

        First every job of ``pending`` already followed records the start this projection
        gives it (how far it slipped, :meth:`projected`); then each job of ``keys`` that the
        projection reached is stated (:meth:`state`) and followed from this projection on.
        Jobs of ``keys`` the projection did not reach (or not pending) are left out.
        """
        for key, found in projection.items():
            job = pending.get(key)
            if job is not None and key in self._jobs:
                self.projected(key, job.queue, now_s, found.start_s)
            stated = self._ranges.get(key)
            if job is not None and stated and stated[1] is not None and now_s > stated[1]:
                self._judge(1, miss=True)  # it can no longer start within its range
                stated[1] = None
        out: dict[str, Projection] = {}
        for key in keys:
            seen, job = projection.get(key), pending.get(key)
            if seen is None or job is None:
                continue
            told = out[key] = self.state(job.queue, seen, now_s)
            if key not in self._jobs:  # a followed one recorded this start above
                self.projected(key, job.queue, now_s, seen.start_s)
                low, high = told.start_low_s, told.start_high_s
                if low is not None and high is not None and key not in self._ranges:
                    self._ranges[key] = [low, high]
        return out

    def calibrate(self, queue: str, projected_wait_s: float, now_s: float | None = None) -> float:
        """The wait to state at ``now_s`` for a job of ``queue`` projected to wait this long
        (``now_s`` None: from started jobs only)."""
        if projected_wait_s <= 0:
            return max(projected_wait_s, 0.0)
        return projected_wait_s * self.factor(queue, now_s)
