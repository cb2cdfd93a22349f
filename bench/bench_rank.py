"""How well the predictor RANKS jobs that declare no work (issue 16).

Replays a trace through the real predictor (``PredictorEstimator``) along a fixed
schedule (a ``jobs-<policy>.csv`` that ``cpn simulate --out`` wrote, e.g. FIFO's, which
does not depend on any estimate): every job is estimated with what was known when it
arrived, and learnt when it finished. The model and declared work are hidden (as
``--unlabelled`` does). Reported:

- ``spearman`` / ``kendall``: rank correlation between the estimate at submit and the
  true runtime (on the reference GPU), over all jobs;
- ``pairs``: among jobs that waited at the same time, the share of pairs the estimates
  (both taken when the later one arrived, with what was known then) order as the true
  runtimes do (ties in the estimate count a half); ``pairs_gpu_s`` the same on GPU-time
  (what the default formula ranks by); ``pairs_n`` how many pairs;
- ``log_mae``: mean |log(estimate / truth)| at submit.

Usage::

    cpn simulate --trace T --clusters C --policy fifo --estimator oracle --out D
    python bench/bench_rank.py --trace T --schedule D/jobs-fifo.csv [--window N]
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import math
from pathlib import Path
from typing import Any

from scipy import stats  # type: ignore[import-untyped]

from cpn.api.predictions import PredictorEstimator
from cpn.core.model import Job
from cpn.sim.jobs import scheduler_job
from cpn.sim.trace import read_trace
from predictor.runtimes import RuntimeHistory


def measure(
    trace: Path,
    schedule: Path,
    *,
    reference_gpu: str = "P100",
    window: int = 50,
) -> dict[str, float]:
    """Ranking metrics of the predictor on ``trace`` replayed along ``schedule`` (``window``:
    runtimes kept per key)."""
    trace_jobs = read_trace(trace)
    jobs = {t.job_id: scheduler_job(t, max_node_gpus=8, unlabelled=True) for t in trace_jobs}
    truth = {t.job_id: t.duration_s for t in trace_jobs}
    with schedule.open() as f:
        rows = {r["job_id"]: r for r in csv.DictReader(f)}
    gpu_of = {k: r["gpu_type"] or reference_gpu for k, r in rows.items()}
    start = {k: float(r["first_start_s"]) for k, r in rows.items() if r["first_start_s"]}
    finish = {k: float(r["finish_s"]) for k, r in rows.items() if r["finish_s"]}
    est = PredictorEstimator(reference_gpu=reference_gpu, seed=0, retrain="off")
    if window != est.runtimes.window:
        est.runtimes = RuntimeHistory(window=window)
    gpus = [reference_gpu]
    # events: (time, order, kind, key); finishes before arrivals at the same instant
    events: list[tuple[float, int, str, str]] = []
    for key, job in jobs.items():
        if key in start and key in finish:
            events.append((job.submit_s, 1, "submit", key))
            events.append((start[key], 0, "start", key))
            events.append((finish[key], 0, "finish", key))
    heapq.heapify(events)
    cache: dict[tuple[str, str, float, float], float] = {}

    def guess(job: Job) -> float:
        k = (job.user, job.group, job.gpus, job.submit_s)
        if k not in cache:
            cache[k] = est.estimate(job, gpus).runtime_s[reference_gpu]
        return cache[k]

    at_submit: dict[str, float] = {}
    waiting: set[str] = set()
    agree = agree_gpu = 0.0
    pairs = 0
    while events:
        _, _, kind, key = heapq.heappop(events)
        job = jobs[key]
        if kind == "finish":
            est.observe(job, gpu_of[key], float(rows[key]["run_s"]))
            cache.clear()
        elif kind == "start":
            waiting.discard(key)
        else:
            mine = at_submit[key] = guess(job)
            for other in waiting:
                theirs = guess(jobs[other])
                t_mine, t_theirs = truth[key], truth[other]
                if t_mine == t_theirs:
                    continue
                pairs += 1
                agree += _concordant(mine, theirs, t_mine, t_theirs)
                g, h = job.gpus, jobs[other].gpus
                agree_gpu += _concordant(g * mine, h * theirs, g * t_mine, h * t_theirs)
            waiting.add(key)
    keys = sorted(at_submit)
    guesses = [at_submit[k] for k in keys]
    actual = [truth[k] for k in keys]
    return {
        "jobs": len(keys),
        "spearman": _correlation(stats.spearmanr, guesses, actual),
        "kendall": _correlation(stats.kendalltau, guesses, actual),
        "pairs": agree / pairs if pairs else math.nan,
        "pairs_gpu_s": agree_gpu / pairs if pairs else math.nan,
        "pairs_n": pairs,
        "log_mae": sum(abs(math.log(g / a)) for g, a in zip(guesses, actual, strict=True))
        / len(keys),
    }


def _correlation(fn: Any, guesses: list[float], actual: list[float]) -> float:
    """A rank correlation, NaN when either side is constant (it is not defined then)."""
    if len(set(guesses)) < 2 or len(set(actual)) < 2:
        return math.nan
    return float(fn(guesses, actual).statistic)


def _concordant(a: float, b: float, ta: float, tb: float) -> float:
    if a == b:
        return 0.5
    return 1.0 if (a < b) == (ta < tb) else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--schedule", type=Path, required=True, help="jobs-<policy>.csv")
    parser.add_argument("--reference-gpu", default="P100")
    parser.add_argument("--window", type=int, default=50, help="runtimes kept per key")
    args = parser.parse_args()
    result = measure(
        args.trace,
        args.schedule,
        reference_gpu=args.reference_gpu,
        window=args.window,
    )
    print(json.dumps(result))  # one JSON document


if __name__ == "__main__":
    main()
