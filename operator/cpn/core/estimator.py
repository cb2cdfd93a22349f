"""The estimator seam: how runtimes are predicted for the core.

Estimates are attached to a :class:`~cpn.core.model.Job` when it is ingested
(live) or arrives (simulator), never inside the scheduling cycle. The live
operator and the simulator take any :class:`Estimator`: the simulator's
oracle/noisy/user/history estimators, or the learned predictor. Every member is
part of the protocol (callers never probe for one); a class that inherits
:class:`Estimator` explicitly gets the defaults of ``learns``,
:meth:`~Estimator.estimate_many`, :meth:`~Estimator.recall`,
:meth:`~Estimator.knowledge_version` and :meth:`~Estimator.learn_benchmarks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from cpn.core.model import Estimate, Job


class Estimator(Protocol):
    """Predicts a job's runtime per GPU type and learns from finished jobs."""

    #: False when :meth:`observe` never changes a later estimate (oracle, noisy, user):
    #: callers then never ask twice for the same job.
    learns: bool = True

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """Predicted runtime of ``job`` on each of ``gpu_types`` (canonical names)."""
        ...

    def estimate_many(self, jobs: Sequence[Job], gpu_types: Sequence[str]) -> list[Estimate]:
        """Estimates of ``jobs``, in order (one by one unless the estimator batches)."""
        return [self.estimate(job, gpu_types) for job in jobs]

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        """Record that ``job`` ran ``actual_s`` seconds on ``gpu_type``."""
        ...

    def recall(self, job: Job, gpu_type: str, actual_s: float) -> None:
        """Learn from a job that finished before this process started (the operator reads
        finished AIJobs back at start-up) without storing it again; by default, as
        :meth:`observe`."""
        self.observe(job, gpu_type, actual_s)

    def knowledge_version(self) -> object:
        """What changes when the estimator's knowledge changed beyond the jobs it observed
        (the predictor retrained: every estimate may change); None when nothing does."""
        return None

    def learn_benchmarks(self, records: Sequence[Any], *, keep: bool = True) -> int:
        """Learn from measured GPU throughputs (a GPUBenchmark's rows, the predictor's
        ``BenchmarkRecord``); ``keep`` also stores them. How many rows were taken: 0 for an
        estimator that learns nothing from benchmarks (the default). Never raises."""
        return 0
