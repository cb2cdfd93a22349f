"""The learned predictor as the core's :class:`~cpn.core.estimator.Estimator`.

:mod:`predictor` imports nothing from cpn: it reads a job through its own
:class:`~predictor.jobs.JobLike` (cpn's :class:`~cpn.core.model.Job` is one as it
is) and answers with a :class:`~predictor.jobs.Prediction`. This module is the one
place that turns that answer into a core :class:`~cpn.core.model.Estimate`; the
live operator, the demo and the simulator all build their predictor here.
"""

from __future__ import annotations

from collections.abc import Sequence

from cpn.core.estimator import Estimator
from cpn.core.model import Estimate, Job
from predictor.jobs import Prediction
from predictor.online import OnlinePredictor


def to_estimate(prediction: Prediction) -> Estimate:
    """The core's ``Estimate`` saying what ``prediction`` says."""
    return Estimate(
        runtime_s=prediction.runtime_s,
        high_s=prediction.high_s,
        unseen=prediction.unseen,
        new_model=prediction.new_model,
        source=prediction.source,
    )


class PredictorEstimator(OnlinePredictor, Estimator):
    """:class:`~predictor.online.OnlinePredictor` with the core's ``estimate``.

    Everything else (``observe``, ``recall``, ``retrains``, ``close`` ...) is the
    predictor's own; ``observe`` and ``recall`` take a core ``Job`` as they are.
    """

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """Predicted runtime of ``job`` on each of ``gpu_types``; never raises."""
        return to_estimate(self.predict(job, gpu_types))

    def knowledge_version(self) -> object:
        """How many times the model retrained (a retrained model may change every estimate)."""
        return self.retrains
