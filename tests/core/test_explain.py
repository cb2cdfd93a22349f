"""Explanations name the terms, quotas and candidates the cycle weighed."""

from __future__ import annotations

from cpn.core.capacity import Capacity
from cpn.core.cycle import plan_cycle
from cpn.core.explain import choices, explain, first_to_free, weighed
from cpn.core.policy import GroupQuota, Limit, QueuePolicy, Quotas
from tests.builders import cluster, job, nodes, running, snapshot
from tests.core.test_plan_equivalence import random_snapshot

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


def test_choices_name_the_place_chosen_and_the_runner_up_with_their_costs():
    """A started job's choice: the soonest completion, and the next best with its numbers."""
    fast = cluster("fast", nodes("fast", 1, gpu_type=A100))
    slow = cluster("slow", nodes("slow", 1, gpu_type=V100))
    snap = snapshot(
        jobs=[job("a", runtime_s={A100: 100, V100: 300})], clusters=[fast, slow], now_s=50
    )
    found = choices(snap, plan_cycle(snap))["a"]
    assert (found.chosen.cluster, found.chosen.completion_s) == ("fast", 100.0)
    assert found.runner_up is not None
    assert (found.runner_up.cluster, found.runner_up.gpu_type) == ("slow", V100)
    assert found.runner_up.completion_s == 300.0 and found.runner_up.runtime_s == 300.0


def test_choices_of_a_job_with_one_place_have_no_runner_up():
    """With one candidate there is nothing to compare: no runner-up is made up."""
    only = cluster("m", nodes("m", 1, gpu_type=A100))
    snap = snapshot(jobs=[job("a", runtime_s={A100: 100})], clusters=[only])
    assert choices(snap, plan_cycle(snap))["a"].runner_up is None


def test_first_to_free_names_the_job_whose_end_makes_room():
    """Two jobs hold the node; 4 GPUs free when the first ends, 8 when the second does."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0]))
    early = running(job("early", gpus=4), "m", A100, ("m-0",), end_s=500)
    late = running(job("late", gpus=4), "m", A100, ("m-0",), end_s=900)
    snap = snapshot(
        jobs=[job("small", gpus=4), job("big", gpus=8), job("twin", gpus=4)],
        clusters=[c],
        running_jobs=[early, late],
        now_s=100,
    )
    found = first_to_free(snap, ["small", "big", "twin"])
    assert (found["small"].job_key, found["small"].at_s) == ("early", 500)
    assert (found["big"].job_key, found["big"].at_s) == ("late", 900)
    assert found["twin"] == found["small"]  # same shape, same answer
    assert (found["big"].cluster, found["big"].gpu_type) == ("m", A100)


def test_first_to_free_says_nothing_when_there_is_room_now_or_never():
    """Room now: nothing to wait for; no node could ever hold it: no job to name."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[4]))
    holder = running(job("r", gpus=4), "m", A100, ("m-0",), end_s=500)
    snap = snapshot(
        jobs=[job("fits", gpus=4), job("huge", gpus=16)],
        clusters=[c],
        running_jobs=[holder],
    )
    assert first_to_free(snap, ["fits", "huge"]) == {}


def test_first_to_free_names_an_overdue_job_due_about_now():
    """A job past its predicted end still holds the room: it is named, due from now on."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0]))
    overdue = running(job("overdue", gpus=8), "m", A100, ("m-0",), end_s=50)
    snap = snapshot(jobs=[job("w", gpus=8)], clusters=[c], running_jobs=[overdue], now_s=100)
    found = first_to_free(snap, ["w"])["w"]
    assert found.job_key == "overdue" and found.at_s >= 100  # never before now


def test_choices_shared_memo_gives_what_each_job_alone_gets() -> None:
    """``choices`` weighs a cycle's starts with one memo of what each group offers a shape;
    every start's views are what :func:`weighed` gives that job on its own."""
    compared = 0
    for seed in range(150):
        snap = random_snapshot(seed)
        plan = plan_cycle(snap)
        found = choices(snap, plan)
        jobs = {j.key: j for j in snap.pending}
        for start in plan.starts:
            alone = weighed(snap, Capacity.from_snapshot(snap), jobs[start.job_key], start)
            chosen = next((c for c in alone if c.chosen), None)
            if chosen is None:
                assert start.job_key not in found
                continue
            others = [c for c in alone if not c.chosen and c.completion_s is not None]
            assert found[start.job_key].chosen == chosen
            assert found[start.job_key].runner_up == (others[0] if others else None)
            compared += 1
    assert compared > 100
