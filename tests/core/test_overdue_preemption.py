"""The head of the overdue queue may preempt checkpointing jobs (``preemption.for_overdue``).

A job past its FIFO wait budget drains: it reserves room. When that room is held by
checkpointing jobs whose predictions keep slipping, waiting for them can outlast the
budget by days. The first draining job in due order may instead stop checkpointing jobs
on the room it needs, whatever their ranks, the cheapest nodes to clear first; a job
that would drain itself once requeued is never stopped (issue 16).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cpn.core.cycle import plan_cycle
from cpn.core.model import Job, Running
from cpn.core.policy import Preemption, QueuePolicy
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"
NOW = 20_000.0


def _policy(for_overdue: bool) -> QueuePolicy:
    return replace(QueuePolicy(), preemption=Preemption(for_overdue=for_overdue))


def _overdue(key: str = "old8", gpus: int = 8) -> Job:
    """An 8-GPU job submitted at 10 s, due at 100 s: far past due at NOW; long (ranks low)."""
    return job(key, gpus=gpus, submitted_s=10, runtime_s=200_000, fifo_due_s=100.0)


def _on_one_node(j: Job, start_s: float = 5_000.0) -> Running:
    """``j`` running alone on the one node of cluster m, for 30,000 s from ``start_s``."""
    return running(j, "m", A100, ("m-0",), start_s=start_s, end_s=start_s + 30_000.0)


@pytest.mark.parametrize("for_overdue", [True, False])
def test_the_overdue_head_preempts_a_checkpointing_job_that_ranks_above_it(for_overdue):
    """The only node runs a shorter checkpointing job: by rank nothing would stop it for
    a job ten times longer; past due, the overdue job takes its room."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0.0]))
    victim = _on_one_node(job("short", gpus=8, checkpoint=True, runtime_s=30_000))
    plan = plan_cycle(
        snapshot(
            jobs=[_overdue()], clusters=[c], running_jobs=[victim], now_s=NOW,
            policy=_policy(for_overdue),
        )
    )  # fmt: skip
    got = [(p.job_key, p.for_key) for p in plan.preemptions]
    assert got == ([("short", "old8")] if for_overdue else [])
    # What the stopped job's status says: not "higher-ranked", which old8 is not.
    assert [p.reason for p in plan.preemptions] == (
        ["preempted for old8, which has waited past its wait bound and reserved this room"]
        if for_overdue
        else []
    )


def test_a_job_that_does_not_checkpoint_is_never_stopped():
    c = cluster("m", nodes("m", 1, gpus=8, free=[0.0]))
    busy = _on_one_node(job("plain", gpus=8, runtime_s=30_000))
    plan = plan_cycle(
        snapshot(
            jobs=[_overdue()], clusters=[c], running_jobs=[busy], now_s=NOW, policy=_policy(True)
        )
    )
    assert plan.preemptions == ()


def test_a_victim_that_would_drain_once_requeued_is_never_stopped():
    """Stopping a job that is itself past due would only move the overdue wait to it."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0.0]))
    late = job("late", gpus=8, checkpoint=True, runtime_s=30_000, submitted_s=0, fifo_due_s=50.0)
    busy = _on_one_node(late, start_s=15_000.0)
    plan = plan_cycle(
        snapshot(
            jobs=[_overdue()], clusters=[c], running_jobs=[busy], now_s=NOW, policy=_policy(True)
        )
    )
    assert plan.preemptions == ()


@settings(max_examples=40, deadline=None)
@given(
    started=st.lists(st.floats(min_value=0.0, max_value=19_000.0), min_size=3, max_size=3),
    plain_on=st.integers(min_value=0, max_value=2),
)
def test_it_clears_the_cheapest_node_it_can_clear(started, plain_on):
    """Three nodes, each running one 8-GPU job; one of them does not checkpoint. The
    overdue 8-GPU job stops exactly one job: a checkpointing one, the one whose stop
    wastes least (work since its last checkpoint plus the restart)."""
    c = cluster("m", nodes("m", 3, gpus=8, free=[0.0, 0.0, 0.0]))
    busy = [
        running(
            job(f"r{i}", gpus=8, checkpoint=i != plain_on, runtime_s=30_000),
            "m",
            A100,
            (f"m-{i}",),
            start_s=s,
            end_s=s + 30_000.0,
        )
        for i, s in enumerate(started)
    ]
    policy = _policy(True)
    plan = plan_cycle(
        snapshot(jobs=[_overdue()], clusters=[c], running_jobs=busy, now_s=NOW, policy=policy)
    )
    stopped = [p.job_key for p in plan.preemptions]
    movable = [
        r for r in busy if r.job.checkpoint and NOW - r.start_s >= policy.preemption.min_run_s
    ]
    if not movable:
        assert stopped == []
        return
    assert len(stopped) == 1 and stopped[0] != f"r{plain_on}"
    interval = policy.preemption.checkpoint_interval_s

    def lost(r):
        return (NOW - r.start_s) % interval

    cheapest = min(lost(r) for r in movable)
    assert lost(next(r for r in busy if r.job.key == stopped[0])) == pytest.approx(cheapest)
