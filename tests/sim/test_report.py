"""Metrics, the per-job CSV and the plots of a simulation run."""

from __future__ import annotations

import csv

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simkit import clusters, greedy_plan, no_transfer, tjob

from cpn.core.policy import QueuePolicy
from cpn.sim import report
from cpn.sim.estimators import OracleEstimator
from cpn.sim.jobs import truth_for
from cpn.sim.records import JobRecord
from cpn.sim.world import World

CONTRACT_KEYS = {
    "jobs",
    "finished",
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "avg_wait_s",
    "p99_wait_s",
    "max_wait_s",
    "makespan_s",
    "gpu_utilization",
    "wall_s",
}


def run(jobs, cl=None):
    cl = cl or clusters({"a": [(1, "V100", 4)]})
    truth = truth_for(jobs, cl.reference_gpu)
    world = World(
        jobs,
        cl,
        QueuePolicy(name="t"),
        OracleEstimator(truth),
        truth=truth,
        plan=greedy_plan,
        transfer=no_transfer,
    )
    return world.run()


@pytest.fixture
def result():
    """Two 4-GPU jobs back to back on one 4-GPU node, plus one infeasible job."""
    return run(
        [
            tjob("a", gpus=4, duration_s=100),
            tjob("b", submit_s=0, gpus=4, duration_s=300),
            tjob("c", gpus=8),
        ]
    )


def test_metric_keys_are_the_contract(result):
    """The metrics carry exactly the contract's keys, plus documented extras."""
    m = report.metrics(result)
    assert set(m) >= CONTRACT_KEYS
    assert set(m) - CONTRACT_KEYS == {
        "trace_jobs",
        "infeasible",
        "unfinished",
        "preemptions",
        "lost_gpu_h",
        "moved_gb",
        "cycles",
        "skipped_cycles",
        "plan_wall_s",
        "estimator",
        "estimate_rank_corr",
    }


def test_metrics_of_a_hand_computed_run(result):
    """JCT, wait, makespan and utilisation match the hand-computed schedule."""
    m = report.metrics(result)
    assert (m["jobs"], m["finished"], m["infeasible"], m["trace_jobs"]) == (2, 2, 1, 3)
    assert m["avg_jct_s"] == pytest.approx((100 + 400) / 2)
    assert (m["p50_jct_s"], m["p99_jct_s"]) == (100, 400)
    assert (m["avg_wait_s"], m["max_wait_s"]) == (50, 100)
    assert m["makespan_s"] == 400
    assert m["gpu_utilization"] == pytest.approx(1.0)


def test_exact_estimates_rank_perfectly():
    """The oracle's estimates order a run's jobs exactly as their runtimes do."""
    durations = {"a": 100, "b": 300, "c": 200, "d": 50}
    m = report.metrics(run([tjob(k, gpus=2, duration_s=d) for k, d in durations.items()]))
    assert m["finished"] == 4 and m["estimate_rank_corr"] == 1.0


def _done(job_id: str, gpus: float, estimate_s: float | None, runtime_s: float) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        submit_s=0.0,
        gpus=gpus,
        duration_s=runtime_s,
        finish_s=runtime_s,
        runtime_s=runtime_s,
        estimate_s=estimate_s,
    )


def test_estimate_rank_corr_is_spearmans_on_gpu_time():
    """Spearman's rho of predicted vs actual GPU-time, ties at their mean rank: reversed
    estimates give -1, a hand-computed case with a tie its value; jobs without an estimate
    are left out; fewer than three jobs give None, a constant side 0."""
    rev = [_done(str(i), 1, 10.0 * (5 - i), 10.0 * i) for i in range(5)]
    assert report.estimate_rank_corr(rev) == -1.0
    # GPU-time: predicted 2, 4, 4, 8 (ranks 0, 1.5, 1.5, 3); actual 1, 3, 2, 4 (0, 2, 1, 3)
    jobs = [_done("a", 1, 2, 1), _done("b", 2, 2, 1.5), _done("c", 1, 4, 2), _done("d", 2, 4, 2)]
    # deviations from 1.5: (-1.5, 0, 0, 1.5) and (-1.5, 0.5, -0.5, 1.5): cov 4.5, vars 4.5, 5
    assert report.estimate_rank_corr(jobs) == round(4.5 / (4.5 * 5) ** 0.5, 3)
    assert report.estimate_rank_corr([*jobs, _done("e", 1, None, 99.0)]) == (
        report.estimate_rank_corr(jobs)
    )
    assert report.estimate_rank_corr(jobs[:2]) is None
    assert report.estimate_rank_corr([_done(str(i), 1, 5.0, float(i)) for i in range(4)]) == 0.0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 6), st.integers(1, 6)), min_size=3, max_size=25
    )
)
def test_estimate_rank_corr_matches_scipy(rows):
    """The same figure as scipy's spearmanr wherever neither side is constant."""
    from scipy.stats import spearmanr

    jobs = [_done(str(i), g, float(e), float(a)) for i, (g, e, a) in enumerate(rows)]
    predicted = [g * e for g, e, _ in rows]
    actual = [g * a for g, _, a in rows]
    if len(set(predicted)) < 2 or len(set(actual)) < 2:
        assert report.estimate_rank_corr(jobs) == 0.0
        return
    assert report.estimate_rank_corr(jobs) == pytest.approx(
        round(float(spearmanr(predicted, actual).statistic), 3), abs=1e-3
    )


def test_percentile_is_nearest_rank():
    """Nearest-rank percentiles: p50 of 1..4 is 2, p99 is the maximum, empty is 0."""
    assert report.percentile([4, 1, 3, 2], 50) == 2
    assert report.percentile([4, 1, 3, 2], 99) == 4
    assert report.percentile([], 50) == 0


def test_job_csv_has_a_row_per_job(result, tmp_path):
    """The per-job CSV lists every job with its timings; the infeasible one is marked."""
    path = report.write_jobs_csv(result, tmp_path / "jobs.csv")
    with path.open() as handle:
        rows = {r["job_id"]: r for r in csv.DictReader(handle)}
    assert set(rows) == {"a", "b", "c"}
    assert (rows["b"]["first_start_s"], rows["b"]["finish_s"], rows["b"]["wait_s"]) == (
        "100",
        "400",
        "100",
    )
    assert rows["c"]["infeasible"] == "true" and rows["c"]["finish_s"] == ""


def test_plots_are_written(result, tmp_path):
    """The five PNG plots are written for a set of runs."""
    paths = report.plot({"x": result, "y": result}, tmp_path)
    assert sorted(p.name for p in paths) == [
        "jct_cdf.png",
        "queue_length.png",
        "utilization.png",
        "wait_by_size.png",
        "wait_cdf.png",
    ]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_wait_by_size_buckets(result):
    """Waiting time is averaged per job-size bucket."""
    assert report.wait_by_size(result) == {"3-4": 50.0}


def test_table_shows_every_policy(result):
    """The readable table has a row per policy with hours for times."""
    text = report.table({"fifo": report.metrics(result), "sjf": report.metrics(result)})
    lines = text.splitlines()
    assert lines[0].startswith("policy") and len(lines) == 4
    assert "0.07" in lines[2]  # 250 s average JCT = 0.07 h
