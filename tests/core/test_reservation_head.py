"""The head of each level reserves (``reservation.head``, EASY backfilling's rule): a job
that needs several GPUs on one node is not passed over for ever by lower-ranked one-GPU
jobs, each taking a GPU the moment one frees."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cpn.core.cycle import plan_cycle
from cpn.core.model import CyclePlan, Snapshot
from cpn.core.policy import Level, QueuePolicy
from cpn.core.presets import PRESETS
from tests.builders import cluster, job, nodes, running, snapshot

NOW = 10_000.0


def _policy(head: bool, **fields: object) -> QueuePolicy:
    base = PRESETS["default"]
    return replace(base, reservation=replace(base.reservation, head=head), **fields)  # type: ignore[arg-type]


def _node_with_one_free(head: bool, small_runtime_s: float, **fields: object) -> Snapshot:
    """One 2-GPU node, one GPU free, the other held until NOW + 1000 s. ``pair`` (2 GPUs,
    waiting longest, ranked first) fits nowhere; ``single`` (1 GPU, new) fits the free GPU."""
    (n0,) = nodes("c", 1, gpus=2, free=[1.0])
    holder = running(job("r0", gpus=1), n0.cluster, n0.gpu_type, (n0.name,), end_s=NOW + 1000.0)
    return snapshot(
        now_s=NOW,
        policy=_policy(head, **fields),
        clusters=[cluster("c", (n0,))],
        running_jobs=[holder],
        jobs=[
            job("pair", gpus=2, submitted_s=0.0, runtime_s=600.0),
            job("single", gpus=1, submitted_s=NOW - 1.0, runtime_s=small_runtime_s),
        ],
    )


def _starts(plan: CyclePlan) -> set[str]:
    return {s.job_key for s in plan.starts}


def _reserved(plan: CyclePlan) -> dict[str, float | None]:
    return {h.job_key: h.reserved_start_s for h in plan.holds}


def test_the_head_reserves_and_a_lower_ranked_job_may_not_delay_it() -> None:
    plan = plan_cycle(_node_with_one_free(True, small_runtime_s=5000.0))
    assert _starts(plan) == set()
    assert _reserved(plan)["pair"] == NOW + 1000.0


def test_without_the_head_rule_the_single_takes_the_gpu() -> None:
    plan = plan_cycle(_node_with_one_free(False, small_runtime_s=5000.0))
    assert _starts(plan) == {"single"}
    assert _reserved(plan)["pair"] is None


def test_a_job_that_ends_before_the_heads_start_backfills() -> None:
    plan = plan_cycle(_node_with_one_free(True, small_runtime_s=300.0))
    assert _starts(plan) == {"single"}
    assert _reserved(plan)["pair"] == NOW + 1000.0


@pytest.mark.parametrize("head", [True, False])
def test_a_job_that_fits_is_never_a_head(head: bool) -> None:
    """With room for both, both start: the rule only speaks for jobs that fit nowhere."""
    (n0,) = nodes("c", 1, gpus=4, free=[4.0])
    snap = snapshot(
        now_s=NOW,
        policy=_policy(head),
        clusters=[cluster("c", (n0,))],
        jobs=[job("pair", gpus=2, runtime_s=600.0), job("single", gpus=1, runtime_s=5000.0)],
    )
    assert _starts(plan_cycle(snap)) == {"pair", "single"}


def test_each_level_has_its_own_head() -> None:
    """A blocked job of the lower level reserves too, beside the upper level's head."""
    levels = (
        Level(name="upper", queues=frozenset({"upper"})),
        Level(name="lower", queues=frozenset({"default"})),
    )
    n0, n1 = nodes("c", 2, gpus=2, free=[0.0, 0.0])
    holders = [
        running(job(f"r{i}", gpus=2), n.cluster, n.gpu_type, (n.name,), end_s=NOW + 1000.0 * i)
        for i, n in enumerate((n0, n1), start=1)
    ]
    snap = snapshot(
        now_s=NOW,
        policy=_policy(True, levels=levels),
        clusters=[cluster("c", (n0, n1))],
        running_jobs=holders,
        jobs=[
            job("up", gpus=2, queue="upper", runtime_s=600.0),
            job("low", gpus=1, runtime_s=600.0),
        ],
    )
    assert _reserved(plan_cycle(snap)) == {"up": NOW + 1000.0, "low": NOW + 2000.0}
    without = replace(snap, policy=_policy(False, levels=levels))
    assert _reserved(plan_cycle(without)) == {"up": None, "low": None}
