"""The learned predictor as the core's :class:`~cpn.core.estimator.Estimator`.

:mod:`predictor` imports nothing from cpn: it reads a job through its own
:class:`~predictor.jobs.JobLike` (cpn's :class:`~cpn.core.model.Job` is one as it
is) and answers with a :class:`~predictor.jobs.Prediction`. This module is the one
place that turns that answer into a core :class:`~cpn.core.model.Estimate`; the
live operator, the demo and the simulator all build their predictor here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from cpn.core.estimator import Estimator
from cpn.core.model import Estimate, Job
from predictor.jobs import Prediction
from predictor.online import OnlinePredictor
from predictor.runtimes import SIBLING_S, sibling_of


def to_estimate(prediction: Prediction) -> Estimate:
    """The core's ``Estimate`` saying what ``prediction`` says."""
    return Estimate(
        runtime_s=prediction.runtime_s,
        high_s=prediction.high_s,
        unseen=prediction.unseen,
        new_model=prediction.new_model,
        source=prediction.source,
    )


def with_siblings(estimate: Estimate, job: Job) -> Estimate:
    """``estimate`` stamped with ``job``'s sibling key and window
    (:func:`predictor.runtimes.siblings`), unless it has no submitter."""
    key = sibling_of(job)
    if key is None:
        return estimate
    return replace(estimate, siblings="/".join(key), sibling_s=SIBLING_S)


class PredictorEstimator(OnlinePredictor, Estimator):
    """:class:`~predictor.online.OnlinePredictor` with the core's ``estimate``.

    Everything else (``observe``, ``recall``, ``retrains``, ``close`` ...) is the
    predictor's own; ``observe`` and ``recall`` take a core ``Job`` as they are.
    """

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """Predicted runtime of ``job`` on each of ``gpu_types``; never raises."""
        return with_siblings(to_estimate(self.predict(job, gpu_types)), job)

    def knowledge_version(self) -> object:
        """How many times the model retrained (a retrained model may change every estimate)."""
        return self.retrains
