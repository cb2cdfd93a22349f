"""Benchmark: one plan_cycle as the queue grows (3 member clusters, 300 nodes).

Prints JSON: p50/p99 wall seconds of plan_cycle for each queue length, with
the MILP (default policy) and with the greedy placement.

    python bench/bench_cycle.py [--pending 1000 5000] [--repeats 15] [--json]

The operator's whole cycle with 5,000 pending on the test bed (snapshot, plan,
dispatch; status writes and ETAs in the background) is measured by
``python bench/bench_memory.py --n 5000`` (cpn_cycle_total_seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT)]

from cpn.core.cycle import plan_cycle  # noqa: E402
from cpn.core.model import Cluster, Estimate, Job, Node, Running, Snapshot, frozen_map  # noqa: E402
from cpn.core.policy import QueuePolicy  # noqa: E402

TYPES = {"east": "A100-80GB", "west": "V100-32GB", "north": "K80"}
SPEED = {"A100-80GB": 1.0, "V100-32GB": 2.0, "K80": 5.0}


def snapshot(pending: int, seed: int, policy: QueuePolicy) -> Snapshot:
    rng = random.Random(seed)
    clusters, running = [], []
    for cluster, gpu_type in TYPES.items():
        nodes = []
        for n in range(100):
            used = rng.choice([0, 0, 4, 8, 8, 8])
            name = f"{cluster}-{n}"
            nodes.append(
                Node(
                    cluster=cluster,
                    name=name,
                    gpu_type=gpu_type,
                    gpus=8,
                    free_gpus=8 - used,
                    gpu_memory_gib=80,
                    cpu=96,
                    free_cpu=96,
                    memory_gib=1024,
                    free_memory_gib=1024,
                )
            )
            if used:
                job = Job(key=f"r-{name}", submit_s=0, gpus_per_worker=used)
                running.append(
                    Running(
                        job=job,
                        cluster=cluster,
                        gpu_type=gpu_type,
                        nodes=(name,),
                        start_s=0,
                        predicted_end_s=rng.uniform(10, 20000),
                    )
                )
        clusters.append(Cluster(name=cluster, nodes=tuple(nodes)))
    jobs = []
    for i in range(pending):
        base = rng.lognormvariate(7, 1.5)
        gpus = rng.choice([1, 1, 1, 2, 4, 8])
        workers = 2 if gpus == 8 and rng.random() < 0.2 else 1
        estimate = Estimate(runtime_s=frozen_map({t: base * s for t, s in SPEED.items()}))
        jobs.append(
            Job(
                key=f"j{i:05d}",
                submit_s=rng.uniform(0, 5000),
                gpus_per_worker=gpus,
                workers=workers,
                group=rng.choice("abcd"),
                estimate=estimate,
            )
        )
    return Snapshot(
        now_s=5000.0,
        policy=policy,
        pending=tuple(jobs),
        running=tuple(running),
        clusters=tuple(clusters),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pending", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="(output is always JSON)")
    args = parser.parse_args()
    out: dict[str, object] = {"clusters": 3, "nodes": 300}
    base = QueuePolicy()
    for method in ("milp", "greedy"):
        policy = replace(base, placement=replace(base.placement, method=method))
        for pending in args.pending:
            walls = []
            for seed in range(args.repeats):
                snap = snapshot(pending, seed, policy)
                start = time.perf_counter()
                plan = plan_cycle(snap)
                walls.append(time.perf_counter() - start)
            walls.sort()
            out[f"{method}_{pending}"] = {
                "p50_s": round(statistics.median(walls), 4),
                "p99_s": round(walls[min(len(walls) - 1, int(0.99 * len(walls)))], 4),
                "starts_last": len(plan.starts),
                "solver_last": plan.stats.method,
            }
    out["machine"] = {
        "cores": os.cpu_count(),
        "load_avg_1_5_15": [round(v, 2) for v in os.getloadavg()],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
