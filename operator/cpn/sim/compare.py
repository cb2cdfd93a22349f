"""The Philly comparison of issue 2's "Done when": ``default`` against ``fifo`` and ``oracle``.

For each of Gavel's five 2,000-job Philly-derived virtual-cluster traces (shipped in
``sim/data/philly``) on Gavel's simulated cluster (``sim/data/gavel-cluster.yaml``),
run ``fifo``, ``oracle`` and ``default`` (with the chosen estimator, ``predictor`` by
default) and check:

- ``recovered``: the share of oracle's average-JCT reduction over fifo that default
  achieves, (fifo - default) / (fifo - oracle); the target is at least 0.8;
- ``max_wait_ok``: default's longest wait is no longer than fifo's;
- ``all_finished``: every admitted job finished (infeasible ones are counted apart).

``cpn simulate philly [--vcs a,b] [--estimator predictor] [--extra las,gavel] [--out DIR] [--json]``
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
VCS = ("11cb48", "6214e9", "6c71a0", "b436b2", "ee9e8c")
TARGET_RECOVERED = 0.8


def verdict(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The three checks of one trace from its ``{policy: metrics}``."""
    fifo, oracle, cpn = rows["fifo"], rows["oracle"], rows["default"]
    gain = fifo["avg_jct_s"] - oracle["avg_jct_s"]
    recovered = (fifo["avg_jct_s"] - cpn["avg_jct_s"]) / gain if gain > 0 else None
    return {
        "recovered": None if recovered is None else round(recovered, 3),
        "recovered_ok": recovered is None or recovered >= TARGET_RECOVERED,
        "max_wait_ok": cpn["max_wait_s"] <= fifo["max_wait_s"],
        "all_finished": all(m["finished"] == m["jobs"] for m in rows.values()),
    }


def markdown(results: dict[str, dict[str, Any]], policies: Sequence[str]) -> str:
    """A README-ready table: average JCT (h) and max wait (h) per policy, then the checks."""
    head = ["trace", "jobs"]
    head += [f"{p} avg JCT h" for p in policies]
    head += [f"{p} max wait h" for p in ("fifo", "default")]
    head += ["recovered", "max wait ok", "all finished"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for vc, entry in results.items():
        rows, check = entry["metrics"], entry["verdict"]
        cells = [vc, str(rows["default"]["jobs"])]
        cells += [f"{rows[p]['avg_jct_s'] / 3600:.2f}" for p in policies]
        cells += [f"{rows[p]['max_wait_s'] / 3600:.2f}" for p in ("fifo", "default")]
        rec = check["recovered"]
        cells.append("n/a" if rec is None else f"{rec:.0%}")
        cells.append("yes" if check["max_wait_ok"] else "NO")
        cells.append("yes" if check["all_finished"] else "NO")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """``cpn simulate philly``: run the comparison, print the table (or JSON)."""
    p = argparse.ArgumentParser(prog="cpn simulate philly", description=__doc__.splitlines()[0])
    p.add_argument("--vcs", default=",".join(VCS), help="comma-separated VC ids")
    p.add_argument("--estimator", default="predictor", help="estimator of 'default'")
    p.add_argument("--extra", default="", help="more policies to show, e.g. sjf,las,gavel")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="directory for per-VC metrics, job CSVs and plots")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(list(argv))

    from cpn.core.presets import preset_policy
    from cpn.sim import report
    from cpn.sim.clusters import read_clusters
    from cpn.sim.runner import simulate
    from cpn.sim.trace import read_trace
    from cpn.sim.world import SimResult

    clusters = read_clusters(DATA / "gavel-cluster.yaml")
    policies = ["fifo", "oracle", "default", *[x for x in args.extra.split(",") if x]]
    results: dict[str, dict[str, Any]] = {}
    for vc in [v for v in args.vcs.split(",") if v]:
        trace = read_trace(DATA / "philly" / f"{vc}.csv")
        runs: dict[str, SimResult] = {}
        for name in policies:
            runs[name] = simulate(
                trace,
                clusters,
                preset_policy(name),
                name=name,
                estimator=args.estimator if name == "default" else "oracle",
                seed=args.seed,
            )
            if not args.json:
                print(f"{vc} {name}: done in {runs[name].wall_s:.1f} s", file=sys.stderr)
        rows = {name: report.metrics(r) for name, r in runs.items()}
        results[vc] = {"metrics": rows, "verdict": verdict(rows)}
        if args.out:
            out = Path(args.out) / vc
            out.mkdir(parents=True, exist_ok=True)
            (out / "metrics.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
            for name, result in runs.items():
                report.write_jobs_csv(result, out / f"jobs-{name}.csv")
            report.plot(runs, out)
            report.write_markdown(
                out,
                rows,
                command=shlex.join(["cpn", "simulate", "philly", *argv]),
                trace=str(DATA / "philly" / f"{vc}.csv"),
                clusters=str(DATA / "gavel-cluster.yaml"),
                policies={n: report.describe_policy(preset_policy(n)) for n in policies},
                title=f"cpn simulation report: Philly trace {vc}",
            )
    ok = all(
        r["verdict"]["recovered_ok"]
        and r["verdict"]["max_wait_ok"]
        and r["verdict"]["all_finished"]
        for r in results.values()
    )
    if args.out:
        summary = Path(args.out) / "philly.md"
        summary.write_text(markdown(results, policies) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps({"ok": ok, "traces": results}))
    else:
        print(markdown(results, policies))
        print(f"\nall checks {'pass' if ok else 'DO NOT pass'}")
    return 0 if ok else 1
