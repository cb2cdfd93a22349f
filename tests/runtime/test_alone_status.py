"""A job that runs alone (cpn.core.alone) says so in its status, keeps its nodes to itself
after a restart, and jobs of its model stop being new once one of them finished; waiting
siblings of a finished job are estimated again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cpn.api import constants as k
from cpn.api.predictions import PredictorEstimator
from cpn.core.estimator import Estimator
from cpn.core.model import Estimate, Job
from cpn.core.policy import QueuePolicy
from cpn.runtime.lifecycle import requeued
from cpn.runtime.status import render_status
from cpn.runtime.store import Store
from tests.runtime.fakes import upsert
from tests.runtime.test_store import body

NOW = 1767225600.0


class ModelEstimator(Estimator):
    """New model until a job of it is observed finishing."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        return Estimate(
            runtime_s={t: 60.0 for t in gpu_types},
            new_model=bool(job.model) and job.model not in self.seen,
        )

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        self.seen.add(job.model)


def with_model(name: str, uid: str, model: str = "llama3") -> dict[str, Any]:
    doc = body(name, uid)
    doc["spec"]["model"] = {"name": model}
    return doc


def test_a_job_running_alone_says_why_and_keeps_its_nodes_after_a_restart() -> None:
    store = Store(QueuePolicy(), ModelEstimator())
    rec = upsert(store, with_model("a", "uid-1"), user="u", group="g")
    rec.phase, rec.cluster, rec.gpu_type, rec.nodes = k.PHASE_RUNNING, "m1", "A100", ("n1",)
    rec.member_job, rec.start_s, rec.reason, rec.alone = "a-1", NOW - 10, "Running", True
    rec.message = "running on m1 (A100)"
    status, _ = render_status(rec, NOW)
    assert status["runsAlone"] is True
    admitted = {c["type"]: c for c in status["conditions"]}[k.COND_ADMITTED]
    assert (
        "first job of model llama3: runs alone on its node for a clean measurement"
        in (admitted["message"])
    )
    restarted = Store(QueuePolicy(), ModelEstimator())
    again = upsert(restarted, {**with_model("a", "uid-1"), "status": status}, user="u", group="g")
    (item,) = restarted.snapshot(NOW, [], {}).running
    assert again.alone and item.alone


def test_a_requeued_job_no_longer_runs_alone_nor_says_so() -> None:
    store = Store(QueuePolicy(), ModelEstimator())
    rec = upsert(store, with_model("a", "uid-1"), user="u", group="g")
    rec.phase, rec.cluster, rec.nodes, rec.alone = k.PHASE_RUNNING, "m1", ("n1",), True
    back = requeued(rec, reason="Preempted", message="preempted", event="Preempted").record
    assert not back.alone
    status, _ = render_status(back, NOW)
    assert "runsAlone" not in status


def test_waiting_jobs_of_a_model_are_new_until_one_finished() -> None:
    estimator = ModelEstimator()
    store = Store(QueuePolicy(), estimator)
    store.set_gpu_types(["A100-80GB"])
    upsert(store, with_model("a", "uid-1"), user="u", group="g")
    upsert(store, with_model("b", "uid-2", model="bert-large"), user="u", group="g")
    upsert(store, body("c", "uid-3"), user="u", group="g")  # no model: never new
    news = {j.key: j.estimate.new_model for j in store.snapshot(0.0, [], {}).pending}
    assert news == {"ns/a": True, "ns/b": True, "ns/c": False}
    done = store.records["ns/a"].job
    assert done is not None
    estimator.observe(done, "A100-80GB", 60.0)
    assert store.learned(done) == 1
    news = {j.key: j.estimate.new_model for j in store.snapshot(1.0, [], {}).pending}
    assert news == {"ns/a": False, "ns/b": True, "ns/c": False}


def test_waiting_siblings_of_a_finished_job_are_estimated_again() -> None:
    """Three 1-GPU jobs of one user submitted together, and one an hour later: when the
    first finishes in 20 s its waiting siblings are estimated again and take its runtime
    (predictor.runtimes siblings); the later job is no sibling and keeps its estimate."""
    estimator = PredictorEstimator(retrain="off", default_s=3600.0)
    store = Store(QueuePolicy(), estimator)
    store.set_gpu_types(["A100-80GB"])
    for name in ("a", "b", "c"):
        upsert(store, body(name, f"uid-{name}"), user="u", group="g")
    later = body("d", "uid-d")
    later["metadata"]["creationTimestamp"] = "2026-01-01T01:00:00Z"
    upsert(store, later, user="u", group="g")
    done = store.records["ns/a"].job
    assert done is not None
    estimator.observe(done, "A100-80GB", 20.0)
    assert store.learned(done) == 3  # a itself (still listed here), b and c
    runtime = {
        j.key: j.estimate.runtime_s["A100-80GB"] for j in store.snapshot(NOW, [], {}).pending
    }
    assert runtime["ns/b"] == runtime["ns/c"] == runtime["ns/a"]
    assert runtime["ns/b"] < 60.0 < runtime["ns/d"]
