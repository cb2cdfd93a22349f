"""How well the throughput model predicts what it never saw: hold out a GPU type (or a
model), train on the rest, score the held-out rows."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from predictor.benchmarks import BenchmarkRow, BenchmarkTable
from predictor.features import describe_job
from predictor.jobs import JobFacts
from predictor.measurements import Measurement, query_of
from predictor.model import ThroughputModel
from predictor.online import OnlinePredictor


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


def evaluate_with_observations(
    table: BenchmarkTable,
    holdout_gpu: str,
    *,
    per_model: int = 1,
    family: str = "rf",
    seed: int = 0,
) -> dict[str, float]:
    """Leave one GPU type out, then let the estimator observe a few of its jobs.

    The estimator starts from every row but ``holdout_gpu``'s; for each model it then
    observes ``per_model`` held-out rows (single-GPU rows first, median batch size
    first) as finished jobs, and predicts the remaining held-out rows. Returns
    ``{"n", "mape", "median_ape", "observed"}`` on throughput, in percent.
    """
    held = [r for r in table.rows if r.gpu_type == holdout_gpu]
    if not held:
        raise ValueError(f"no rows for {holdout_gpu!r}")
    rest = table.with_rows([r for r in table.rows if r.gpu_type != holdout_gpu], source="")
    est = OnlinePredictor(table=rest, retrain="off", family=family, seed=seed)
    by_model: dict[str, list[BenchmarkRow]] = defaultdict(list)
    for r in held:
        by_model[r.model].append(r)
    observed: set[int] = set()
    for rows in by_model.values():
        batches = sorted(r.batch_size for r in rows)
        median_batch = batches[len(batches) // 2]
        order = sorted(rows, key=lambda r: (r.gpus, abs(r.batch_size - median_batch)))
        for r in order[:per_model]:
            observed.add(id(r))
            job = _bench_job(r)
            est.observe(job, holdout_gpu, 1e6 / r.samples_per_s)
    errors = []
    for r in held:
        if id(r) in observed:
            continue
        predicted_s = est.predict(_bench_job(r), [holdout_gpu]).runtime_s[holdout_gpu]
        if est._unseen(describe_job(_bench_job(r))):  # compare medians, not the high guess
            continue
        predicted = 1e6 / predicted_s
        errors.append(abs(predicted - r.samples_per_s) / r.samples_per_s * 100.0)
    arr = np.asarray(errors)
    return {
        "n": len(errors),
        "mape": round(float(arr.mean()), 2) if errors else float("nan"),
        "median_ape": round(float(np.median(arr)), 2) if errors else float("nan"),
        "observed": len(observed),
    }


def _bench_job(row: Any) -> JobFacts:
    """A job of 10^6 samples shaped like a benchmark row."""
    return JobFacts(
        key=f"{row.model}/{row.batch_size}/{row.gpus}",
        gpus_per_worker=row.gpus,
        model=row.model,
        features=MappingProxyType(
            {"batch_size": float(row.batch_size), "dataset_samples": 1e6, "epochs": 1.0}
        ),
    )
