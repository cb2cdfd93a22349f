"""Predictor speed: one batch of 10,000 predictions, retraining on 100,000 history rows,
and a 2,000-job trace's worth of estimate()/observe() calls. Prints JSON.

Targets (issue 3): predictions < 200 ms, retraining < 60 s; the simulator wants the
trace's predictor time under ~10 s.

    python bench/bench_predictor.py
"""

from __future__ import annotations

import json
import random
import time
from types import MappingProxyType

from cpn.api.predictions import PredictorEstimator
from cpn.core.model import Job
from predictor.benchmarks import BenchmarkTable
from predictor.catalog import gpu_types, model_names
from predictor.history import History, HistoryRecord, measurements_from_history
from predictor.measurements import Measurement, Query, measurements_from_table
from predictor.model import ThroughputModel


def _queries(n: int, rng: random.Random) -> list[Query]:
    models = list(model_names())
    types = list(gpu_types())
    return [
        Query(
            model=rng.choice(models),
            gpu_type=rng.choice(types),
            batch_size=rng.choice((1, 8, 16, 32, 64, 128, 256)),
            gpus=rng.choice((1, 2, 4, 8)),
        )
        for _ in range(n)
    ]


def bench_predict(model: ThroughputModel, n: int = 10_000) -> dict[str, object]:
    """One predict() call over n random (model, GPU type, batch, GPUs) queries."""
    queries = _queries(n, random.Random(1))
    model.predict(queries[:10])  # warm caches of the code path, not of these queries
    start = time.perf_counter()
    pred = model.predict(queries)
    elapsed = time.perf_counter() - start
    kinds = {k: pred.kind.count(k) for k in set(pred.kind)}
    return {"n": n, "ms": round(elapsed * 1000, 1), "kinds": kinds}


def bench_retrain(rows: int = 100_000) -> dict[str, float]:
    """Write `rows` finished jobs to SQLite, read them back, aggregate, fit the forest."""
    rng = random.Random(2)
    table = BenchmarkTable.default()
    base = measurements_from_table(table)
    history = History(":memory:")
    records = []
    for i in range(rows):
        m = rng.choice(base)
        gpu = rng.choice(("K80", "P100", "V100-16GB", "A100-40GB", "T4", "A10"))
        work = m.batch_size * rng.randint(1_000, 100_000)
        noise = rng.lognormvariate(0.0, 0.2)
        records.append(
            HistoryRecord(
                job_key=f"h{i}",
                model=m.model,
                gpu_type=gpu,
                gpus=m.gpus,
                batch_size=m.batch_size,
                work_samples=float(work),
                actual_s=work / (m.samples_per_s * noise),
            )
        )
    history.add_many(records)
    start = time.perf_counter()
    aggregated = measurements_from_history(history.iter_records())
    read_s = time.perf_counter() - start
    model = ThroughputModel("rf").fit(base + aggregated, table=table, calibrate=False)
    total_s = time.perf_counter() - start
    history.close()
    # the forest fitted on every row, unaggregated (what aggregation saves)
    raw = [
        Measurement(
            model=r.model,
            gpu_type=r.gpu_type,
            batch_size=r.batch_size or 1,
            gpus=r.gpus,
            samples_per_s=r.samples_per_s or 1.0,
        )
        for r in records
    ]
    start = time.perf_counter()
    ThroughputModel("rf").fit(base + raw, table=table, calibrate=False)
    raw_s = time.perf_counter() - start
    return {
        "rows": rows,
        "aggregated_keys": len(aggregated),
        "read_and_aggregate_s": round(read_s, 2),
        "retrain_s": round(total_s, 2),
        "retrain_unaggregated_s": round(raw_s, 2),
        "trained_rows": len(model.measurements),
    }


def bench_trace(jobs: int = 2_000) -> dict[str, float]:
    """estimate() then observe() for each job of a Gavel-like trace (sync retraining)."""
    rng = random.Random(3)
    kinds = [(r.model, r.batch_size) for r in BenchmarkTable.default().rows if r.gpus == 1]
    types = ("K80", "P100", "V100-16GB", "A100-40GB")
    start = time.perf_counter()
    est = PredictorEstimator(retrain="sync")
    init_s = time.perf_counter() - start
    est_s = obs_s = 0.0
    for i in range(jobs):
        model, batch = rng.choice(kinds)
        job = Job(
            key=f"j{i}",
            submit_s=float(i),
            gpus_per_worker=rng.choice((1, 1, 1, 2, 4, 8)),
            model=model,
            features=MappingProxyType({"batch_size": float(batch), "steps": 1e4}),
        )
        t0 = time.perf_counter()
        estimate = est.estimate(job, types)
        t1 = time.perf_counter()
        gpu = types[i % len(types)]
        est.observe(job, gpu, estimate.runtime_s[gpu] * rng.lognormvariate(0.0, 0.1))
        obs_s += time.perf_counter() - t1
        est_s += t1 - t0
    return {
        "jobs": jobs,
        "init_s": round(init_s, 2),
        "estimate_s": round(est_s, 2),
        "observe_s": round(obs_s, 2),
        "total_s": round(init_s + est_s + obs_s, 2),
        "retrains": est.retrains,
    }


def main() -> None:
    table = BenchmarkTable.default()
    start = time.perf_counter()
    model = ThroughputModel("rf").fit(measurements_from_table(table), table=table)
    train_s = time.perf_counter() - start
    result = {
        "train_on_gavel_s": round(train_s, 2),
        "predict_10k": bench_predict(model),
        "retrain_100k": bench_retrain(),
        "trace_2000": bench_trace(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
