"""Explanations name the terms, quotas and candidates the cycle weighed."""

from __future__ import annotations

from cpn.core.cycle import plan_cycle
from cpn.core.explain import explain
from cpn.core.policy import GroupQuota, Limit, QueuePolicy, Quotas
from tests.builders import cluster, job, nodes, running, snapshot

A100, V100 = "A100-80GB", "V100-32GB"


def test_started_job_shows_every_candidate_and_the_winner():
    """The chosen candidate finishes soonest; the other is listed with its numbers."""
    fast = cluster("fast", nodes("fast", 1, gpu_type=A100))
    slow = cluster("slow", nodes("slow", 1, gpu_type=V100))
    snap = snapshot(
        jobs=[job("a", runtime_s={A100: 100, V100: 300})], clusters=[fast, slow], now_s=50
    )
    found = explain(snap, plan_cycle(snap), "a")
    assert found.outcome == "started"
    assert [(c.cluster, c.chosen, c.completion_s) for c in found.candidates] == [
        ("fast", True, 100.0),
        ("slow", False, 300.0),
    ]
    assert found.terms["wait_s"] == 50 and found.terms["runtime_s"] == 100


def test_waiting_job_shows_reason_quota_and_when_each_candidate_frees():
    """A job held by its group's quota says so, with the usage, and when room would come."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[4]))
    r = running(job("r", gpus=4, group="g"), "m", A100, ("m-0",), end_s=500)
    policy = QueuePolicy(quotas=Quotas(groups={"g": GroupQuota(limit=Limit(gpus=4))}))
    snap = snapshot(
        jobs=[job("w", gpus=8, group="g")], clusters=[c], running_jobs=[r], policy=policy
    )
    found = explain(snap, plan_cycle(snap), "w")
    assert found.outcome == "waiting" and found.reason == "Quota"
    assert found.quotas == ("group g: 4 of 4 GPUs in use",)
    (only,) = found.candidates
    assert only.room_now is False and only.earliest_start_s == 500
