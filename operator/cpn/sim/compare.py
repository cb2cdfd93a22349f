"""The README's comparison: ``fifo``, ``oracle``, ``las``, ``sjf`` and ``default`` on public traces.

Three suites of traces, each on its cluster file:

- ``gavel``: Gavel's five 2,000-job Philly-derived virtual-cluster traces (shipped in
  ``sim/data/philly``) on Gavel's simulated cluster (``sim/data/gavel-cluster.yaml``);
  every job names a model Gavel measured, so the predictor starts equal to the truth;
- ``gavel-unlabelled``: the same traces with every job's model hidden from the
  estimator (``--unlabelled``), as most real submissions are;
- ``windows``: four windows of the real Philly trace (``sim/data/philly-windows``),
  which carry no model at all, each on a cluster file sized to its load.

Each trace runs at each ``--checkpointable`` share (the share of jobs that checkpoint
and so may be preempted; the trace does not say). ``fifo`` and ``oracle`` take the true
runtimes; the others the ``--estimator`` (``predictor`` by default). A policy that never
preempts gives the same result at every share, so it runs once per trace.

Checks per trace and share, against the targets of ``TARGETS``:

- ``recovered``: ``default``'s share of oracle's average-JCT gain over fifo,
  ``(fifo - default) / (fifo - oracle)``;
- ``max_wait_ok``: ``default``'s longest wait is no longer than fifo's;
- ``all_finished``: every admitted job finished under every policy (infeasible ones are
  counted apart).

``cpn simulate philly [--suites gavel,gavel-unlabelled,windows] [--traces a,b]
[--checkpointable 0,0.5,1] [--policies fifo,oracle,las,sjf,default] [--estimator E]
[--jobs N] [--out DIR] [--json]``; exit status 0 when every check passes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
VCS = ("11cb48", "6214e9", "6c71a0", "b436b2", "ee9e8c")
WINDOWS = ("sep", "nov-a", "nov-b", "nov-c")
SUITES = ("gavel", "gavel-unlabelled", "windows")
POLICIES = ("fifo", "oracle", "las", "sjf", "default")
#: least share of oracle's gain ``default`` must recover, by checkpointable share (issue 16:
#: 70% with no job checkpointing, 90% with half of them; no target stated for other shares)
TARGETS: dict[float, float] = {0.0: 0.7, 0.5: 0.9}
TRUE_RUNTIMES = ("fifo", "oracle")  # the baselines know every job's runtime


@dataclass(frozen=True, slots=True)
class Trace:
    """One trace of a suite: where its jobs and its clusters are, and what the estimator sees."""

    name: str
    path: Path
    clusters: Path
    unlabelled: bool = False


def suite(name: str) -> list[Trace]:
    """The traces of suite ``name``."""
    gavel = DATA / "gavel-cluster.yaml"
    if name == "gavel":
        return [Trace(vc, DATA / "philly" / f"{vc}.csv", gavel) for vc in VCS]
    if name == "gavel-unlabelled":
        return [Trace(f"{vc}-unlabelled", DATA / "philly" / f"{vc}.csv", gavel, True) for vc in VCS]
    if name == "windows":
        root = DATA / "philly-windows"
        return [
            Trace(f"philly-{w}", root / f"philly-{w}.csv", root / f"clusters-{w}.yaml")
            for w in WINDOWS
        ]
    raise ValueError(f"unknown suite {name!r}; known: {', '.join(SUITES)}")


def verdict(rows: dict[str, dict[str, Any]], target: float | None = 0.8) -> dict[str, Any]:
    """The three checks of one trace from its ``{policy: metrics}`` (``target``: the least
    share of oracle's gain ``default`` must recover; None: reported, not checked)."""
    fifo, oracle, cpn = rows["fifo"], rows["oracle"], rows["default"]
    gain = fifo["avg_jct_s"] - oracle["avg_jct_s"]
    recovered = (fifo["avg_jct_s"] - cpn["avg_jct_s"]) / gain if gain > 0 else None
    return {
        "recovered": None if recovered is None else round(recovered, 3),
        "recovered_ok": recovered is None or target is None or recovered >= target,
        "max_wait_ok": cpn["max_wait_s"] <= fifo["max_wait_s"],
        "all_finished": all(m["finished"] == m["jobs"] for m in rows.values()),
    }


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f}"


def markdown(results: dict[str, dict[float, dict[str, Any]]], policies: Sequence[str]) -> str:
    """README-ready tables, one per checkpointable share: per trace and policy the average
    JCT, p99 and longest wait (hours), preemptions and GPU-hours they lost; then the checks."""
    from cpn.core.presets import preset_policy

    shares = sorted({share for entry in results.values() for share in entry})
    out: list[str] = []
    for share in shares:
        head = ["trace", "jobs"]
        head += [f"{p}: avg JCT / p99 wait / max wait (h)" for p in policies]
        preempting = [p for p in policies if preset_policy(p).preemption.enabled]
        head += [f"{p}: preemptions / GPU-h lost" for p in preempting]
        head += ["recovered", "max wait ≤ fifo", "all finished"]
        if len(shares) > 1 or share:
            out.append(f"Checkpointable share {share:g}:\n")
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name, entry in results.items():
            if share not in entry:
                continue
            rows, check = entry[share]["metrics"], entry[share]["verdict"]
            cells = [name, str(rows["default"]["jobs"])]
            for p in policies:
                m = rows[p]
                cells.append(
                    f"{_h(m['avg_jct_s'])} / {_h(m['p99_wait_s'])} / {_h(m['max_wait_s'])}"
                )
            for p in preempting:
                cells.append(
                    f"{rows[p].get('preemptions', 0)} / {rows[p].get('lost_gpu_h', 0.0):g}"
                )
            rec = check["recovered"]
            mark = "" if check["recovered_ok"] else " (below target)"
            cells.append("n/a" if rec is None else f"{rec:.0%}{mark}")
            cells.append("yes" if check["max_wait_ok"] else "NO")
            cells.append("yes" if check["all_finished"] else "NO")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def _run(unit: tuple[Trace, str, float, str, int, bool]) -> tuple[str, str, float, Any]:
    """One simulation (in a worker process): metrics, and the result when reports are wanted."""
    from cpn.core.presets import preset_policy
    from cpn.sim import report
    from cpn.sim.clusters import read_clusters
    from cpn.sim.runner import simulate
    from cpn.sim.trace import read_trace

    trace, policy, share, estimator, seed, keep = unit
    result = simulate(
        read_trace(trace.path),
        read_clusters(trace.clusters),
        preset_policy(policy),
        name=policy,
        estimator="oracle" if policy in TRUE_RUNTIMES else estimator,
        seed=seed,
        checkpointable=share,
        unlabelled=trace.unlabelled,
    )
    return trace.name, policy, share, (report.metrics(result), result if keep else None)


def main(argv: Sequence[str]) -> int:
    """``cpn simulate philly``: run the comparison, print the tables (or JSON)."""
    p = argparse.ArgumentParser(prog="cpn simulate philly", description=__doc__.splitlines()[0])
    p.add_argument(
        "--suites", default=",".join(SUITES), help="comma-separated: " + ", ".join(SUITES)
    )
    p.add_argument("--traces", default="", help="only these traces (names as in the table)")
    p.add_argument("--checkpointable", default="0,0.5,1", help="comma-separated shares in [0, 1]")
    p.add_argument(
        "--policies", default=",".join(POLICIES), help="fifo, oracle and default always run"
    )
    p.add_argument(
        "--estimator", default="predictor", help="estimator of every policy but fifo/oracle"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="simulations at once")
    p.add_argument("--out", help="directory for per-trace metrics, job CSVs and plots")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(list(argv))

    from cpn.core.presets import preset_policy

    try:
        traces = [t for s in args.suites.split(",") if s for t in suite(s)]
        shares = sorted({float(x) for x in args.checkpointable.split(",") if x})
    except ValueError as exc:
        p.error(str(exc))
    if any(not 0 <= s <= 1 for s in shares) or not shares:
        p.error("--checkpointable: shares in [0, 1], at least one")
    wanted = {t for t in args.traces.split(",") if t}
    unknown = wanted - {t.name for t in traces}
    if unknown:
        p.error(f"--traces: unknown {sorted(unknown)}; known: {', '.join(t.name for t in traces)}")
    traces = [t for t in traces if not wanted or t.name in wanted]
    policies = list(dict.fromkeys(["fifo", "oracle", *args.policies.split(","), "default"]))
    policies = [x for x in policies if x]
    for name in policies:
        try:
            preset_policy(name)
        except (KeyError, ValueError) as exc:
            p.error(f"--policies: {exc}")
    # A policy that never preempts does the same at every share: run it once.
    preempts = {name: preset_policy(name).preemption.enabled for name in policies}
    units = [
        (trace, name, share, args.estimator, args.seed, bool(args.out))
        for trace in traces
        for name in policies
        for share in (shares if preempts[name] else shares[:1])
    ]
    done: dict[tuple[str, str, float], Any] = {}
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        for name, policy, share, value in pool.map(_run, units):
            done[(name, policy, share)] = value
            if not args.json:
                print(f"{name} {policy} (checkpointable {share:g}): done", file=sys.stderr)

    results: dict[str, dict[float, dict[str, Any]]] = {}
    for trace in traces:
        per_share: dict[float, dict[str, Any]] = {}
        for share in shares:
            runs = {
                policy: done[(trace.name, policy, share if preempts[policy] else shares[0])]
                for policy in policies
            }
            rows = {policy: value[0] for policy, value in runs.items()}
            per_share[share] = {"metrics": rows, "verdict": verdict(rows, TARGETS.get(share))}
            if args.out:
                _write_reports(Path(args.out), trace, share, runs, argv)
        results[trace.name] = per_share
    ok = all(
        v["verdict"]["recovered_ok"]
        and v["verdict"]["max_wait_ok"]
        and v["verdict"]["all_finished"]
        for entry in results.values()
        for v in entry.values()
    )
    table = markdown(results, policies)
    if args.out:
        (Path(args.out) / "philly.md").write_text(table + "\n", encoding="utf-8")
    if args.json:
        doc = {
            "ok": ok,
            "targets": {f"{k:g}": v for k, v in TARGETS.items()},
            "traces": {
                name: {f"{share:g}": v for share, v in entry.items()}
                for name, entry in results.items()
            },
        }
        print(json.dumps(doc))
    else:
        print(table)
        print(f"\nall checks {'pass' if ok else 'DO NOT pass'}")
    return 0 if ok else 1


def _write_reports(
    root: Path, trace: Trace, share: float, runs: dict[str, Any], argv: Sequence[str]
) -> None:
    """Per-trace metrics, job CSVs, plots and a Markdown report under ``root``."""
    from cpn.core.presets import preset_policy
    from cpn.sim import report

    out = root / (trace.name if share == 0 else f"{trace.name}-ckpt{share:g}")
    out.mkdir(parents=True, exist_ok=True)
    rows = {name: value[0] for name, value in runs.items()}
    (out / "metrics.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    results = {name: value[1] for name, value in runs.items()}
    for name, result in results.items():
        report.write_jobs_csv(result, out / f"jobs-{name}.csv")
    report.plot(results, out)
    report.write_markdown(
        out,
        rows,
        command=shlex.join(["cpn", "simulate", "philly", *argv]),
        trace=str(trace.path),
        clusters=str(trace.clusters),
        policies={n: report.describe_policy(preset_policy(n)) for n in runs},
        title=f"cpn simulation report: {trace.name}, checkpointable share {share:g}",
    )
