"""Which jobs' runtime estimates may be out of date: what the estimator learned since each.

What the estimator learns from a finished job is taken to change only the estimates of
jobs of the same model or the same user, and of its siblings (same submitter, model and
GPU count, submitted close to it: :func:`predictor.runtimes.siblings`; found here by
submit-time buckets of ``SIBLING_S``, the finished job marking its own and both
neighbours); anything wider (the predictor retraining)
changes its knowledge version (``Estimator.knowledge_version``), and every estimate may
change. Learning is counted in observations; each job remembers the count its estimate
was made at, so a job whose model nobody ran meanwhile is never asked twice
(:meth:`cpn.sim.world.World.refresh_estimates`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from cpn.core.estimator import Estimator
from cpn.core.model import Job
from predictor.runtimes import SIBLING_S, sibling_of


def _bucket(job: Job) -> int:
    return math.floor(job.submit_s / SIBLING_S)


def _siblings(job: Job, bucket: int) -> tuple[str, ...] | None:
    """The staleness key of ``job``'s siblings submitted in ``bucket``; None if it has none."""
    key = sibling_of(job)
    return None if key is None else (*key, str(bucket))


class Staleness:
    """The estimator's learning, counted, and the count each job's estimate was made at."""

    def __init__(self, estimator: Estimator) -> None:
        self._estimator = estimator
        self._learned = 0  # observations so far
        self._by: dict[tuple[str, ...], int] = {}  # ("m", model) / ("u", user) -> count
        self._all = 0  # count when the estimator's knowledge version last changed
        self._version = estimator.knowledge_version()
        self._refreshed_at = 0  # count at the last call of stale()
        self._stamps: dict[str, int] = {}  # job key -> count its estimate was made at

    def estimated(self, key: str) -> None:
        """The estimate of job ``key`` was made now."""
        self._stamps[key] = self._learned

    def forget(self, key: str) -> None:
        self._stamps.pop(key, None)

    def observed(self, job: Job) -> None:
        """The estimator observed ``job`` finish."""
        self._learned += 1
        self._by[("m", job.model)] = self._learned
        if job.user:
            self._by[("u", job.user)] = self._learned
        bucket = _bucket(job)
        for near in (bucket - 1, bucket, bucket + 1):  # its siblings (predictor.runtimes)
            if (siblings := _siblings(job, near)) is not None:
                self._by[siblings] = self._learned
        version = self._estimator.knowledge_version()
        if version != self._version:  # it retrained: every estimate may change
            self._version = version
            self._all = self._learned

    def stale(self, jobs: Iterable[Job]) -> list[Job]:
        """The jobs among ``jobs`` whose estimate was made before something that may change
        it was learned; none when nothing was learned since the last call."""
        version = self._estimator.knowledge_version()
        if version != self._version:
            self._version = version
            self._learned += 1  # a change with no observation of its own (a thread retrained)
            self._all = self._learned
        if self._learned == self._refreshed_at:
            return []
        self._refreshed_at = self._learned
        stamps, by, every = self._stamps, self._by, self._all

        def is_stale(job: Job) -> bool:
            stamp = stamps[job.key]
            siblings = _siblings(job, _bucket(job))
            return (
                stamp < every
                or stamp < by.get(("m", job.model), -1)
                or bool(job.user and stamp < by.get(("u", job.user), -1))
                or (siblings is not None and stamp < by.get(siblings, -1))
            )

        return [job for job in jobs if is_stale(job)]
