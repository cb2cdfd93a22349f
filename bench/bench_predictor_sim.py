"""Benchmark: the predictor in the simulator when some models were never benchmarked.

On Gavel's Philly-derived traces every job's model and GPU type is in the benchmark
table, so ``--estimator predictor`` serves measured throughputs and trivially matches
the oracle. Here the predictor is given the table **without** the held-out models
(default: ``transformer`` and ``resnet50``, about a third of the jobs): their first jobs
get the roofline prior (flagged unseen, conservative ``high_s``), and the predictor
must learn them online from the jobs that finish (``PredictorEstimator.observe``,
retraining every ``--retrain-every`` observations). The simulator's ground truth still
comes from the full table.

Runs (same trace, same clusters; ``default`` is cpn's policy):

- ``default`` + oracle estimates (the yardstick),
- ``default`` + predictor on the full table,
- ``default`` + predictor on the table without the held-out models (the check),
- ``default`` + noisy estimates (oracle x exp(N(0, sigma)), per job),
- ``sjf`` + noisy estimates.

Prints one JSON object: per run the average JCT and its ratio to ``default`` + oracle,
and for the held-out jobs how far the predictor's first estimate (at arrival, on the
GPU type of the job's trace) was from the truth, for the first and the second half of
those jobs by arrival (the learning curve); and how far the estimate in force when each
started was (waiting jobs are re-estimated as the predictor learns, ``World.reestimate``),
with the number of re-estimates.

    python bench/bench_predictor_sim.py [--trace T.csv] [--jobs N] [--holdout a,b] [--sigma S]
        [--unseen-runtime high|median] [--no-reestimate] [--skip RUN,...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))

from cpn.api.predictions import PredictorEstimator  # noqa: E402
from cpn.core.estimator import Estimator  # noqa: E402
from cpn.core.model import Estimate, Job  # noqa: E402
from cpn.core.presets import preset_policy  # noqa: E402
from cpn.sim import report  # noqa: E402
from cpn.sim.clusters import ClusterSet, read_clusters  # noqa: E402
from cpn.sim.jobs import truth_for  # noqa: E402
from cpn.sim.runner import simulate  # noqa: E402
from cpn.sim.speed import TrueRuntime  # noqa: E402
from cpn.sim.trace import TraceJob, read_trace  # noqa: E402
from cpn.sim.world import World  # noqa: E402
from predictor.benchmarks import BenchmarkTable  # noqa: E402
from predictor.catalog import canonical_model  # noqa: E402

DATA = ROOT / "operator" / "cpn" / "sim" / "data"
DEFAULT_TRACE = DATA / "philly" / "ee9e8c.csv"
DEFAULT_CLUSTERS = DATA / "gavel-cluster.yaml"


class Recording(Estimator):
    """Wraps an estimator; keeps the first estimate of each job of the held-out models.

    ``at_start`` (filled by :func:`run_holdout`) holds, per held-out job, the estimate
    in force when it started, on the GPU type it started on, and its true runtime there:
    the world re-estimates waiting jobs as the predictor learns, so it can differ from
    the first.
    """

    def __init__(self, inner: PredictorEstimator, models: frozenset[str]) -> None:
        self.inner = inner
        self.models = models
        self.first: dict[str, Estimate] = {}
        self.order: list[str] = []
        self.at_start: dict[str, tuple[str, float, float]] = {}  # key -> (GPU, estimate, truth)
        self.last_unseen: dict[str, bool] = {}  # key -> its latest estimate was flagged unseen
        self.reestimates = 0
        self.reestimate_wall_s = 0.0

    def knowledge_version(self) -> object:
        """The inner predictor's (its retrain count)."""
        return self.inner.knowledge_version()

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        """The inner estimate, recorded the first time a held-out job is seen."""
        est = self.inner.estimate(job, gpu_types)
        if _canonical(job.model) in self.models:
            if job.key not in self.first:
                self.first[job.key] = est
                self.order.append(job.key)
            self.last_unseen[job.key] = est.unseen
        return est

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        """Forwarded to the inner estimator (it learns from it)."""
        self.inner.observe(job, gpu_type, actual_s)


def _canonical(model: str) -> str:
    try:
        return canonical_model(model)
    except ValueError:
        return model.lower()


def without_models(table: BenchmarkTable, models: frozenset[str]) -> BenchmarkTable:
    """``table`` minus every row of ``models``."""
    return table.with_rows([r for r in table.rows if r.model not in models], source="")


def run_holdout(
    trace: Sequence[TraceJob],
    clusters: ClusterSet,
    holdout: frozenset[str],
    *,
    policy: str = "default",
    retrain_every: int = 200,
    seed: int = 0,
    unseen_runtime: str = "high",
    reestimate: bool = True,
) -> tuple[dict[str, Any], Recording, TrueRuntime]:
    """``policy`` with a predictor that never saw ``holdout`` benchmarked (metrics, log, truth).

    Mirrors :func:`cpn.sim.runner.simulate` with the estimator built here (the public
    ``simulate`` only takes an estimator's name).
    """
    truth = truth_for(trace, clusters.reference_gpu)
    table = without_models(BenchmarkTable.default(), holdout)
    estimator = Recording(
        PredictorEstimator(
            table=table,
            reference_gpu=truth.reference_gpu,
            retrain_every=retrain_every,
            seed=seed,
            unseen_runtime=unseen_runtime,
        ),
        holdout,
    )
    qp = preset_policy(policy)
    world = World(
        trace,
        clusters,
        qp,
        estimator,
        truth=truth,
        tick_s=300.0 if qp.preemption.enabled else None,
        policy_name=policy,
        estimator_name="predictor-holdout" if holdout else "predictor",
        reestimate=reestimate,
    )
    result = world.run()
    estimator.reestimates = world.reestimates
    estimator.reestimate_wall_s = world.reestimate_wall_s
    for record in result.records:
        if record.job_id in estimator.first and record.estimate_s is not None:
            estimator.at_start[record.job_id] = (
                record.gpu_type,
                record.estimate_s,
                record.runtime_s,
            )
    return report.metrics(result), estimator, truth


def estimate_errors(
    rec: Recording, trace: Sequence[TraceJob], truth: TrueRuntime
) -> dict[str, Any]:
    """Median |estimate / truth - 1| (percent) of the first estimates, by arrival half."""
    gpu_of = {j.job_id: j.gpu_type or truth.reference_gpu for j in trace}

    def errors(keys: Sequence[str]) -> list[float]:
        out = []
        for key in keys:
            gpu = gpu_of[key]
            est = rec.first[key].on(gpu)
            if est is not None:
                out.append(abs(est / truth.runtime_s(key, gpu) - 1.0) * 100.0)
        return out

    def at_start(keys: Sequence[str], *, first: bool) -> list[float]:
        """Errors on the GPU type each job started on: of its first estimate or the last."""
        out = []
        for key in keys:
            if key not in rec.at_start:
                continue
            gpu, est, true = rec.at_start[key]
            value = rec.first[key].on(gpu) if first else est
            if value is not None and true > 0:
                out.append(abs(value / true - 1.0) * 100.0)
        return out

    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 1) if values else None

    half = len(rec.order) // 2
    first, second = errors(rec.order[:half]), errors(rec.order[half:])
    unseen = sum(1 for key in rec.order if rec.first[key].unseen)
    return {
        "held_out_jobs": len(rec.order),
        "flagged_unseen": unseen,
        "first_half_median_ape": median(first),
        "second_half_median_ape": median(second),
        "start_gpu_first_estimate_median_ape": [
            median(at_start(rec.order[:half], first=True)),
            median(at_start(rec.order[half:], first=True)),
        ],
        "start_gpu_estimate_at_start_median_ape": [
            median(at_start(rec.order[:half], first=False)),
            median(at_start(rec.order[half:], first=False)),
        ],
        "unseen_at_start": sum(
            1 for k in rec.order if k in rec.at_start and rec.last_unseen.get(k, False)
        ),
        "reestimates": rec.reestimates,
        "reestimate_wall_s": round(rec.reestimate_wall_s, 2),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", default=str(DEFAULT_TRACE))
    p.add_argument("--clusters", default=str(DEFAULT_CLUSTERS))
    p.add_argument("--jobs", type=int, default=0, help="first N jobs only (0: all)")
    p.add_argument("--holdout", default="transformer,resnet50")
    p.add_argument("--sigma", type=float, default=0.5)
    p.add_argument("--retrain-every", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--unseen-runtime",
        choices=("high", "median"),
        default="high",
        help="an unseen model's runtime: the high quantile (default) or the median",
    )
    p.add_argument(
        "--no-reestimate",
        action="store_true",
        help="estimate each job once, at arrival (the simulator before waiting jobs were "
        "re-estimated), in the predictor runs (the others learn nothing)",
    )
    p.add_argument("--skip", default="", help="runs to skip, comma-separated (e.g. sjf+noisy)")
    args = p.parse_args()
    trace = read_trace(args.trace)
    if args.jobs:
        trace = tuple(sorted(trace, key=lambda j: (j.submit_s, j.job_id))[: args.jobs])
    clusters = read_clusters(args.clusters)
    holdout = frozenset(canonical_model(m) for m in args.holdout.split(",") if m)
    skip = {s for s in args.skip.split(",") if s}
    runs: dict[str, dict[str, Any]] = {}
    extra: dict[str, Any] = {}
    plain = (
        ("default+oracle", "default", "oracle"),
        ("default+predictor", "default", "predictor"),
        ("default+noisy", "default", "noisy"),
        ("sjf+noisy", "sjf", "noisy"),
    )
    for label, policy, est in plain[:2]:
        if label in skip:
            continue
        started = time.perf_counter()
        if est == "predictor":  # built here, like the held-out run, to honour --no-reestimate
            metrics, _, _ = run_holdout(
                trace,
                clusters,
                frozenset(),
                retrain_every=args.retrain_every,
                seed=args.seed,
                unseen_runtime=args.unseen_runtime,
                reestimate=not args.no_reestimate,
            )
            runs[label] = metrics | {"run_s": round(time.perf_counter() - started, 1)}
            continue
        result = simulate(
            trace,
            clusters,
            preset_policy(policy),
            name=policy,
            estimator=est,
            sigma=args.sigma,
            seed=args.seed,
        )
        runs[label] = report.metrics(result) | {"run_s": round(time.perf_counter() - started, 1)}
    label = "default+predictor-holdout"
    if label not in skip:
        started = time.perf_counter()
        metrics, rec, truth = run_holdout(
            trace,
            clusters,
            holdout,
            retrain_every=args.retrain_every,
            seed=args.seed,
            unseen_runtime=args.unseen_runtime,
            reestimate=not args.no_reestimate,
        )
        runs[label] = metrics | {"run_s": round(time.perf_counter() - started, 1)}
        extra = estimate_errors(rec, trace, truth)
        extra["retrains"] = rec.inner.retrains
    for label, policy, est in plain[2:]:
        if label in skip:
            continue
        started = time.perf_counter()
        result = simulate(
            trace,
            clusters,
            preset_policy(policy),
            name=policy,
            estimator=est,
            sigma=args.sigma,
            seed=args.seed,
        )
        runs[label] = report.metrics(result) | {"run_s": round(time.perf_counter() - started, 1)}
    base = runs.get("default+oracle", {}).get("avg_jct_s")
    summary = {
        label: {
            "avg_jct_s": m["avg_jct_s"],
            "vs_default_oracle": round(m["avg_jct_s"] / base, 4) if base else None,
            "p99_jct_s": m["p99_jct_s"],
            "finished": m["finished"],
            "run_s": m["run_s"],
            "estimator": m["estimator"],
        }
        for label, m in runs.items()
    }
    print(
        json.dumps(
            {
                "trace": Path(args.trace).name,
                "jobs": len(trace),
                "holdout": sorted(holdout),
                "sigma": args.sigma,
                "unseen_runtime": args.unseen_runtime,
                "reestimate": not args.no_reestimate,
                "runs": summary,
                "held_out_estimates": extra,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
