"""ETA projection speed: focused (default) against the plain replay, on a Philly trace's queues.

Runs the trace under ``default`` with the predictor, takes the snapshot of every
``--every``-th arrival instant where a new job waits (what ``cpn simulate --eta``
projects), and times :func:`cpn.core.eta.project` on each (CPU seconds, ``until``
the new jobs, as the simulator asks) with and without focus; checks both agree.
Prints JSON.

    python bench/bench_eta.py --trace b436b2 --every 100
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Collection, Mapping
from pathlib import Path

from cpn.core.eta import Projection, project
from cpn.core.model import Snapshot
from cpn.core.presets import preset_policy
from cpn.sim.clusters import read_clusters
from cpn.sim.runner import simulate
from cpn.sim.trace import read_trace
from cpn.sim.world import PlanFn

DATA = Path(__file__).resolve().parents[1] / "operator" / "cpn" / "sim" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="b436b2", help="Philly trace name")
    parser.add_argument("--every", type=int, default=100, help="time one projection in N")
    parser.add_argument("--max-cycles", type=int, default=2500)
    args = parser.parse_args()
    trace = read_trace(DATA / "philly" / f"{args.trace}.csv")
    clusters = read_clusters(DATA / "gavel-cluster.yaml")
    taken: list[tuple[Snapshot, tuple[str, ...]]] = []
    calls = 0

    def capture(
        snapshot: Snapshot, max_cycles: int, plan: PlanFn, until: Collection[str]
    ) -> Mapping[str, Projection]:
        nonlocal calls
        calls += 1
        if calls % args.every == 0:
            taken.append((snapshot, tuple(until)))
        return {}

    from cpn.sim import world

    real = world._default_project
    world._default_project = capture  # type: ignore[assignment]
    try:
        simulate(trace, clusters, preset_policy("default"), estimator="predictor", eta=True)
    finally:
        world._default_project = real
    rows = []
    for snapshot, until in taken:
        timing = {}
        results = []
        for focus in (True, False):
            started = time.process_time()
            results.append(project(snapshot, max_cycles=args.max_cycles, until=until, focus=focus))
            timing[focus] = time.process_time() - started
        rows.append(
            {
                "pending": len(snapshot.pending),
                "focus_cpu_s": round(timing[True], 3),
                "plain_cpu_s": round(timing[False], 3),
                "same": results[0] == results[1],
            }
        )
    print(
        json.dumps(
            {
                "trace": args.trace,
                "projections": calls,
                "timed": len(rows),
                "focus_cpu_s": round(sum(r["focus_cpu_s"] for r in rows), 2),
                "plain_cpu_s": round(sum(r["plain_cpu_s"] for r in rows), 2),
                "all_same": all(r["same"] for r in rows),
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
