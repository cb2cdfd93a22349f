"""Reservations that claim their room from checkpointing jobs (``preemption.claim``).

A reservation holds room idle until its start unless a job ends before it (backfill).
Under ``preemption.claim`` a job that checkpoints may use that room whatever its end, when
it keeps at least one checkpoint by the reservation's start, and is stopped when the
reservation starts; a reservation does not wait for such a job (one that started on its
room since its holder could reserve), and never stops one wider than its holder or one
that started before. Figures: docs/policy.md, "Reservations that claim their room".
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from cpn.core.cycle import plan_cycle
from cpn.core.model import Job
from cpn.core.policy import Preemption, QueuePolicy
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"
NOW = 50_000.0


def _policy(claim: bool) -> QueuePolicy:
    return replace(QueuePolicy(), preemption=Preemption(claim=claim))


def _big() -> Job:
    """16 GPUs (two 8-GPU workers): big enough to reserve from its submission on."""
    return job("big", gpus=8, workers=2, submitted_s=1_000.0, runtime_s=50_000)


def _checkpointing() -> Job:
    """8 GPUs, checkpoints, runs far past the big job's reserved start."""
    return job("ck", gpus=8, submitted_s=NOW - 100.0, runtime_s=40_000, checkpoint=True)


@pytest.mark.parametrize(
    ("claim", "left_s", "starts"),
    [(True, 10_000.0, True), (False, 10_000.0, False), (True, 1_000.0, False)],
)
def test_a_checkpointing_job_backfills_room_held_past_its_end_only_under_claim(
    claim, left_s, starts
):
    """Two 8-GPU nodes: one runs a job that does not checkpoint for ``left_s`` more, so the
    16-GPU job reserves both from then; the other is free now. A checkpointing job that
    would still run then starts there only under claim, and only if it keeps a checkpoint
    (every 1,800 s by default) by then; the reservation keeps its start."""
    c = cluster("m", nodes("m", 2, gpus=8, free=[0.0, 8.0]))
    plain = running(
        job("plain", gpus=8, runtime_s=20_000), "m", A100, ("m-0",), start_s=NOW - 10_000,
        end_s=NOW + left_s,
    )  # fmt: skip
    plan = plan_cycle(
        snapshot(
            jobs=[_big(), _checkpointing()], clusters=[c], running_jobs=[plain], now_s=NOW,
            policy=_policy(claim),
        )
    )  # fmt: skip
    assert [(s.job_key, s.nodes) for s in plan.starts] == ([("ck", ("m-1",))] if starts else [])
    big = next(h for h in plan.holds if h.job_key == "big")
    assert big.reserved_start_s == pytest.approx(NOW + left_s)
    assert plan.preemptions == ()


@pytest.mark.parametrize("claim", [True, False])
def test_the_reservation_stops_the_job_that_backfilled_its_room_when_it_starts(claim):
    """Once the job that did not checkpoint has ended, the 16-GPU job's room is free but
    for the checkpointing job that backfilled it: under claim it is stopped for the big
    job; without, the reservation waits for its end."""
    c = cluster("m", nodes("m", 2, gpus=8, free=[8.0, 0.0]))
    ck = running(_checkpointing(), "m", A100, ("m-1",), start_s=NOW, end_s=NOW + 40_000)
    later = NOW + 10_001.0
    plan = plan_cycle(
        snapshot(jobs=[_big()], clusters=[c], running_jobs=[ck], now_s=later, policy=_policy(claim))
    )
    assert [(p.job_key, p.for_key) for p in plan.preemptions] == ([("ck", "big")] if claim else [])
    assert all(
        p.reason == "preempted for big, whose reservation claims the room this job started on"
        for p in plan.preemptions
    )
    if not claim:
        big = next(h for h in plan.holds if h.job_key == "big")
        assert big.reserved_start_s == pytest.approx(NOW + 40_000)


def test_a_job_that_started_before_its_holder_could_reserve_is_not_claimed():
    """The checkpointing job started before the big job was submitted: it took no held
    room, so the reservation waits for its predicted end as without claim."""
    c = cluster("m", nodes("m", 2, gpus=8, free=[8.0, 0.0]))
    ck = running(_checkpointing(), "m", A100, ("m-1",), start_s=500.0, end_s=NOW + 40_000)
    plan = plan_cycle(
        snapshot(jobs=[_big()], clusters=[c], running_jobs=[ck], now_s=NOW, policy=_policy(True))
    )
    assert plan.preemptions == ()
    big = next(h for h in plan.holds if h.job_key == "big")
    assert big.reserved_start_s == pytest.approx(NOW + 40_000)


@pytest.mark.parametrize(("victim_gpus", "claimed"), [(4, True), (8, False)])
def test_a_job_wider_than_the_holder_is_not_claimed(victim_gpus, claimed):
    """A 4-GPU job long past its FIFO due time drains; the checkpointing job on its node
    started since: stopped for it if it is no wider (4 GPUs), not if it is (8: stopping
    it would leave half its room to others)."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0.0]))
    waited = job("old", gpus=4, submitted_s=0.0, runtime_s=5_000, fifo_due_s=100.0)
    ck = job("ck", gpus=victim_gpus, submitted_s=NOW - 100, runtime_s=40_000, checkpoint=True)
    busy = [running(ck, "m", A100, ("m-0",), start_s=NOW - 50, end_s=NOW + 40_000)]
    if victim_gpus == 4:  # the other half of the node: a job that does not checkpoint
        other = job("plain", gpus=4, runtime_s=60_000)
        busy.append(running(other, "m", A100, ("m-0",), start_s=0.0, end_s=NOW + 60_000))
    plan = plan_cycle(
        snapshot(jobs=[waited], clusters=[c], running_jobs=busy, now_s=NOW, policy=_policy(True))
    )
    assert [(p.job_key, p.for_key) for p in plan.preemptions] == (
        [("ck", "old")] if claimed else []
    )


@pytest.mark.parametrize(("victim_budget_s", "claimed"), [(100.0, True), (100_000.0, False)])
def test_no_claim_whose_victims_would_take_the_holders_drain_away(victim_budget_s, claimed):
    """A 1-GPU job drains because it waited 0.9 of the longest FIFO budget of the jobs
    waiting (its own, 1,000 s). The only GPU runs a checkpointing job that started since.
    Stopped, that job would wait again with its own budget: a short one leaves the drain
    as it is (the claim is made); a long one would raise the longest budget so far that the
    holder no longer drains, and the next cycle would give the GPU straight back to it, and
    the one after take it again: no claim."""
    c = cluster("m", nodes("m", 1, gpus=1, free=[0.0]))
    holder = job("due", gpus=1, submitted_s=0.0, runtime_s=50_000, fifo_due_s=1_000.0)
    victim_job = job(
        "ck", gpus=1, submitted_s=1_500.0, runtime_s=40_000, checkpoint=True,
        fifo_due_s=1_500.0 + victim_budget_s,
    )  # fmt: skip
    victim = running(victim_job, "m", A100, ("m-0",), start_s=1_500.0, end_s=41_500.0)
    plan = plan_cycle(
        snapshot(
            jobs=[holder], clusters=[c], running_jobs=[victim], now_s=2_000.0,
            policy=_policy(True),
        )
    )  # fmt: skip
    assert [(p.job_key, p.for_key) for p in plan.preemptions] == (
        [("ck", "due")] if claimed else []
    )


@pytest.mark.parametrize(("fifo_due_s", "claimed"), [(100.0, True), (None, False)])
def test_only_a_holder_that_keeps_its_room_claims(fifo_due_s, claimed):
    """A job that drains keeps its room even where it fits at the start of a cycle, so
    room a claim frees stays its own; one that reserves only for its wait (six hours) does
    not: the job it stopped would take the room back in the next cycle, to be stopped
    again. Only the first claims."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0.0]))
    old = job("old", gpus=8, submitted_s=0.0, runtime_s=5_000, fifo_due_s=fifo_due_s)
    ck = job("ck", gpus=8, submitted_s=NOW - 100, runtime_s=40_000, checkpoint=True)
    busy = running(ck, "m", A100, ("m-0",), start_s=NOW - 50, end_s=NOW + 40_000)
    plan = plan_cycle(
        snapshot(jobs=[old], clusters=[c], running_jobs=[busy], now_s=NOW, policy=_policy(True))
    )
    assert [(p.job_key, p.for_key) for p in plan.preemptions] == (
        [("ck", "old")] if claimed else []
    )
