"""The simulator's estimators: oracle, noisy, user and the history-based fallback."""

from __future__ import annotations

import math
import statistics
from types import MappingProxyType

import pytest
from simkit import tjob

from cpn.core.model import Job
from cpn.sim.estimators import (
    DEFAULT_ESTIMATE_S,
    HistoryEstimator,
    NoisyEstimator,
    OracleEstimator,
    SizeOracleEstimator,
    UserEstimator,
    make_estimator,
)
from cpn.sim.jobs import truth_for
from cpn.sim.speed import throughput_ratio

GPUS = ("K80", "V100-16GB")
REF = "V100-16GB"


def job(key: str, **kw) -> Job:
    features = kw.pop("features", {})
    return Job(key=key, submit_s=0, features=MappingProxyType(features), **kw)


def truth(*jobs):
    return truth_for(jobs, REF)


def test_oracle_is_the_true_runtime_per_gpu_type():
    """The oracle's estimate on each GPU type is the job's true runtime there."""
    t = truth(tjob("a", duration_s=1000, model="resnet50", batch_size=64))
    est = OracleEstimator(t).estimate(job("a", model="resnet50"), GPUS)
    assert est.on(REF) == 1000
    assert est.on("K80") == pytest.approx(1000 / throughput_ratio("resnet50", 64, REF, "K80", 1))


def test_noisy_is_seeded_per_job_and_lognormal():
    """Noisy errors repeat for a seed, differ across seeds, and have the requested sigma."""
    jobs = [tjob(f"j{i}", duration_s=100) for i in range(2000)]
    t = truth(*jobs)
    a = NoisyEstimator(t, sigma=0.5, seed=1)
    b = NoisyEstimator(t, sigma=0.5, seed=1)
    c = NoisyEstimator(t, sigma=0.5, seed=2)
    logs = [math.log(a.estimate(job(j.job_id), [REF]).on(REF) / 100) for j in jobs]
    assert logs == [math.log(b.estimate(job(j.job_id), [REF]).on(REF) / 100) for j in jobs]
    assert a.factor("j0") != c.factor("j0")
    assert abs(statistics.fmean(logs)) < 0.05
    assert statistics.stdev(logs) == pytest.approx(0.5, rel=0.08)


def test_noisy_with_zero_sigma_is_the_oracle():
    """sigma = 0 gives exactly the oracle's estimate."""
    t = truth(tjob("a", duration_s=321))
    assert (
        NoisyEstimator(t, sigma=0).estimate(job("a"), GPUS).runtime_s
        == OracleEstimator(t).estimate(job("a"), GPUS).runtime_s
    )


def test_user_estimate_is_scaled_per_gpu_type_and_defaults_when_blank():
    """The user's estimate holds on the reference GPU and is scaled to others; blank -> default."""
    t = truth(tjob("a", model="resnet50", batch_size=64), tjob("b"))
    user = UserEstimator(t)
    est = user.estimate(job("a", model="resnet50", user_estimate_s=500), GPUS)
    assert est.on(REF) == 500
    assert est.on("K80") == pytest.approx(500 / throughput_ratio("resnet50", 64, REF, "K80", 1))
    blank = user.estimate(job("b"), GPUS)
    assert set(blank.runtime_s.values()) == {DEFAULT_ESTIMATE_S}


def test_history_flags_unseen_then_learns():
    """No history: a conservative, unseen estimate; after a few runs: their median."""
    h = HistoryEstimator(REF)
    first = h.estimate(job("x", model="resnet50", features={"batch_size": 64}), GPUS)
    assert first.unseen and first.on(REF) == DEFAULT_ESTIMATE_S
    for key, actual in (("a", 100.0), ("b", 300.0), ("c", 200.0)):
        h.observe(job(key, model="resnet50", features={"batch_size": 64}), REF, actual)
    learned = h.estimate(job("y", model="resnet50", features={"batch_size": 64}), GPUS)
    assert not learned.unseen and learned.on(REF) == 200
    assert learned.on("K80") == pytest.approx(200 / throughput_ratio("resnet50", 64, REF, "K80", 1))


def test_history_normalises_observations_from_other_gpu_types():
    """A run observed on a K80 teaches the reference-GPU runtime through the throughput ratio."""
    h = HistoryEstimator(REF)
    ratio = throughput_ratio("resnet50", 64, REF, "K80", 1)
    h.observe(job("a", model="resnet50", features={"batch_size": 64}), "K80", 1000 / ratio)
    assert h.estimate(job("b", model="resnet50", features={"batch_size": 64}), [REF]).on(
        REF
    ) == pytest.approx(1000)


def test_history_learns_time_per_unit_of_work():
    """For jobs declaring steps, history learns seconds per step and scales by the steps."""
    h = HistoryEstimator(REF)
    h.observe(job("a", model="transformer", features={"batch_size": 128, "steps": 1000}), REF, 50.0)
    est = h.estimate(
        job("b", model="transformer", features={"batch_size": 128, "steps": 4000}), [REF]
    )
    assert est.on(REF) == pytest.approx(200.0)


def test_history_falls_back_from_specific_to_model_then_user():
    """An unseen batch size uses the model's history; an unseen model uses the user's estimate."""
    h = HistoryEstimator(REF)
    h.observe(job("a", model="resnet50", features={"batch_size": 64}), REF, 700.0)
    other_batch = h.estimate(job("b", model="resnet50", features={"batch_size": 32}), [REF])
    assert other_batch.on(REF) == 700 and not other_batch.unseen
    user = h.estimate(job("c", model="vgg16", user_estimate_s=42.0), [REF])
    assert user.on(REF) == 42 and not user.unseen


def test_size_oracle_is_the_mean_of_the_jobs_of_the_same_size():
    """Every job of one GPU count gets that size's mean true runtime, whatever its own."""
    t = truth(
        tjob("a", duration_s=100, gpus=1),
        tjob("b", duration_s=300, gpus=1),
        tjob("c", duration_s=5000, gpus=4),
    )
    size = SizeOracleEstimator(t)
    assert size.estimate(job("a"), [REF]).on(REF) == pytest.approx(200.0)
    assert size.estimate(job("b"), [REF]).on(REF) == pytest.approx(200.0)
    assert size.estimate(job("c", gpus_per_worker=4), [REF]).on(REF) == pytest.approx(5000.0)
    assert size.estimate(job("d", gpus_per_worker=2), [REF]).on(REF) == DEFAULT_ESTIMATE_S
    assert make_estimator("size-oracle", t)[1] == "size-oracle"


def test_make_estimator_resolves_names():
    """Names resolve to their estimators; 'predictor' falls back to history without the module."""
    t = truth(tjob("a"))
    assert isinstance(make_estimator("oracle", t)[0], OracleEstimator)
    assert make_estimator("noisy", t, sigma=0.25)[1] == "noisy(sigma=0.25)"
    _, label = make_estimator("predictor", t)
    assert label in {"predictor", "history"}
    with pytest.raises(ValueError, match="unknown estimator"):
        make_estimator("crystal-ball", t)
