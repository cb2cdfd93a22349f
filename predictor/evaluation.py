"""How well the throughput model predicts what it never saw: hold out a GPU type (or a
model), train on the rest, score the held-out rows."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from predictor.benchmarks import BenchmarkTable
from predictor.measurements import Measurement, query_of
from predictor.model import ThroughputModel


def holdout_predictions(
    measurements: Sequence[Measurement],
    *,
    family: str = "rf",
    holdout_gpu: str | None = None,
    holdout_model: str | None = None,
    table: BenchmarkTable | None = None,
    seed: int = 0,
    calibrate: bool = True,
    given_models: Collection[str] = (),
    scored: Collection[Measurement] | None = None,
) -> tuple[list[Measurement], np.ndarray]:
    """(held-out rows, predicted samples/s) of a model fitted on every other row.

    With ``holdout_gpu``, the held-out type's rows of ``given_models`` go to training (as
    a benchmark run of those models on the new type would) and are not scored; only
    rows in ``scored`` are scored when it is given (an admin's file among the shipped
    tables). Everything fitted (prior's alpha and roofline, forest, calibration) sees
    only the training rows; the held-out rows' throughputs are read only to score.
    """
    if (holdout_gpu is None) == (holdout_model is None):
        raise ValueError("give exactly one of holdout_gpu and holdout_model")
    if given_models and holdout_gpu is None:
        raise ValueError("given models need a held-out GPU type")
    given = frozenset(given_models)

    def held(m: Measurement) -> bool:
        if holdout_gpu is not None:
            return m.gpu_type == holdout_gpu and m.model not in given
        return m.model == holdout_model

    train = [m for m in measurements if not held(m)]
    test = [m for m in measurements if held(m)]
    if scored is not None:
        keep = set(scored)
        test = [m for m in test if m in keep]
    if not test:
        what = holdout_gpu or holdout_model
        raise ValueError(f"no rows to score for {what!r} (besides the given models')")
    if not train:
        raise ValueError("nothing left to train on")
    model = ThroughputModel(family, seed=seed)
    if calibrate:
        model.fit(train, table=table)
    else:  # apply the learned residual in full (what calibration protects against)
        model.fit(train, table=table, calibrate=False, shrink={"anchor": 1.0, "roofline": 1.0})
    return test, model.predict([query_of(m) for m in test]).samples_per_s


def evaluate(
    measurements: Sequence[Measurement],
    *,
    family: str = "rf",
    holdout_gpu: str | None = None,
    holdout_model: str | None = None,
    table: BenchmarkTable | None = None,
    seed: int = 0,
    calibrate: bool = True,
    given_models: Collection[str] = (),
    scored: Collection[Measurement] | None = None,
) -> dict[str, float]:
    """Train on every row but the held-out GPU type (or model); score the held-out rows.

    Returns ``{"n", "mape", "median_ape"}``: absolute percentage error of predicted vs
    measured throughput, in percent. ``calibrate=False`` applies the learned residual in
    full instead of the inner-CV weight. ``given_models`` and ``scored``: see
    :func:`holdout_predictions`.
    """
    test, pred = holdout_predictions(
        measurements,
        family=family,
        holdout_gpu=holdout_gpu,
        holdout_model=holdout_model,
        table=table,
        seed=seed,
        calibrate=calibrate,
        given_models=given_models,
        scored=scored,
    )
    actual = np.asarray([m.samples_per_s for m in test])
    ape = np.abs(pred - actual) / actual * 100.0
    return {
        "n": len(test),
        "mape": round(float(np.mean(ape)), 2),
        "median_ape": round(float(np.median(ape)), 2),
    }
