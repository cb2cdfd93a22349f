"""The simulator keeps concurrent-job limits: it runs the operator's plan_cycle on snapshots
whose ``running`` holds every started job, so a user's limit holds over a whole trace."""

from __future__ import annotations

from itertools import pairwise

from simkit import tjob
from test_world import by_id, world

from cpn.api.policy import parse_policy
from cpn.core.cycle import plan_cycle

POLICY = parse_policy("quotas: {groups: {vision: {users: {alice: {jobs: 1}}}}}")


def test_a_user_with_one_job_slot_runs_her_jobs_one_after_another() -> None:
    jobs = [
        tjob(f"a{i}", submit_s=0.0, duration_s=100.0, user="alice", group="vision")
        for i in range(3)
    ]
    jobs.append(tjob("b0", submit_s=0.0, duration_s=100.0, user="bob", group="vision"))
    records = by_id(world(jobs, plan=plan_cycle, policy=POLICY).run())
    spans = sorted((r.first_start_s, r.finish_s) for k, r in records.items() if k != "b0")
    assert all(s is not None and f is not None for s, f in spans)
    for (_, end), (start, _) in pairwise(spans):
        assert start >= end  # never two of alice's at once, though GPUs were free
    assert records["b0"].first_start_s == 0.0  # bob has no job limit: he starts at once
    assert spans[-1][0] >= 200.0
