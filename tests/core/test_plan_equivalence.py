"""plan_cycle decides exactly what it decided before its speed-ups (issue 22).

Each of :data:`COUNT` random snapshots (shapes, fractional GPUs, gangs, CPU and memory
asks, quotas with lending, reservations and backfill, the alone rule, not-ready
clusters, unschedulable and busy nodes, every placement method and ordering,
preemption) is planned, and the plan's full ``repr`` (starts, holds with their
reasons and messages, preemptions, solver stats) is hashed. The hashes were written
by the code before the speed-ups (``python -m tests.core.test_plan_equivalence
--write`` at commit ``fresh``): any change of a decision or of a message fails here.
Change them only for a change of decisions made on purpose.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cpn.core.cycle import plan_cycle
from cpn.core.model import Cluster, Estimate, Job, Node, Running, Snapshot, frozen_map
from cpn.core.policy import (
    Aging,
    GroupQuota,
    Limit,
    QueuePolicy,
    Quotas,
    Reservation,
)
from cpn.core.presets import PRESETS

COUNT = 1500
DIGESTS = Path(__file__).with_name("plan_digests.json")
TYPES = ("A100-80GB", "V100-32GB", "K80")


def _policy(rng: random.Random) -> QueuePolicy:
    base = PRESETS[rng.choice(sorted(PRESETS))]
    quotas = Quotas(
        groups={
            "g": GroupQuota(
                limit=Limit(
                    gpus=rng.choice([None, 4.0, 16.0]),
                    per_type={"A100-80GB": 8.0} if rng.random() < 0.3 else {},
                ),
                users={"u1": Limit(gpus=rng.choice([2.0, 4.0]))},
                default_user=rng.choice([None, Limit(gpus=6.0)]),
            )
        },
        lending=rng.random() < 0.3,
    )
    reservation = Reservation(
        enabled=rng.random() < 0.8,
        min_gpus=rng.choice([2.0, 4.0, 8.0, 16.0]),
        max_reservations=rng.choice([1, 2, 8]),
        backfill=rng.random() < 0.8,
        claim_big=rng.random() < 0.5,
        drain_after_s=rng.choice([None, 100.0, 600.0]),
        drain_ratio=rng.choice([0.0, 1.5]),
        head=rng.random() < 0.3,
        drain_fifo=rng.random() < 0.2,
    )
    placement = replace(
        base.placement,
        method=rng.choice(["milp", "greedy", "first-fit", "fastest", base.placement.method]),
        wait_for_faster=rng.random() < 0.3,
        window=rng.choice([2, 5, 48]),
        first_of_model_alone=rng.random() < 0.4,
    )
    return replace(
        base,
        quotas=quotas,
        reservation=reservation,
        placement=placement,
        aging=Aging(max_wait_s=rng.choice([None, 300.0, 6 * 3600.0])),
        preemption=replace(base.preemption, enabled=rng.random() < 0.4, min_run_s=0.0),
        node_cpu_ceiling=rng.choice([None, 0.7]),
    )


def _job(rng: random.Random, key: str, now: float) -> Job:
    runtimes = {t: rng.uniform(10, 10000) for t in TYPES if rng.random() < 0.7}
    share = rng.random() < 0.15
    return Job(
        key=key,
        submit_s=rng.uniform(0, now),
        gpus_per_worker=1 if share else rng.choice([1, 1, 2, 4, 8]),
        workers=rng.choice([1, 1, 1, 2, 3]),
        gpu_share=rng.choice([0.25, 0.5, 0.3]) if share else 1.0,
        gpu_memory_gib=rng.choice([0.0, 0.0, 20.0, 40.0]),
        cpu=rng.choice([0.0, 4.0, 16.0]),
        memory_gib=rng.choice([0.0, 32.0, 128.0]),
        gpu_types=frozenset(rng.sample(TYPES, 2)) if rng.random() < 0.2 else frozenset(),
        user=rng.choice(["u1", "u2", "u3"]),
        group=rng.choice("ghk"),
        priority=rng.choice([0, 0, 1, 2]),
        model=rng.choice(["", "m1", "m2"]),
        data_cluster=rng.choice([None, None, "c0", "c1"]),
        data_gb=rng.choice([0.0, 50.0]),
        user_estimate_s=rng.choice([None, 600.0]),
        estimate=Estimate(
            runtime_s=frozen_map(runtimes),
            high_s=frozen_map({t: v * 1.5 for t, v in runtimes.items() if rng.random() < 0.5}),
            new_model=rng.random() < 0.3,
        ),
        attained_gpu_s=rng.choice([0.0, 0.0, 3600.0]),
        not_before_s=rng.choice([0.0] * 9 + [now + 10]),
        suspended=rng.random() < 0.03,
        checkpoint=rng.random() < 0.5,
        fifo_due_s=rng.choice([None, rng.uniform(0, 2 * now)]),
    )


def random_snapshot(seed: int) -> Snapshot:
    rng = random.Random(seed)
    now = 1000.0
    clusters, running = [], []
    for c in range(rng.randint(1, 4)):
        name = f"c{c}"
        nodes = []
        for n in range(rng.randint(1, 8)):
            gpus = rng.choice([1, 2, 4, 8])
            cpu, memory = rng.choice([(32.0, 256.0), (96.0, 1024.0)])
            node = Node(
                cluster=name,
                name=f"{name}-n{n}",
                gpu_type=rng.choice(TYPES),
                gpus=gpus,
                free_gpus=float(gpus),
                gpu_memory_gib=rng.choice([32.0, 80.0]),
                cpu=cpu,
                free_cpu=cpu,
                memory_gib=memory,
                free_memory_gib=memory,
                cpu_util=rng.choice([None, None, 0.2, 0.9]),
                schedulable=rng.random() < 0.9,
            )
            for r in range(rng.choice([0, 0, 1, 2])):
                holder = _job(rng, f"run-{name}-{n}-{r}", now)
                holder = replace(holder, gpus_per_worker=rng.randint(1, gpus), workers=1)
                used = holder.gpus_per_worker * (holder.gpu_share if holder.gpu_share < 1 else 1)
                if used > node.free_gpus or node.free_cpu < holder.cpu:
                    continue
                node = replace(
                    node,
                    free_gpus=node.free_gpus - used,
                    free_cpu=node.free_cpu - holder.cpu,
                    free_memory_gib=node.free_memory_gib - holder.memory_gib,
                )
                running.append(
                    Running(
                        job=holder,
                        cluster=name,
                        gpu_type=node.gpu_type,
                        nodes=(node.name,),
                        start_s=rng.uniform(0, now),
                        predicted_end_s=rng.uniform(now - 500, now + 5000),
                        alone=rng.random() < 0.1,
                    )
                )
            nodes.append(node)
        clusters.append(Cluster(name=name, nodes=tuple(nodes), ready=rng.random() < 0.85))
    pending = tuple(_job(rng, f"j{i:03d}", now) for i in range(rng.randint(0, 40)))
    return Snapshot(
        now_s=now,
        policy=_policy(rng),
        pending=pending,
        running=tuple(running),
        clusters=tuple(clusters),
        bandwidth_gbps={"c0": {"c1": 10.0, "c2": 1.0}},
    )


def digest(seed: int) -> str:
    return hashlib.sha256(repr(plan_cycle(random_snapshot(seed))).encode()).hexdigest()[:16]


@pytest.mark.parametrize("block", range(6))
def test_plans_are_unchanged(block: int) -> None:
    expected = json.loads(DIGESTS.read_text())
    seeds = range(block * COUNT // 6, (block + 1) * COUNT // 6)
    assert [digest(s) for s in seeds] == [expected[s] for s in seeds]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    DIGESTS.write_text(json.dumps([digest(s) for s in range(COUNT)], indent=0) + "\n")
