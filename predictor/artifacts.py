"""Saved throughput models: :func:`save` writes one with its metadata and training
measurements; :func:`load` reads it back, retraining on a scikit-learn or feature-schema
mismatch and falling back to the scaling baseline (logging a warning) rather than raising."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import sklearn

from predictor.benchmarks import BenchmarkTable
from predictor.catalog import GpuSpec, ModelSpec
from predictor.features import SCHEMA_HASH
from predictor.measurements import Measurement, measurements_from_table
from predictor.model import ThroughputModel, TypeOffsets, spec_ranges
from predictor.priors import Priors
from predictor.roofline import Specs
from predictor.transfer import RatioTransfer

log = logging.getLogger("predictor")

ARTIFACT_FORMAT = 1


def save(model: ThroughputModel, path: str | Path) -> None:
    """Write ``model`` with its metadata and training measurements (joblib)."""
    import joblib

    if not model.fitted:
        raise ValueError("cannot save an unfitted model")
    payload = {
        "format": ARTIFACT_FORMAT,
        "sklearn_version": sklearn.__version__,
        "schema_hash": SCHEMA_HASH,
        "family": model.family,
        "n_estimators": model.n_estimators,
        "seed": model.seed,
        "residual_sigma": model.residual_sigma,
        "shrink": dict(model.shrink),
        "type_offsets": model.type_offsets.to_list(),
        "measurements": [asdict(m) for m in model.measurements],
        "extra_models": [asdict(spec) for spec in model.specs.table.extra_models.values()],
        "extra_gpus": [asdict(spec) for spec in model.specs.table.extra_gpus.values()],
        # pickled separately so the metadata can be checked without unpickling sklearn
        "regressor": pickle.dumps(model.regressor) if model.regressor is not None else None,
    }
    joblib.dump(payload, Path(path))


def fallback_model() -> ThroughputModel:
    """The scaling baseline on the shipped table: what :func:`load` falls back to."""
    table = BenchmarkTable.default()
    return ThroughputModel("scaling").fit(measurements_from_table(table), table=table)


def load(path: str | Path) -> ThroughputModel:
    """Read an artifact; retrain or fall back (logging a warning) instead of raising."""
    import joblib

    try:
        payload = joblib.load(Path(path))
        if not isinstance(payload, dict) or payload.get("format") != ARTIFACT_FORMAT:
            raise ValueError("not a predictor artifact (format)")
        measurements = [Measurement(**m) for m in payload["measurements"]]
        table = _table_with_specs(payload.get("extra_models", []), payload.get("extra_gpus", []))
        family = str(payload["family"])
        model = ThroughputModel(
            family,
            n_estimators=int(payload.get("n_estimators", 64)),
            seed=int(payload.get("seed", 0)),
        )
    except Exception as exc:  # noqa: BLE001 - a file may fail to load in any way: logged, baseline
        log.warning("predictor artifact %s unusable (%s); using the scaling baseline", path, exc)
        return fallback_model()
    reasons = []
    if payload.get("sklearn_version") != sklearn.__version__:
        reasons.append(
            f"scikit-learn {payload.get('sklearn_version')} != installed {sklearn.__version__}"
        )
    if payload.get("schema_hash") != SCHEMA_HASH:
        reasons.append(f"feature schema {payload.get('schema_hash')} != {SCHEMA_HASH}")
    try:
        if reasons:
            log.warning(
                "predictor artifact %s: %s; retraining from its %d measurements",
                path,
                "; ".join(reasons),
                len(measurements),
            )
            return model.fit(measurements, table=table)
        model.measurements = tuple(measurements)
        model.table = table
        model.specs = Specs(table)
        model.priors = Priors(model.measurements, model.specs)
        model.residual_sigma = float(payload.get("residual_sigma", 0.25))
        model.shrink = {str(k): float(v) for k, v in dict(payload.get("shrink", {})).items()}
        model.type_offsets = TypeOffsets.from_list(payload.get("type_offsets", ()))
        model.transfer = RatioTransfer(
            model.measurements,
            model.priors.speedup,
            has_tf32=lambda gpu: model.specs.gpu(gpu).tf32_tflops > 0,
        )
        model.ranges = spec_ranges(
            model.specs.gpu(g) for g in {m.gpu_type for m in model.measurements}
        )
        blob = payload.get("regressor")
        model.regressor = pickle.loads(blob) if blob is not None else None
        if model.family != "scaling" and model.regressor is None:
            raise ValueError("artifact has no regressor")
        model.fitted = True
        return model
    except Exception as exc:  # noqa: BLE001 - a file may fail to load in any way: logged, baseline
        log.warning("predictor artifact %s: retraining failed (%s); scaling baseline", path, exc)
        return fallback_model()


def _table_with_specs(
    models: Iterable[Mapping[str, Any]], gpus: Iterable[Mapping[str, Any]]
) -> BenchmarkTable | None:
    """An empty table carrying stand-alone specs (None when there are none)."""
    extra_models = {}
    for raw in models:
        fields = dict(raw)
        fields["aliases"] = tuple(fields.get("aliases", ()))
        fields["variants"] = tuple(tuple(v) for v in fields.get("variants", ()))
        extra_models[str(fields["name"])] = ModelSpec(**fields)
    extra_gpus = {}
    for raw in gpus:
        fields = dict(raw)
        fields["aliases"] = tuple(fields.get("aliases", ()))
        extra_gpus[str(fields["name"])] = GpuSpec(**fields)
    if not extra_models and not extra_gpus:
        return None
    return BenchmarkTable([], extra_models=extra_models, extra_gpus=extra_gpus)
