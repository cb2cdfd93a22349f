"""Waiting jobs are re-estimated when the estimator learned something that concerns them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from types import MappingProxyType

import pytest
from simkit import clusters, greedy_plan, no_transfer, tjob

from cpn.core.estimator import Estimator
from cpn.core.model import Estimate, Job
from cpn.core.policy import QueuePolicy
from cpn.sim.estimators import DEFAULT_ESTIMATE_S, HistoryEstimator, OracleEstimator
from cpn.sim.jobs import truth_for
from cpn.sim.world import World

POLICY = QueuePolicy(name="test")
ONE_GPU = {"a": [(1, "V100", 1)]}


class Counting(Estimator):
    """Wraps an estimator and counts estimate() calls per job key."""

    def __init__(self, inner: Estimator) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.learns = inner.learns

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """The inner estimate, counted."""
        self.calls[job.key] += 1
        return self.inner.estimate(job, gpu_types)

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        """Forwarded."""
        self.inner.observe(job, gpu_type, actual_s)


class Retraining(Estimator):
    """Estimates ``per_s`` seconds for every job; each observation 'retrains' it.

    A retrain halves the estimate of every model and bumps ``version``, as the
    predictor's retrained model may change any estimate.
    """

    def __init__(self) -> None:
        self.per_s = 1000.0
        self.version = 0
        self.batches: list[int] = []

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """The current flat estimate."""
        flat = MappingProxyType(dict.fromkeys(gpu_types, self.per_s))
        return Estimate(runtime_s=flat, high_s=flat, source="retraining")

    def estimate_many(self, jobs: Sequence[Job], gpu_types: Sequence[str]) -> list[Estimate]:
        """One batch: remembered so the test can see the world used it."""
        self.batches.append(len(jobs))
        return [self.estimate(job, gpu_types) for job in jobs]

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        """Every observation retrains (a new version)."""
        self.per_s /= 2
        self.version += 1

    def knowledge_version(self) -> object:
        """Bumped by every retrain."""
        return self.version


def run(jobs, estimator, **kw):
    cl = clusters(ONE_GPU)
    truth = truth_for(jobs, cl.reference_gpu)
    world = World(
        jobs, cl, POLICY, estimator, truth=truth, plan=greedy_plan, transfer=no_transfer, **kw
    )
    result = world.run()
    return world, {r.job_id: r for r in result.records}


def fifo_trace():
    """One GPU; 'a' (resnet50) runs first, 'b' (resnet50) and 'c' (vgg16) wait behind it."""
    return [
        tjob("a", submit_s=0, duration_s=500, model="resnet50", batch_size=64, steps=100),
        tjob("b", submit_s=1, duration_s=500, model="resnet50", batch_size=64, steps=100),
        tjob("c", submit_s=2, duration_s=800, model="vgg16", batch_size=64, steps=100),
    ]


@pytest.mark.parametrize(("reestimate", "want_b"), [(True, 500.0), (False, DEFAULT_ESTIMATE_S)])
def test_a_waiting_job_is_re_estimated_after_a_job_of_its_model_finished(reestimate, want_b):
    """'b' waited while 'a' (same model) finished: it starts with the learned estimate."""
    cl = clusters(ONE_GPU)
    estimator = HistoryEstimator(cl.reference_gpu)
    world, recs = run(fifo_trace(), estimator, reestimate=reestimate)
    assert recs["b"].first_start_s == recs["a"].finish_s == 500
    assert recs["b"].estimate_s == pytest.approx(want_b)
    assert world.reestimates == (1 if reestimate else 0)


def test_jobs_of_a_model_nobody_ran_are_not_asked_again():
    """Only 'b' (the finished job's model) is re-estimated; 'c' (another model) is asked once."""
    estimator = Counting(HistoryEstimator("V100"))
    _, recs = run(fifo_trace(), estimator)
    assert estimator.calls == Counter({"a": 1, "b": 2, "c": 1})
    assert recs["c"].first_start_s == recs["b"].finish_s
    assert recs["c"].estimate_s == DEFAULT_ESTIMATE_S  # nobody ran vgg16: still the default


def test_an_estimator_that_learns_nothing_is_asked_once_per_job():
    """With the oracle (learns = False) every job is estimated exactly once, at arrival."""
    jobs = fifo_trace()
    cl = clusters(ONE_GPU)
    estimator = Counting(OracleEstimator(truth_for(jobs, cl.reference_gpu)))
    world, _ = run(jobs, estimator)
    assert estimator.calls == Counter({"a": 1, "b": 1, "c": 1})
    assert world.reestimates == 0


def test_a_retrain_re_estimates_every_waiting_job_in_one_batch():
    """A new knowledge version re-estimates waiting jobs of every model, batched."""
    estimator = Retraining()
    world, recs = run(fifo_trace(), estimator)
    # 'a' finishes at 500: b and c wait (one batch of 2) -> 500 s; b finishes: c alone -> 250 s
    assert estimator.batches == [2, 1]
    assert recs["b"].estimate_s == 500.0
    assert recs["c"].estimate_s == 250.0
    assert world.reestimates == 3


def test_a_job_arriving_after_the_lesson_is_not_asked_again():
    """A job estimated after the observation it would be refreshed for is current already."""
    estimator = Counting(HistoryEstimator("V100"))
    jobs = [
        tjob("a", submit_s=0, duration_s=500, model="resnet50", batch_size=64, steps=100),
        tjob("x", submit_s=0, duration_s=900, model="vgg16", batch_size=64, steps=100),
        tjob("b", submit_s=500, duration_s=500, model="resnet50", batch_size=64, steps=100),
    ]
    _, recs = run(jobs, estimator)
    assert recs["b"].submit_s == recs["a"].finish_s  # arrives in the instant 'a' finished
    assert recs["b"].first_start_s is not None and recs["b"].first_start_s > 500  # and waits
    assert estimator.calls["b"] == 1
    assert recs["b"].estimate_s == pytest.approx(500.0)


def test_a_running_job_s_predicted_end_follows_its_new_estimate():
    """'b' runs while 'a' (same model) finishes: the next snapshot shows b's learned end."""
    jobs = [
        tjob("a", submit_s=0, duration_s=100, model="resnet50", batch_size=64, steps=100),
        tjob("b", submit_s=0, duration_s=500, model="resnet50", batch_size=64, steps=500),
        tjob("c", submit_s=50, duration_s=100, model="vgg16", batch_size=64, steps=100),
    ]
    seen: dict[float, float] = {}

    def plan(snapshot):
        for running in snapshot.running:
            if running.job.key == "b":
                seen[snapshot.now_s] = running.predicted_end_s
        return greedy_plan(snapshot)

    cl = clusters({"a": [(1, "V100", 2)]})
    for reestimate, want in ((True, 500.0), (False, DEFAULT_ESTIMATE_S)):
        seen.clear()
        world = World(
            jobs,
            cl,
            POLICY,
            HistoryEstimator(cl.reference_gpu),
            plan=plan,
            transfer=no_transfer,
            reestimate=reestimate,
            skip_full_cycles=False,  # a cycle at 50 although nothing fits
        )
        world.run()
        assert seen[50] == DEFAULT_ESTIMATE_S  # nothing learned yet
        assert seen[100] == pytest.approx(want)  # 'a' finished at 100: 1 s per step


def test_knowledge_version_is_the_predictors_retrain_count_else_none():
    """The predictor's knowledge version follows its retrains; the history estimator's
    knowledge is only the jobs it observed (None); the oracle learns nothing."""
    from cpn.api.predictions import PredictorEstimator

    predictor = PredictorEstimator(retrain="off")
    predictor.retrains = 3
    assert predictor.knowledge_version() == 3
    assert HistoryEstimator("V100").knowledge_version() is None
    assert HistoryEstimator("V100").learns and not OracleEstimator(truth_for([], "V100")).learns


def test_the_predictor_stamps_each_estimate_with_its_siblings():
    """The predictor's estimates say which jobs are near-replicas (its sibling rule), as
    policy ``running_siblings`` reads them; a job with no submitter has none."""
    from dataclasses import replace

    from cpn.api.predictions import PredictorEstimator
    from predictor.runtimes import SIBLING_S, sibling_key
    from tests.builders import job

    predictor = PredictorEstimator(retrain="off")
    alice = replace(job("a", gpus=2, runtime_s=100.0), user="alice", model="resnet50")
    stamped = predictor.estimate(alice, ["V100"])
    assert stamped.siblings == "/".join(sibling_key("resnet50", "alice", "", 2))
    assert stamped.sibling_s == SIBLING_S > 0
    nobody = replace(alice, user="", group="")
    assert predictor.estimate(nobody, ["V100"]).siblings == ""
