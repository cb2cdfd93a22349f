"""Benchmark: cpn on a bed of many member clusters with many KWOK nodes each (issue 22:
10 members x 1,000 nodes, or the largest the machine holds).

The bed (``CPN_TESTBED_DIR``/``CPN_TESTBED_PORT_BASE``; it needs (members + 1) x 10
ports) is laid out by ``benchbed.scale_layout``: ``--members`` members of ``--nodes``
fake nodes with 8 GPUs each, two of four GPU types per member, no GPU metrics stack
(the operator then schedules from the API's accounting, as in the other benches). A bed
already running there is used as it is (its own layout is reported). Measured, in order:

- ``bed``: seconds to bring the bed up (every node Ready), its layout;
- ``startup``: the members are registered with cpn (``bootstrap``), ``cpn run`` starts;
  seconds from its process start to /readyz and to the first cycle after which
  ``cpn_gpus_total`` holds every member's GPUs (every node of every member listed); its
  RSS then;
- ``dispatch``: ``--jobs`` one-GPU AIJobs (1 h simulated run, all fit) created by 16
  client threads; seconds from the first create to the last member Job seen by a watch
  on the members (``benchbed.dispatch``, as bench_dispatch.py measures it); plan_cycle
  wall time of the cycles that started them;
- ``cycles``: ``--waiting`` more AIJobs that ask for K80 GPUs, which no member has, so they
  stay waiting and every cycle orders and tries them; over ``--steady-s`` seconds with
  all of them waiting: plan_cycle wall time (the operator's ``cycle`` log lines) and the
  whole cycle (``cpn_cycle_total_seconds`` on /metrics, bucket bounds);
- ``processes``: per kind of process (``members/kube-apiserver`` sums the members'), how
  many, resident memory and CPU seconds since they started; the machine's available
  memory and load average with everything up.

    CPN_TESTBED_DIR=/tmp/bed-scale CPN_TESTBED_PORT_BASE=25400 \\
        python bench/bench_scale.py --members 10 --nodes 1000 --jobs 1000 --waiting 1000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from benchbed import (
    Operator,
    aijob,
    bed,
    bed_down,
    dispatch,
    gpus_on_bed,
    machine,
    memory_available_gib,
    operator_cycles,
    percentile,
    process_age_s,
    process_kinds,
    pyspy,
    scale_layout,
    wait_until,
)

from testbed.bed import DEFAULT_STATE_DIR

GPUS_TOTAL = re.compile(r'^cpn_gpus_total\{.*cluster="([^"]+)"')


def member_gpus(metrics: dict[str, float]) -> dict[str, float]:
    """GPUs per member as the operator's ``cpn_gpus_total`` (all GPU types summed)."""
    out: dict[str, float] = {}
    for name, value in metrics.items():
        m = GPUS_TOTAL.match(name)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def cycle_total(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Whole cycles between two /metrics readings: count, mean and the bucket bound under
    which 50 % and 99 % of them ended (``cpn_cycle_total_seconds``)."""
    name = "cpn_cycle_total_seconds"
    count = after.get(f"{name}_count", 0) - before.get(f"{name}_count", 0)
    total = after.get(f"{name}_sum", 0) - before.get(f"{name}_sum", 0)
    buckets = []
    for key, value in after.items():
        m = re.match(rf'^{name}_bucket\{{le="([^"]+)"\}}$', key)
        if m:
            buckets.append((float(m.group(1)), value - before.get(key, 0)))
    buckets.sort()
    out: dict[str, Any] = {
        "cycles": int(count),
        "mean_s": round(total / count, 3) if count else None,
    }
    for q in (50, 99):
        out[f"p{q}_at_most_s"] = next(
            (bound for bound, seen in buckets if count and seen >= count * q / 100), None
        )
    return out


def wall_figures(cycles: list[dict[str, float]]) -> dict[str, Any]:
    """plan_cycle wall time of the given ``cycle`` log lines."""
    walls = [float(c["wall_s"]) for c in cycles]
    return {
        "cycles": len(walls),
        "p50_s": round(percentile(walls, 0.5), 4) if walls else None,
        "p99_s": round(percentile(walls, 0.99), 4) if walls else None,
        "max_s": round(max(walls), 4) if walls else None,
    }


def waiting_aijob(name: str) -> dict[str, Any]:
    """An AIJob that waits for good: it asks for a GPU type no member has."""
    body = aijob(name)
    body["spec"]["resources"]["gpuTypes"] = ["K80"]
    return body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=1000, help="fake nodes per member")
    parser.add_argument("--jobs", type=int, default=1000, help="AIJobs dispatched at once")
    parser.add_argument("--waiting", type=int, default=1000, help="AIJobs that keep waiting")
    parser.add_argument("--steady-s", type=float, default=60.0, help="cycle sampling time")
    parser.add_argument("--workers", type=int, default=16, help="client threads")
    parser.add_argument("--up-timeout-s", type=float, default=1800.0)
    parser.add_argument("--keep-bed", action="store_true", help="leave the bed running")
    parser.add_argument("--profile", type=Path, help="py-spy of the operator in the dispatch")
    parser.add_argument("--profile-s", type=int, default=120)
    parser.add_argument("--json", action="store_true", help="(output is always JSON)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="cpn-bench-scale-"))
    log = folder / "operator.log"
    state_dir = Path(os.environ.get("CPN_TESTBED_DIR") or DEFAULT_STATE_DIR)
    state_dir.mkdir(parents=True, exist_ok=True)
    layout = state_dir / "scale-nodes.yaml"
    if not layout.exists() or not _bed_running():
        layout.write_text(yaml.safe_dump(scale_layout(args.members, args.nodes), sort_keys=False))
    out: dict[str, Any] = {"bench": "scale", "machine_before": machine()}
    out["machine_before"]["memory_available_gib"] = memory_available_gib()
    tb = bed(args.keep_bed, layout, timeout_s=args.up_timeout_s)
    op = None
    try:
        expected = {c.name: sum(n.gpus for n in c.nodes) for c in tb.spec.members}
        out["bed"] = {
            "members": len(tb.spec.members),
            "nodes": sum(len(c.nodes) for c in tb.spec.members),
            "gpus": gpus_on_bed(tb),
            "gpu_types": sorted({n.gpu_model.key for c in tb.spec.members for n in c.nodes}),
            "up_s": tb.up_s,  # type: ignore[attr-defined]
            "nodes_file": str(tb.nodes_file),
        }
        out["processes_bed_only"] = process_kinds(tb)

        op = Operator(tb, log)
        ready_s = process_age_s(op.proc.pid)

        def every_member_known() -> bool:
            metrics = op.metrics()
            known = member_gpus(metrics)
            return metrics.get("cpn_cycles_total", 0) >= 1 and all(
                known.get(m, 0) >= gpus for m, gpus in expected.items()
            )

        wait_until(every_member_known, timeout_s=900, what="every member's GPUs in a cycle")
        rss, _ = op.rss_mib()
        out["startup"] = {
            "to_ready_s": round(ready_s, 2),
            "to_first_cycle_all_members_s": round(process_age_s(op.proc.pid), 2),
            "operator_rss_mib": round(rss, 1),
        }

        before_dispatch = len(operator_cycles(log))
        if args.profile:
            pyspy(op.proc.pid, args.profile_s, args.profile)
        run = dispatch(op, [aijob(f"j{i:05d}") for i in range(args.jobs)], workers=args.workers)
        out["dispatch"] = {"jobs": args.jobs, "dispatched": len(run.uids), **run.figures}
        # the cycles that started some of them, with the most that waited in one of them
        starting = [c for c in operator_cycles(log)[before_dispatch:] if c["starts"] > 0]
        out["dispatch"]["plan_cycle"] = {
            **wall_figures(starting),
            "most_pending": int(max((c["pending"] for c in starting), default=0)),
        }
        rss, _ = op.rss_mib()
        out["dispatch"]["operator_rss_mib"] = round(rss, 1)

        namespace = op.namespace("wait")
        op.create_many(
            namespace,
            [waiting_aijob(f"w{i:05d}") for i in range(args.waiting)],
            workers=args.workers,
        )

        def all_waiting() -> bool:
            last = operator_cycles(log)[-1:]
            return bool(last) and last[0]["pending"] >= args.waiting

        wait_until(all_waiting, timeout_s=600, what=f"{args.waiting} AIJobs waiting in a cycle")
        seen = len(operator_cycles(log))
        before = op.metrics()
        time.sleep(args.steady_s)  # the figure is what the operator does in this time
        after = op.metrics()
        sampled = [c for c in operator_cycles(log)[seen:] if c["pending"] >= args.waiting]
        rss, hwm = op.rss_mib()
        out["cycles"] = {
            "waiting": args.waiting,
            "running": int(sampled[-1]["running"]) if sampled else None,
            "steady_s": args.steady_s,
            "plan_cycle": wall_figures(sampled),
            "whole_cycle": cycle_total(before, after),
            "operator_rss_mib": round(rss, 1),
            "operator_peak_rss_mib": round(hwm, 1),
        }
        out["processes"] = process_kinds(tb, op.proc.pid)
        out["processes_rss_gib"] = round(
            sum(row["rss_mib"] for row in out["processes"].values()) / 1024, 2
        )
        out["machine"] = machine()
        out["machine"]["memory_available_gib"] = memory_available_gib()
    finally:
        if op is not None:
            op.stop()
        bed_down(tb)
    out["operator_log"] = str(log)
    print(json.dumps(out))
    return 0


def _bed_running() -> bool:
    from testbed.bed import Testbed

    return Testbed().status().any_running


if __name__ == "__main__":
    raise SystemExit(main())
