"""PredictorEstimator: estimates per GPU type, unseen models, online learning, history.

cpn's ``PredictorEstimator`` is the predictor's own ``OnlinePredictor`` answering with
core ``Estimate`` values; the last tests pin that the two say the same.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType

import pytest

from cpn.api.predictions import PredictorEstimator
from cpn.core.model import Estimate, Job
from predictor.benchmarks import BenchmarkTable
from predictor.history import History, HistoryRecord, measurements_from_history
from predictor.jobs import JobFacts, Prediction
from predictor.online import OnlinePredictor

GPUS = ("K80", "P100", "V100-16GB", "A100-40GB")


def _job(key: str, model: str, *, gpus: int = 1, user: str = "", **features: float) -> Job:
    return Job(
        key=key,
        submit_s=0.0,
        gpus_per_worker=gpus,
        model=model,
        user=user,
        features=MappingProxyType(dict(features)),
    )


@pytest.fixture(scope="module")
def shared() -> PredictorEstimator:
    """One estimator for tests that only read."""
    return PredictorEstimator(retrain="off")


def test_measured_job_runtime_is_work_over_benchmark(shared):
    """A Gavel job's runtime is its samples over the benchmarked samples/s on each type."""
    job = _job("g", "ResNet-50 (batch size 64)", steps=1000)
    est = shared.estimate(job, GPUS)
    table = BenchmarkTable.default()
    for gpu in ("K80", "P100", "V100-16GB"):
        expected = 1000 * 64 / table.samples_per_s("resnet50", gpu, 64)
        assert est.runtime_s[gpu] == pytest.approx(expected)
        assert est.high_s[gpu] > est.runtime_s[gpu]
    assert not est.unseen and est.source == "predictor"
    assert est.runtime_s["A100-40GB"] < est.runtime_s["V100-16GB"]


def test_unseen_model_is_conservative_and_flagged(shared):
    """A model never benchmarked nor observed gets its high quantile and unseen=True."""
    job = _job("u", "bert-base", batch_size=32, dataset_samples=100_000, epochs=1)
    est = shared.estimate(job, GPUS)
    assert est.unseen and est.source == "predictor-unseen"
    model = shared.model
    from predictor.measurements import Query

    point = model.predict([Query(model="bert-base", gpu_type="T4", batch_size=32)])
    median_s = 100_000 / point.samples_per_s[0]
    t4 = shared.estimate(job, ["T4"])
    assert t4.runtime_s["T4"] > median_s  # conservative: above the median prediction
    assert t4.high_s["T4"] > t4.runtime_s["T4"]


def test_unseen_runtime_median_keeps_the_flag_and_the_high_quantile(shared):
    """unseen_runtime="median" gives the median as runtime, the high quantile as high_s."""
    job = _job("u", "bert-base", batch_size=32, dataset_samples=100_000, epochs=1)
    median = PredictorEstimator(retrain="off", unseen_runtime="median").estimate(job, ["T4"])
    high = shared.estimate(job, ["T4"])
    assert median.unseen and high.unseen
    assert median.runtime_s["T4"] < high.runtime_s["T4"]
    assert median.high_s["T4"] == pytest.approx(high.runtime_s["T4"])
    with pytest.raises(ValueError, match="unseen_runtime"):
        PredictorEstimator(retrain="off", unseen_runtime="low")


def test_unknown_gpu_and_model_never_raise(shared):
    """Names nobody knows still give an estimate for every requested type."""
    job = _job("x", "totally-new-net", steps=10, batch_size=8)
    est = shared.estimate(job, ["MI250X", "T4"])
    assert set(est.runtime_s) == {"MI250X", "T4"}
    assert est.runtime_s["MI250X"] >= est.runtime_s["T4"] > 0
    assert est.unseen


def test_job_without_work_uses_history_then_user_then_default():
    """No declared work: earlier runtimes of the same model and user, else fallbacks."""
    est = PredictorEstimator(retrain="off", default_s=1234.0)
    bare = _job("a", "vgg16", user="ann")
    first = est.estimate(bare, ["V100-16GB"])
    assert first.runtime_s["V100-16GB"] == 1234.0 and first.unseen
    hinted = Job(key="h", submit_s=0, model="vgg16", user="ann", user_estimate_s=600.0)
    assert est.estimate(hinted, ["V100-16GB"]).runtime_s["V100-16GB"] == pytest.approx(600.0)
    est.observe(bare, "V100-16GB", 5000.0)
    later = replace(_job("b", "vgg16", user="ann"), submit_s=86_400.0)  # no sibling of a
    after = est.estimate(later, ["V100-16GB", "K80"])
    assert after.runtime_s["V100-16GB"] == pytest.approx(5000.0)
    assert after.runtime_s["K80"] > after.runtime_s["V100-16GB"]
    assert not after.unseen and after.source == "predictor-history:model+user+gpus(n=1)"


def _learning_run(retrain_every: int) -> list[float]:
    """Relative errors of successive estimates while a hidden truth is observed.

    Truth: vgg16 (never benchmarked) runs at a fixed samples/s per GPU type that the
    roofline prior does not know.
    """
    truth = {"K80": 40.0, "P100": 150.0, "V100-16GB": 230.0, "T4": 110.0}
    est = PredictorEstimator(retrain="sync", retrain_every=retrain_every)
    errors = []
    for i in range(40):
        gpu = list(truth)[i % len(truth)]
        samples = 10_000.0 * (1 + i % 7)
        job = _job(f"j{i}", "vgg16", batch_size=32, dataset_samples=samples, epochs=1)
        actual = samples / truth[gpu]
        predicted = est.estimate(job, [gpu]).runtime_s[gpu]
        errors.append(abs(predicted - actual) / actual)
        est.observe(job, gpu, actual)
    assert len(est.history) == 40
    return errors


def test_online_estimator_learns_deterministically():
    """Errors shrink as history grows, and two runs give identical estimates."""
    errors = _learning_run(retrain_every=10)
    early, late = sum(errors[:4]) / 4, sum(errors[-8:]) / 8
    assert late < early / 3
    assert late < 0.1
    assert errors == _learning_run(retrain_every=10)


def test_sync_retraining_folds_history_into_the_model():
    """After retraining, an observed new GPU type becomes a measured pair."""
    est = PredictorEstimator(retrain="sync", retrain_every=3)
    job = _job("r", "resnet50", batch_size=64, dataset_samples=64_000, epochs=1)
    for i in range(3):
        est.observe(job, "A100-40GB", 64_000 / 900.0 * (1 + 0.01 * i))
    assert est.retrains == 1
    assert "A100-40GB" in est.model.priors.measured_types("resnet50")
    runtime = est.estimate(job, ["A100-40GB"]).runtime_s["A100-40GB"]
    assert runtime == pytest.approx(64_000 / 900.0, rel=0.03)


def test_background_retraining_swaps_the_model():
    """In thread mode observe() returns at once and the retrained model appears later."""
    est = PredictorEstimator(retrain="thread", retrain_every=2)
    try:
        job = _job("t", "transformer", batch_size=64, dataset_samples=6_400, epochs=1)
        est.observe(job, "A10", 10.0)
        est.observe(job, "A10", 10.0)
        assert est.wait_idle(timeout_s=60)
        assert est.retrains == 1
        assert "A10" in est.model.priors.measured_types("transformer")
    finally:
        est.close()


def test_history_persists_in_sqlite_file(tmp_path):
    """Observations land in the SQLite file and aggregate into measurements."""
    path = tmp_path / "history.db"
    est = PredictorEstimator(retrain="off", history=str(path))
    job = _job("p", "resnet50", batch_size=64, dataset_samples=6400, epochs=2, lr=0.1)
    est.observe(job, "Tesla-T4", 100.0)
    est.observe(job, "T4", 50.0)
    est.observe(job, "T4", -1.0)  # ignored: not a runtime
    est.close()
    history = History(path)
    records = history.records()
    assert [r.gpu_type for r in records] == ["T4", "T4"]
    assert records[0].features["lr"] == pytest.approx(0.1)
    (m,) = measurements_from_history(records)
    assert m.samples_per_s == pytest.approx(math.sqrt(128.0 * 256.0))
    assert m.weight == 2
    history.add(HistoryRecord(job_key="q", model="vgg16", gpu_type="T4", gpus=1, actual_s=1.0))
    assert len(history) == 3
    history.close()


def test_estimates_are_fast_enough_for_a_trace():
    """2,000 estimate/observe pairs of Gavel-like jobs finish in a few seconds."""
    import time

    est = PredictorEstimator(retrain="sync")
    kinds = [("ResNet-18", 32), ("LM", 20), ("Transformer", 128), ("A3C", 1)]
    start = time.perf_counter()
    for i in range(2000):
        model, batch = kinds[i % len(kinds)]
        job = _job(f"k{i}", model, gpus=1 + i % 2, batch_size=batch, steps=1000 + i)
        est.estimate(job, GPUS)
        est.observe(job, GPUS[i % len(GPUS)], 100.0 + i)
    assert time.perf_counter() - start < 30.0


def test_predictor_alone_answers_what_cpn_estimates(shared):
    """The predictor with its own JobFacts predicts what cpn's estimator estimates for a Job."""
    features = {"batch_size": 32.0, "dataset_samples": 50_000.0, "epochs": 2.0}
    facts = JobFacts(key="f", model="ResNet-18", user="ann", features=MappingProxyType(features))
    job = _job("f", "ResNet-18", user="ann", **features)
    alone = OnlinePredictor(retrain="off").predict(facts, GPUS)
    estimate = shared.estimate(job, GPUS)
    assert isinstance(alone, Prediction) and isinstance(estimate, Estimate)
    assert dict(estimate.runtime_s) == dict(alone.runtime_s)
    assert dict(estimate.high_s) == dict(alone.high_s)
    assert (
        (estimate.unseen, estimate.source) == (alone.unseen, alone.source) == (False, "predictor")
    )


def test_a_failing_prediction_becomes_a_flagged_default_estimate():
    """A prediction that raises inside still gives cpn a default Estimate, marked as an error."""
    est = PredictorEstimator(retrain="off", default_s=777.0)
    broken = _job("b", "resnet50", batch_size=64, steps=10)
    est.model = None  # any use of the model now raises
    answer = est.estimate(broken, ["T4", "K80"])
    assert isinstance(answer, Estimate)
    assert dict(answer.runtime_s) == {"T4": 777.0, "K80": 777.0}
    assert answer.unseen and answer.source == "predictor-error"


def test_new_model_means_no_benchmark_and_no_finished_job_of_it():
    """``new_model`` (what placement.first_of_model_alone reads): a named model neither
    benchmarked nor seen finish, whether or not the job declares its work."""
    est = PredictorEstimator(retrain="off")
    benchmarked = _job("g", "ResNet-50 (batch size 64)", steps=1000)
    assert not est.estimate(benchmarked, GPUS).new_model
    assert not est.estimate(_job("n", ""), GPUS).new_model  # no model: never new
    fresh = _job("f", "bert-base", batch_size=32, dataset_samples=100_000, epochs=1)
    bare = _job("b", "vgg16", user="ann")  # no declared work
    assert est.estimate(fresh, GPUS).new_model and est.estimate(bare, GPUS).new_model
    est.observe(bare, "V100-16GB", 5000.0)
    assert not est.estimate(_job("b2", "vgg16"), GPUS).new_model
    est.observe(fresh, "V100-16GB", 900.0)
    assert not est.estimate(fresh, GPUS).new_model
