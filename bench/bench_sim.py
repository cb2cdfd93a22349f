"""Benchmark: a 10,000-job trace simulated end to end (issue 2 aims under 60 s).

Prints one JSON object. The trace is synthetic (``cpn simulate generate``: Poisson
arrivals, Gavel's job mix, seeded) on Gavel's simulated cluster (108 GPUs), at an
arrival rate that keeps the cluster loaded without an ever-growing queue. Each
listed policy runs once; ``wall_s`` covers the whole run (snapshot building, the
plan function, applying the plan, estimates), ``plan_wall_s`` the plan function.

    python bench/bench_sim.py [--jobs 10000] [--policy fifo[,default...]] [--rate-per-h 1.5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))

from cpn.core.presets import preset_policy  # noqa: E402
from cpn.sim import report  # noqa: E402
from cpn.sim.clusters import read_clusters  # noqa: E402
from cpn.sim.runner import simulate  # noqa: E402
from cpn.sim.trace import generate  # noqa: E402

TARGET_S = 60.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--policy", default="fifo")
    p.add_argument("--rate-per-h", type=float, default=1.5)
    p.add_argument("--estimator", default="oracle")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    clusters = read_clusters(ROOT / "operator" / "cpn" / "sim" / "data" / "gavel-cluster.yaml")
    started = time.perf_counter()
    trace = generate(jobs=args.jobs, seed=args.seed, arrival_rate_per_h=args.rate_per_h)
    generate_s = time.perf_counter() - started
    runs = {}
    for name in [s for s in args.policy.split(",") if s]:
        result = simulate(
            trace,
            clusters,
            preset_policy(name),
            name=name,
            estimator=args.estimator,
            seed=args.seed,
        )
        m = report.metrics(result)
        runs[name] = {
            "wall_s": m["wall_s"],
            "plan_wall_s": m["plan_wall_s"],
            "sim_overhead_s": round(m["wall_s"] - m["plan_wall_s"], 3),
            "cycles": m["cycles"],
            "finished": m["finished"],
            "jobs": m["jobs"],
            "avg_jct_s": m["avg_jct_s"],
            "gpu_utilization": m["gpu_utilization"],
            "max_queue": max(result.queue_len, default=0),
            "within_target": m["wall_s"] < TARGET_S,
        }
    print(
        json.dumps(
            {
                "bench": "simulate_trace_end_to_end",
                "jobs": args.jobs,
                "clusters": "gavel-cluster (108 GPUs)",
                "rate_per_h": args.rate_per_h,
                "estimator": args.estimator,
                "generate_s": round(generate_s, 3),
                "target_s": TARGET_S,
                "runs": runs,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
