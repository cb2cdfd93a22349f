"""ETA accuracy per trace and setting, or projection speed (focused against the plain replay).

``accuracy`` simulates each trace of the chosen suites (``cpn simulate philly``'s:
``windows``, ``gavel``, ``gavel-unlabelled``) at each checkpointable share with
``--eta`` and prints one JSON document: per trace and setting, of the jobs that
waited over 10 minutes, how often the stated p20-p80 range held the actual start
(jobs with no range count as misses), the range's median width (hours, and as a
share of the actual wait), the stated (calibrated) point ETA's median relative
error, the raw projection's, and the run's average JCT (scheduling must not change
when ETAs do). Runs one simulation at a time.

    python bench/bench_eta.py accuracy --suites windows --checkpointable 0,0.5
    python bench/bench_eta.py accuracy --suites gavel,gavel-unlabelled --every 11cb48=1,6c71a0=40

``speed`` (the default when no mode is named) runs the trace under ``default`` with the
predictor, takes the snapshot of every ``--every``-th arrival instant where a new job
waits (what ``cpn simulate --eta`` projects), and times :func:`cpn.core.eta.project` on
each (CPU seconds, ``until`` the new jobs, as the simulator asks) with and without focus;
checks both agree.
Prints JSON.

    python bench/bench_eta.py speed --trace b436b2 --every 100

``scale`` times :func:`cpn.core.eta.project` on issue 22's fleet, built the way
``bench/bench_cycle.py`` builds it (10 member clusters x 1,000 8-GPU nodes, 4 GPU types
on every cluster, a running job on about two nodes in three: ~6,700 running jobs; plus
``--pending`` waiting jobs), once per placement method: CPU seconds per projection and
per projected cycle (each cycle one distinct instant the planner is called at), and a
digest of the projection (equal digests: equal projections, to compare two revisions).
No test bed.

    nice -n 10 python bench/bench_eta.py scale --pending 500 --methods greedy,milp
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from cpn.core.eta import Projection, project
from cpn.core.model import Snapshot
from cpn.core.presets import preset_policy
from cpn.sim.clusters import read_clusters
from cpn.sim.runner import simulate
from cpn.sim.trace import read_trace
from cpn.sim.world import PlanFn

DATA = Path(__file__).resolve().parents[1] / "operator" / "cpn" / "sim" / "data"


#: Issue 16's aims for the first ETAs of jobs that waited over 10 minutes.
AIM_COVERAGE = 0.6  # the p20-p80 range holds the actual start (about 60%: calibrated)
AIM_POINT_ERROR = 0.5  # median relative error of the stated point ETA (windows)
AIM_POINT_ERROR_GAVEL = 0.25  # the same on Gavel's traces (issue 6)


def figures(eta: Mapping[str, Any], *, aim_point: float = AIM_POINT_ERROR) -> dict[str, Any]:
    """The issue-16 figures of one run's ETA summary (:func:`cpn.sim.eta_accuracy.summary`).

    ``coverage`` counts jobs with no stated range (or no ETA) as misses;
    ``coverage_of_ranged`` is over the jobs that had a range.
    """
    waited = int(eta["waited"])
    rng = eta.get("range") or {}
    held = int(rng.get("held") or 0)
    calibrated = eta.get("calibrated") or {}
    point = calibrated.get("median_rel_error", eta.get("median_rel_error"))
    coverage = held / waited if waited else None
    return {
        "waited_over_10_min": waited,
        "with_range": int(rng.get("ranged") or 0),
        "coverage": None if coverage is None else round(coverage, 3),
        "coverage_of_ranged": rng.get("coverage"),
        "median_width_h": rng.get("median_width_h"),
        "median_width_rel": rng.get("median_width_rel"),
        "point_median_rel_error": point,
        "raw_median_rel_error": eta.get("median_rel_error"),
        "coverage_aim_met": None if coverage is None else coverage >= AIM_COVERAGE,
        "point_aim_met": None if point is None else point <= aim_point,
    }


def _every(text: str) -> tuple[int, dict[str, int]]:
    """``"N"`` or ``"N,trace=M,..."`` or ``"trace=M,..."`` -> (default N, per-trace overrides)."""
    default, per = 1, {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" in part:
            name, value = part.split("=", 1)
            per[name.strip()] = int(value)
        else:
            default = int(part)
    return default, per


def accuracy(argv: Sequence[str]) -> None:
    from cpn.sim import eta_accuracy, report
    from cpn.sim.compare import suite

    parser = argparse.ArgumentParser(prog="bench_eta.py accuracy")
    parser.add_argument("--suites", default="windows")
    parser.add_argument("--traces", default="", help="only these traces (names as in the suite)")
    parser.add_argument("--checkpointable", default="0,0.5")
    parser.add_argument("--policy", default="default")
    parser.add_argument("--estimator", default="predictor")
    parser.add_argument(
        "--every", default="1", help="project one job in N: N, or trace=N,... (by base name)"
    )
    parser.add_argument("--max-cycles", type=int, default=400)
    args = parser.parse_args(argv)
    default_every, per_every = _every(args.every)
    wanted = {t for t in args.traces.split(",") if t}
    runs: list[dict[str, Any]] = []
    for name in args.suites.split(","):
        for trace in suite(name):
            if wanted and trace.name not in wanted and trace.path.stem not in wanted:
                continue
            every = per_every.get(trace.path.stem, per_every.get(trace.name, default_every))
            for share in (float(s) for s in args.checkpointable.split(",")):
                started = time.perf_counter()
                result = simulate(
                    read_trace(trace.path),
                    read_clusters(trace.clusters),
                    preset_policy(args.policy),
                    estimator=args.estimator,
                    eta=True,
                    eta_every=every,
                    eta_max_cycles=args.max_cycles,
                    checkpointable=share,
                    unlabelled=trace.unlabelled,
                )
                eta = eta_accuracy.summary(result)
                gavel = name.startswith("gavel")
                aim = AIM_POINT_ERROR_GAVEL if gavel else AIM_POINT_ERROR
                row = {"trace": trace.name, "suite": name, "checkpointable": share}
                row |= {"eta_every": every, **figures(eta, aim_point=aim)}
                row["avg_jct_s"] = report.metrics(result)["avg_jct_s"]
                row["wall_s"] = round(time.perf_counter() - started, 1)
                runs.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print(
        json.dumps(
            {
                "policy": args.policy,
                "estimator": args.estimator,
                "max_cycles": args.max_cycles,
                "aims": {
                    "coverage": AIM_COVERAGE,
                    "point_median_rel_error": AIM_POINT_ERROR,
                    "point_median_rel_error_gavel": AIM_POINT_ERROR_GAVEL,
                },
                "runs": runs,
            },
            indent=1,
        )
    )


def scale(argv: Sequence[str]) -> None:
    import hashlib
    from dataclasses import replace

    from cpn.core import cycle
    from cpn.core.policy import QueuePolicy

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_cycle import snapshot as fleet

    parser = argparse.ArgumentParser(prog="bench_eta.py scale")
    parser.add_argument("--pending", type=int, default=500)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=1000, help="8-GPU nodes per cluster")
    parser.add_argument("--types", type=int, default=4, choices=[1, 2, 3, 4])
    parser.add_argument("--methods", default="greedy,milp")
    parser.add_argument("--max-cycles", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-renew", action="store_true", help="make each projected cycle's capacity anew"
    )
    parser.add_argument(
        "--busy", type=int, default=50, help="no GPU free now on all but every BUSY-th node"
    )
    args = parser.parse_args(argv)
    base = QueuePolicy()
    out: dict[str, Any] = {
        "clusters": args.clusters,
        "nodes": args.clusters * args.nodes,
        "max_cycles": args.max_cycles,
        "busy": args.busy,
        "renew": not args.no_renew,
    }
    # (a revision before the renewing capacity has no such argument)
    renew = {"renew": False} if args.no_renew else {}
    real = cycle.plan_cycle
    instants: set[float] = set()
    calls = 0

    def counted(snapshot: Snapshot, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        instants.add(snapshot.now_s)
        return real(snapshot, **kwargs)

    for method in args.methods.split(","):
        policy = replace(base, placement=replace(base.placement, method=method))
        snap = fleet(
            args.pending, args.seed, policy, (args.clusters, args.nodes, args.types), args.busy
        )
        # every running job ends later, one at a time over the next 20,000 s
        later = tuple(
            replace(r, predicted_end_s=snap.now_s + r.predicted_end_s) for r in snap.running
        )
        snap = replace(snap, running=later)
        instants.clear()
        calls = 0

        # project() reads cycle.plan_cycle when called: the counter stands in for it
        # (and is still "the" plan_cycle, so the focus applies as it would).
        cycle.plan_cycle = counted  # type: ignore[assignment]
        try:
            started = time.process_time()
            found = project(snap, max_cycles=args.max_cycles, **renew)
            cpu = time.process_time() - started
        finally:
            cycle.plan_cycle = real
        text = repr(sorted(found.items()))  # (floats' repr is exact)
        out[method] = {
            "pending": len(snap.pending),
            "running": len(snap.running),
            "projected": len(found),
            "cycles": len(instants),
            "plan_calls": calls,
            "cpu_s": round(cpu, 2),
            "cpu_s_per_cycle": round(cpu / max(1, len(instants)), 4),
            "digest": hashlib.sha256(text.encode()).hexdigest()[:16],
        }
        print(json.dumps({method: out[method]}), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


def main() -> None:
    argv = sys.argv[1:]
    if argv and argv[0] == "accuracy":
        accuracy(argv[1:])
        return
    if argv and argv[0] == "scale":
        scale(argv[1:])
        return
    if argv and argv[0] == "speed":
        argv = argv[1:]
    parser = argparse.ArgumentParser(prog="bench_eta.py speed")
    parser.add_argument("--trace", default="b436b2", help="Philly trace name")
    parser.add_argument("--every", type=int, default=100, help="time one projection in N")
    parser.add_argument("--max-cycles", type=int, default=2500)
    args = parser.parse_args(argv)
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
