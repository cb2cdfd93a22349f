"""Policy ``running_siblings``: running siblings that outlived their estimate lengthen the
estimate a waiting sibling is ranked by (cpn.core.siblings)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cpn.core.cycle import plan_cycle
from cpn.core.model import Estimate, Job, frozen_map
from cpn.core.policy import QueuePolicy
from cpn.core.runtime_law import conditional_median_s, sigma_of
from cpn.core.siblings import censored_by_siblings
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"


def burst_job(key: str, submitted_s: float, *, runtime_s: float = 600.0, sib: str = "u/m/1") -> Job:
    """A 1-GPU job of one burst: estimated ``runtime_s`` (p90 three times it) on A100."""
    estimate = Estimate(
        runtime_s=frozen_map({A100: runtime_s}),
        high_s=frozen_map({A100: 3 * runtime_s}),
        siblings=sib,
        sibling_s=600.0,
    )
    return replace(job(key, submitted_s=submitted_s), estimate=estimate)


def burst(now_s: float, ages: list[float], *, policy: QueuePolicy | None = None, **kw: float):
    """Running siblings of the given ages (on one 8-GPU node), a waiting sibling submitted
    with them and an unrelated waiting job estimated 2,000 s."""
    runs = [
        running(burst_job(f"r{i}", 0.0), "m", A100, ("m-0",), start_s=now_s - age, end_s=now_s)
        for i, age in enumerate(ages)
    ]
    waiting = burst_job("w", 60.0, **kw)
    other = replace(job("other", submitted_s=120.0, runtime_s={A100: 2000.0}))
    c = cluster("m", nodes("m", 1, gpus=8, free=[8 - len(ages)]))
    return snapshot(
        jobs=[waiting, other],
        clusters=[c],
        running_jobs=runs,
        now_s=now_s,
        policy=policy or QueuePolicy(running_siblings=True),
    )


def estimate_of(snap, key: str) -> float:
    return next(j for j in snap.pending if j.key == key).estimate.runtime_s[A100]


def test_a_waiting_sibling_is_estimated_given_how_long_its_running_siblings_ran():
    """Three siblings ran 3,000, 6,000 and 9,000 s on a 600 s estimate: the median one ran
    ten times the estimate, so the waiting one is estimated given that it runs that far
    (past the law's p90 of 1,800 s: about twice that, 2 x 6,000 - 1,800)."""
    snap = burst(10_000.0, [3_000.0, 6_000.0, 9_000.0])
    given_ = censored_by_siblings(snap)
    sigma = sigma_of(600.0, 1800.0)
    assert estimate_of(given_, "w") == pytest.approx(conditional_median_s(600.0, sigma, 6000.0))
    assert estimate_of(given_, "w") == pytest.approx(10_200.0)
    hi = next(j for j in given_.pending if j.key == "w").estimate.high_s[A100]
    assert hi == pytest.approx(3 * estimate_of(given_, "w"))
    assert estimate_of(given_, "other") == 2000.0  # not a sibling: unchanged


@pytest.mark.parametrize(
    ("ages", "submitted_s", "sib"),
    [
        ([300.0, 500.0, 9_000.0], 60.0, "u/m/1"),  # the median ran less than its estimate
        ([3_000.0, 6_000.0], 5_000.0, "u/m/1"),  # submitted too far from them
        ([3_000.0, 6_000.0], 60.0, "other/m/1"),  # another submitter
        ([3_000.0, 6_000.0], 60.0, ""),  # no submitter: no siblings
    ],
)
def test_no_evidence_no_change(ages: list[float], submitted_s: float, sib: str):
    snap = burst(10_000.0, ages)
    waiting = burst_job("w", submitted_s, sib=sib)
    snap = replace(snap, pending=(waiting, *snap.pending[1:]))
    assert censored_by_siblings(snap).pending == snap.pending
    assert censored_by_siblings(snap) is snap  # nothing changed: the same snapshot


def test_the_order_changes_only_with_the_policy_on():
    """One free GPU: without the option the short-estimated sibling starts first; with it,
    its siblings' 3,000-9,000 s runs rank it behind the 2,000 s job, which starts."""
    ages = [3_000.0, 6_000.0, 9_000.0, 4_000.0, 5_000.0, 7_000.0, 8_000.0]
    on = plan_cycle(burst(10_000.0, ages))
    off = plan_cycle(burst(10_000.0, ages, policy=QueuePolicy(running_siblings=False)))
    assert [s.job_key for s in off.starts] == ["w"]
    assert [s.job_key for s in on.starts] == ["other"]


@given(
    ages=st.lists(st.floats(1.0, 1e6), min_size=1, max_size=8),
    runtime_s=st.floats(1.0, 1e5),
)
def test_estimates_only_grow_and_follow_the_median_sibling(ages: list[float], runtime_s: float):
    snap = burst(2e6, ages, runtime_s=runtime_s)
    given_ = censored_by_siblings(snap)
    new = estimate_of(given_, "w")
    assert new >= runtime_s
    # The running siblings were estimated 600 s: the lower median of their ages over it.
    survived = sorted(a / 600.0 for a in ages)[(len(ages) - 1) // 2]
    if survived <= 1.0:
        assert new == runtime_s
    else:
        assert new >= survived * runtime_s * (1 - 1e-9)
