"""The queue projected forward gives each waiting job a start and finish time."""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist

import pytest

from cpn.core.cycle import plan_cycle
from cpn.core.eta import project
from cpn.core.model import Estimate, frozen_map
from cpn.core.policy import Aging, QueuePolicy
from cpn.core.presets import preset_policy
from cpn.core.runtime_law import expected_end_s
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"


def test_waiting_jobs_start_when_predicted_capacity_frees():
    """Two 8-GPU jobs queue behind a running one: one starts at its end, the next after that."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0]))
    r = running(job("r", gpus=8), "m", A100, ("m-0",), start_s=0, end_s=100)
    jobs = [
        job("a", gpus=8, runtime_s=50, submitted_s=1),
        job("b", gpus=8, runtime_s=70, submitted_s=2),
    ]
    out = project(
        snapshot(jobs=jobs, clusters=[c], running_jobs=[r], now_s=10, policy=preset_policy("fifo"))
    )
    assert (out["a"].start_s, out["a"].end_s) == (100, 150)
    assert (out["b"].start_s, out["b"].end_s) == (150, 220)


def test_jobs_that_fit_now_start_now():
    """A job with room starts at the snapshot's instant."""
    c = cluster("m", nodes("m", 1, gpus=8))
    out = project(snapshot(jobs=[job("a", runtime_s=30)], clusters=[c], now_s=5))
    assert out["a"].start_s == 5 and out["a"].end_s == 35 and out["a"].cluster == "m"


def test_overrunning_job_is_expected_to_end_imminently():
    """A running job past its predicted end frees its GPUs right after now."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0]))
    r = running(job("r", gpus=8), "m", A100, ("m-0",), start_s=0, end_s=5)
    out = project(
        snapshot(jobs=[job("a", gpus=8, runtime_s=10)], clusters=[c], running_jobs=[r], now_s=50)
    )
    assert out["a"].start_s == 51


def test_infeasible_and_suspended_jobs_get_no_eta():
    """Jobs that can never start, or are suspended, are absent from the projection."""
    c = cluster("m", nodes("m", 1, gpus=8))
    out = project(snapshot(jobs=[job("huge", gpus=16), job("s", suspended=True)], clusters=[c]))
    assert out == {}


def test_until_stops_once_the_wanted_jobs_are_placed():
    """With ``until``, the wanted job's projection is unchanged and fewer cycles run."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0]))
    r = running(job("r", gpus=8), "m", A100, ("m-0",), start_s=0, end_s=100)
    jobs = [job(k, gpus=8, runtime_s=50, submitted_s=i + 1) for i, k in enumerate("abcd")]
    snap = snapshot(
        jobs=jobs, clusters=[c], running_jobs=[r], now_s=10, policy=preset_policy("fifo")
    )
    calls: list[float] = []

    def counted(s):
        calls.append(s.now_s)
        return plan_cycle(s)

    full = project(snap, plan=counted)
    whole = len(calls)
    calls.clear()
    part = project(snap, plan=counted, until={"b", "gone"})
    assert part["b"] == full["b"] and (full["b"].start_s, full["b"].end_s) == (150, 200)
    assert "d" in full and "d" not in part
    assert len(calls) < whole


def test_running_job_with_uncertainty_ends_at_its_conditional_median():
    """A running job whose estimate states a spread is expected to end at the median of its
    runtime law given it survived so far: later than planned, more so once it overran."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0]))
    spread = job("r", gpus=8)
    estimate = Estimate(
        runtime_s=frozen_map({A100: 100.0}), high_s=frozen_map({A100: 100.0 * math.exp(1.2816)})
    )
    r = running(replace(spread, estimate=estimate), "m", A100, ("m-0",), start_s=0, end_s=100)

    def eta_at(now_s: float) -> float:
        s = snapshot(
            jobs=[job("a", gpus=8, runtime_s=10)], clusters=[c], running_jobs=[r], now_s=now_s
        )
        return project(s)["a"].start_s

    def conditional_median(elapsed_s: float) -> float:
        # sigma = 1: P(T <= e) = Phi(ln(e / 100)); the median given T > e is at (1 + that) / 2.
        q = (1 + NormalDist().cdf(math.log(elapsed_s / 100))) / 2
        return 100 * math.exp(NormalDist().inv_cdf(q))

    assert eta_at(200) > 200 and eta_at(200) == pytest.approx(conditional_median(200), rel=1e-3)
    assert 100 < eta_at(50) < eta_at(200)
    assert eta_at(50) == pytest.approx(conditional_median(50), rel=1e-3)
    assert eta_at(0) == 100  # just started: its planned end
    assert expected_end_s(r, 50) == pytest.approx(conditional_median(50), rel=1e-3)


def test_projection_places_with_the_live_cycles_milp():
    """The projection's first cycle starts what the live MILP cycle starts: the 4-GPU job
    keeps its room against four 1-GPU jobs ranked just after it (deferral weighs by size
    too), and they follow it."""
    c = cluster("m", nodes("m", 1, gpus=4))
    big = job("big", gpus=4, runtime_s=100, submitted_s=0)
    small = [job(f"s{i}", runtime_s=100, submitted_s=100 + i) for i in range(4)]
    aging = QueuePolicy(aging=Aging(rate=4.0))  # the big job, older, ranks first
    snap = snapshot(jobs=[big, *small], clusters=[c], now_s=1000, policy=aging)
    live = plan_cycle(snap)
    assert live.stats.method == "milp"
    out = project(snap)
    assert {k for k, p in out.items() if p.start_s == 1000} == {s.job_key for s in live.starts}
    assert {s.job_key for s in live.starts} == {"big"}
    assert all(out[j.key].start_s == 1100 for j in small)


def _queue(high_s: float | None) -> tuple[object, ...]:
    """One 8-GPU node busy with r until 100; a and b (8 GPUs, 50 s median) queue behind it,
    every law with p90 ``high_s`` (None: exact estimates)."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0]))

    def law(key: str, median: float, submitted: float):
        j = job(key, gpus=8, runtime_s=median, submitted_s=submitted)
        if high_s is None:
            return j
        est = Estimate(
            runtime_s=frozen_map({A100: median}), high_s=frozen_map({A100: high_s * median})
        )
        return replace(j, estimate=est)

    r = running(law("r", 100.0, 0.0), "m", A100, ("m-0",), start_s=0, end_s=100)
    jobs = [law("a", 50.0, 1.0), law("b", 50.0, 2.0)]
    return (jobs, c, r)


def test_range_holds_the_point_and_is_empty_with_exact_estimates():
    """project_range: same point starts as project; low <= point <= high; with exact
    estimates low = point = high (nothing uncertain)."""
    from cpn.core.eta import project_range

    jobs, c, r = _queue(None)
    snap = snapshot(
        jobs=jobs, clusters=[c], running_jobs=[r], now_s=10, policy=preset_policy("fifo")
    )
    out, plain = project_range(snap), project(snap)
    for key in ("a", "b"):
        assert out[key].start_s == plain[key].start_s
        assert out[key].start_low_s == out[key].start_s == out[key].start_high_s


def test_wider_runtime_laws_give_wider_start_ranges():
    """The runtimes' spread reaches the start: b, behind r and a, gets a range that holds its
    point and widens with the laws' p90 / median ratio; the point does not move."""
    from cpn.core.eta import project_range

    widths = []
    for ratio in (1.5, 4.0, 20.0):
        jobs, c, r = _queue(ratio)
        snap = snapshot(
            jobs=jobs, clusters=[c], running_jobs=[r], now_s=10, policy=preset_policy("fifo")
        )
        b = project_range(snap)["b"]
        assert b.start_s == project(snap)["b"].start_s
        assert b.start_low_s is not None and b.start_high_s is not None
        assert b.start_low_s < b.start_s < b.start_high_s
        widths.append(b.start_high_s - b.start_low_s)
    assert widths == sorted(widths) and widths[0] < widths[-1]
