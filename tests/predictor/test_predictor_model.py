"""The throughput model: priors, families, evaluation, artifacts and their fallbacks."""

from __future__ import annotations

import logging
import math

import joblib
import numpy as np
import pytest

from predictor.artifacts import load as artifact_load
from predictor.artifacts import save as artifact_save
from predictor.benchmarks import BenchmarkTable
from predictor.catalog import catalog_ratio, gpu_spec
from predictor.evaluation import evaluate
from predictor.features import FEATURES, SCHEMA_HASH, describe_job
from predictor.measurements import Measurement, Query, measurements_from_table
from predictor.model import FAMILIES, ThroughputModel


def _spec_proportional_rows() -> list[Measurement]:
    """A table where every model's throughput follows the catalog ratio exactly."""
    rows = []
    base = {"resnet50": 300.0, "vgg16": 120.0, "bert-base": 80.0, "gpt2": 10.0}
    for model, sps in base.items():
        for gpu in ("T4", "V100-16GB", "A100-40GB", "A10"):
            ratio = catalog_ratio(gpu_spec("T4"), gpu_spec(gpu))
            rows.append(
                Measurement(
                    model=model, gpu_type=gpu, batch_size=32, gpus=1, samples_per_s=sps * ratio
                )
            )
    return rows


def _q(m: Measurement) -> Query:
    return Query(model=m.model, gpu_type=m.gpu_type, batch_size=m.batch_size, gpus=m.gpus)


@pytest.fixture(scope="module")
def gavel() -> list[Measurement]:
    """Gavel's table as measurements."""
    return measurements_from_table(BenchmarkTable.default())


@pytest.fixture(scope="module")
def rf(gavel) -> ThroughputModel:
    """The default model trained on Gavel's table."""
    return ThroughputModel("rf").fit(gavel)


def test_measured_pairs_are_served_from_measurements(rf, gavel):
    """A benchmarked (model, GPU, batch, GPUs) predicts its own measurement."""
    sample = gavel[::17]
    pred = rf.predict([_q(m) for m in sample])
    assert set(pred.kind) == {"measured"}
    for value, m in zip(pred.samples_per_s, sample, strict=True):
        assert value == pytest.approx(m.samples_per_s)


def test_unmeasured_gpu_uses_anchor_and_unknown_model_roofline(rf):
    """A new GPU type anchors on measured ones; a never-measured model uses FLOPs."""
    pred = rf.predict(
        [
            Query(model="resnet50", gpu_type="A100-80GB", batch_size=64),
            Query(model="bert-base", gpu_type="A100-80GB", batch_size=32),
            Query(model="mystery-net", gpu_type="T4", batch_size=32),
            Query(model="resnet50", gpu_type="MI250X", batch_size=64),
        ]
    )
    assert pred.kind == ("anchor", "roofline", "roofline", "unknown-gpu")
    assert np.all(pred.samples_per_s[:3] > 0)
    assert math.isnan(pred.samples_per_s[3])
    assert np.all(pred.low_sps[:3] < pred.samples_per_s[:3])
    assert np.all(pred.high_sps[:3] > pred.samples_per_s[:3])
    # a faster GPU is predicted faster for the same job
    faster = rf.predict([Query(model="resnet50", gpu_type="H100-80GB", batch_size=64)])
    assert faster.samples_per_s[0] > pred.samples_per_s[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_recovers_a_spec_proportional_table(family):
    """When throughput follows the catalog exactly, holding out a GPU type costs ~0 error."""
    if family == "xgb":
        pytest.importorskip("xgboost", reason="xgboost is optional (not a dependency)")
    result = evaluate(_spec_proportional_rows(), family=family, holdout_gpu="A10")
    assert result["n"] == 4
    assert result["median_ape"] < 5.0


def test_evaluate_rejects_bad_holdouts(gavel):
    """Exactly one holdout, and it must select rows."""
    with pytest.raises(ValueError):
        evaluate(gavel, holdout_gpu="K80", holdout_model="a3c")
    with pytest.raises(ValueError, match="no rows"):
        evaluate(gavel, holdout_gpu="H100-80GB")


def test_calibration_keeps_residual_off_without_diversity():
    """With only two GPU types the anchor residual cannot be validated and is not applied."""
    rows = [m for m in _spec_proportional_rows() if m.gpu_type in {"T4", "A10"}]
    model = ThroughputModel("rf").fit(rows)
    assert model.shrink["anchor"] == 0.0
    many = ThroughputModel("rf").fit(_spec_proportional_rows())
    assert set(many.shrink) == {"anchor", "roofline"}


def test_round_trip_save_load_predict(tmp_path, rf):
    """An artifact loads back and predicts exactly what the trained model did."""
    path = tmp_path / "model.joblib"
    artifact_save(rf, path)
    loaded = artifact_load(path)
    queries = [
        Query(model="resnet50", gpu_type="A100-80GB", batch_size=64),
        Query(model="transformer", gpu_type="T4", batch_size=32, gpus=4),
        Query(model="bert-base", gpu_type="L4", batch_size=16),
    ]
    before, after = rf.predict(queries), loaded.predict(queries)
    np.testing.assert_allclose(after.samples_per_s, before.samples_per_s)
    np.testing.assert_allclose(after.high_sps, before.high_sps)
    assert loaded.shrink == rf.shrink and loaded.family == "rf"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("sklearn_version", "0.0.1", "scikit-learn 0.0.1"), ("schema_hash", "feedface", "schema")],
)
def test_version_mismatch_retrains_with_warning(tmp_path, caplog, field, value, message):
    """An artifact from another sklearn or feature schema is retrained from its rows."""
    rows = _spec_proportional_rows()
    model = ThroughputModel("rf", n_estimators=8).fit(rows)
    path = tmp_path / "old.joblib"
    artifact_save(model, path)
    payload = joblib.load(path)
    payload[field] = value
    payload["regressor"] = b"not a pickle"  # would fail if it were unpickled
    joblib.dump(payload, path)
    with caplog.at_level(logging.WARNING, logger="predictor"):
        loaded = artifact_load(path)
    assert message in caplog.text and "retraining" in caplog.text
    assert loaded.fitted and loaded.family == "rf"
    assert len(loaded.measurements) == len(rows)
    q = [Query(model="vgg16", gpu_type="A10", batch_size=32)]
    assert loaded.predict(q).samples_per_s[0] == pytest.approx(model.predict(q).samples_per_s[0])


def test_unreadable_artifact_falls_back_to_scaling(tmp_path, caplog):
    """A corrupt artifact gives the scaling baseline and a warning, never an exception."""
    path = tmp_path / "broken.joblib"
    path.write_bytes(b"garbage")
    with caplog.at_level(logging.WARNING, logger="predictor"):
        loaded = artifact_load(path)
    assert loaded.family == "scaling" and loaded.fitted
    assert "unusable" in caplog.text
    missing = artifact_load(tmp_path / "absent.joblib")
    assert missing.family == "scaling"


def test_stand_alone_rows_survive_an_artifact(tmp_path):
    """Specs of stand-alone benchmark rows are stored with the artifact."""
    table = BenchmarkTable.parse(
        [
            "model,gpu_type,batch_size,samples_per_s,params_m,forward_gmacs",
            "tinynet,T4,32,1000,1,0.1",
            "tinynet,A10,32,2500,1,0.1",
            "resnet50,T4,32,250,,",
        ]
    )
    model = ThroughputModel("scaling").fit(measurements_from_table(table), table=table)
    path = tmp_path / "m.joblib"
    artifact_save(model, path)
    loaded = artifact_load(path)
    assert loaded.specs.model("tinynet").forward_gmacs == pytest.approx(0.1)
    q = [Query(model="tinynet", gpu_type="L4", batch_size=32)]
    assert loaded.predict(q).samples_per_s[0] == pytest.approx(model.predict(q).samples_per_s[0])


def test_feature_schema_hash_is_stable_and_named():
    """The schema hash is a short hex string and features are unique."""
    assert len(SCHEMA_HASH) == 16 and int(SCHEMA_HASH, 16) >= 0
    assert len(set(FEATURES)) == len(FEATURES)


def test_describe_job_reads_work_in_either_form():
    """Work is samples x epochs, else steps x batch; Gavel's names give the batch size."""
    from cpn.core.model import Job

    a = describe_job(
        Job(
            key="a",
            submit_s=0,
            model="ResNet-50",
            features={"batch_size": 64, "epochs": 2, "dataset_samples": 1000, "steps": 5},
        )
    )
    assert (a.model, a.work_samples, a.batch_size) == ("resnet50", 2000, 64)
    b = describe_job(
        Job(
            key="b",
            submit_s=0,
            model="LM (batch size 20)",
            features={"steps": 100},
            gpus_per_worker=2,
            workers=2,
        )
    )
    assert (b.model, b.batch_size, b.work_samples, b.gpus) == ("lstm-lm", 20, 2000, 4)
    c = describe_job(Job(key="c", submit_s=0, model="Secret-Net", user="ann"))
    assert (c.model, c.model_known, c.work_samples, c.user) == ("secret-net", False, None, "ann")
