"""The formula's ``checkpoint`` factor: 1 for a job that checkpoints, else 0 (issue 16).

It lets one formula order jobs that may be preempted by the service they received
(least attained service first) and the others by predicted size: a preemptible job gets
a first quantum before the non-preemptible ones, and goes after them once it has used it.
"""

from __future__ import annotations

from dataclasses import replace

from cpn.core.policy import QueuePolicy
from cpn.core.queue import order_jobs
from tests.builders import job, snapshot

HYBRID = QueuePolicy(formula="checkpoint ? wait_s - 1e12 * (service_s >= 3600) : -gpu_time_s")


def test_checkpointing_jobs_are_ranked_by_service_the_others_by_size():
    """Fresh checkpointing jobs go first (oldest first, whatever their predicted size),
    then the non-checkpointing ones shortest first, then checkpointing jobs past their
    first GPU-hour."""
    long_fresh = replace(
        job("ns/long-ckpt", gpus=1, runtime_s=90_000.0, submitted_s=0.0), checkpoint=True
    )
    short_fresh = replace(
        job("ns/short-ckpt", gpus=1, runtime_s=60.0, submitted_s=50.0), checkpoint=True
    )
    served = replace(
        job("ns/served", gpus=1, runtime_s=60.0, submitted_s=0.0),
        checkpoint=True,
        attained_gpu_s=7200.0,
    )
    small = job("ns/small", gpus=1, runtime_s=600.0, submitted_s=0.0)
    big = job("ns/big", gpus=8, runtime_s=600.0, submitted_s=0.0)
    pending = [served, big, small, short_fresh, long_fresh]
    ranked = order_jobs(pending, snapshot(jobs=pending, now_s=100.0, policy=HYBRID))
    assert [r.job.key for r in ranked] == [
        "ns/long-ckpt",
        "ns/short-ckpt",
        "ns/small",
        "ns/big",
        "ns/served",
    ]


def test_the_factor_is_zero_for_a_job_that_does_not_checkpoint():
    """The same job, checkpointing or not, lands on the other side of the formula."""
    plain = job("ns/a", gpus=1, runtime_s=60.0, submitted_s=0.0)
    other = job("ns/b", gpus=1, runtime_s=30.0, submitted_s=0.0)
    pending = [plain, other]
    by_size = order_jobs(pending, snapshot(jobs=pending, now_s=100.0, policy=HYBRID))
    assert [r.job.key for r in by_size] == ["ns/b", "ns/a"]
    ckpt = [replace(plain, checkpoint=True), other]
    first = order_jobs(ckpt, snapshot(jobs=ckpt, now_s=100.0, policy=HYBRID))
    assert [r.job.key for r in first] == ["ns/a", "ns/b"]
