"""The estimator seam: how runtimes are predicted for the core.

Estimates are attached to a :class:`~cpn.core.model.Job` when it is ingested
(live) or arrives (simulator), never inside the scheduling cycle. The live
operator and the simulator pass any object with these two methods: the
simulator's oracle/noisy/user/history estimators, or the learned predictor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cpn.core.model import Estimate, Job


class Estimator(Protocol):
    """Predicts a job's runtime per GPU type and learns from finished jobs."""

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """Predicted runtime of ``job`` on each of ``gpu_types`` (canonical names)."""
        ...

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        """Record that ``job`` ran ``actual_s`` seconds on ``gpu_type``."""
        ...
