"""Benchmark: one plan_cycle as the queue grows (by default 3 member clusters of 100
8-GPU nodes, one GPU type each).

Prints JSON: p50/p99 wall seconds of plan_cycle for each queue length, with
the MILP (default policy) and with the greedy placement.

    python bench/bench_cycle.py [--pending 1000 5000] [--repeats 15] [--json]

Issue 22's scale (10,000 pending over 10 clusters x 1,000 nodes, 4 GPU types, every
cluster holding all four):

    python bench/bench_cycle.py --pending 10000 --clusters 10 --nodes 1000 --types 4 --repeats 5

and in steady state, a fleet with no GPU free on 49 of every 50 nodes (few starts, most
jobs held and explained): add ``--busy 50``.

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

#: GPU types and their slowness (runtime multiple), fastest first.
SPEED = {"H100-80GB": 0.6, "A100-80GB": 1.0, "V100-32GB": 2.0, "K80": 5.0}
LEGACY = {"east": "A100-80GB", "west": "V100-32GB", "north": "K80"}


def layout(clusters: int, nodes: int, types: int) -> list[tuple[str, list[str]]]:
    """(cluster, GPU type of each node): the default 3 x 100 is east/west/north with one
    type each; otherwise clusters c0.. whose nodes take the first ``types`` types in turn."""
    if (clusters, nodes, types) == (3, 100, 3):
        return [(name, [gpu_type] * nodes) for name, gpu_type in LEGACY.items()]
    kinds = [t for t in SPEED if t != "H100-80GB"] if types == 3 else list(SPEED)[:types]
    return [(f"c{c}", [kinds[n % len(kinds)] for n in range(nodes)]) for c in range(clusters)]


def snapshot(
    pending: int,
    seed: int,
    policy: QueuePolicy,
    shape: tuple[int, int, int] = (3, 100, 3),
    busy: int = 0,
) -> Snapshot:
    """``busy`` > 1: a fleet in steady state, no GPU free on all but every busy-th node."""
    rng = random.Random(seed)
    clusters, running = [], []
    plan = layout(*shape)
    kinds = sorted({t for _, types in plan for t in types})
    for cluster, node_types in plan:
        nodes = []
        for n, gpu_type in enumerate(node_types):
            used = rng.choice([0, 0, 4, 8, 8, 8])
            name = f"{cluster}-{n}"
            nodes.append(
                Node(
                    cluster=cluster,
                    name=name,
                    gpu_type=gpu_type,
                    gpus=8,
                    free_gpus=0 if busy > 1 and n % busy else 8 - used,
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
        estimate = Estimate(runtime_s=frozen_map({t: base * SPEED[t] for t in kinds}))
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
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=100, help="8-GPU nodes per cluster")
    parser.add_argument("--types", type=int, default=3, choices=[1, 2, 3, 4])
    parser.add_argument("--methods", default="milp,greedy")
    parser.add_argument(
        "--busy", type=int, default=0, help="no GPU free on all but every BUSY-th node"
    )
    parser.add_argument("--json", action="store_true", help="(output is always JSON)")
    args = parser.parse_args()
    shape = (args.clusters, args.nodes, args.types)
    out: dict[str, object] = {
        "clusters": args.clusters,
        "nodes": args.clusters * args.nodes,
        "gpu_types": args.types,
        "busy": args.busy,
    }
    base = QueuePolicy()
    for method in args.methods.split(","):
        policy = replace(base, placement=replace(base.placement, method=method))
        for pending in args.pending:
            walls = []
            for seed in range(args.repeats):
                snap = snapshot(pending, seed, policy, shape, args.busy)
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
