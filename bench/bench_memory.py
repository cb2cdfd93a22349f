"""Benchmark: operator memory (and whole-cycle time) with many AIJobs on the hub.

On the bench test bed (2,160 fake GPUs): ``--n`` AIJobs of 8 GPUs each (1 h simulated
run) are created on the hub, then ``cpn run`` starts and takes them all in; 270 fit and
run, the rest wait (the realistic case). After the operator has caught up, its RSS is
sampled for ``--steady-s`` seconds. Prints steady RSS (median), peak RSS (VmHWM), how
many AIJobs are pending and running, and the cycles seen meanwhile: plan_cycle wall time
(cpn_cycle_duration_seconds on /metrics) and the gap between cycle starts (whole cycle:
snapshot, plan, dispatch, status writes, under kicks).

``--finished F`` also puts F AIJobs that already Succeeded on the hub (created, then
their status written as the operator writes a finished job's), which the operator lists
and learns from at start: issue 22's hub of 100,000 AIJobs is ``--n 10000 --finished
90000``. ``--restart`` then stops the operator and starts a new one, and reports the time
from its start to its first cycle holding every waiting AIJob, and its peak RSS, beside
the time the hub takes to serve the same paged list to a client that only reads it (the
floor: the operator takes each page while the hub serves the next).

    CPN_TESTBED_DIR=... CPN_TESTBED_PORT_BASE=... python bench/bench_memory.py [--n 10000]
        [--finished 90000 --restart]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchbed import (
    POLICY,
    Operator,
    aijob,
    bed,
    bed_down,
    machine,
    operator_cycles,
    percentile,
    pyspy,
    wait_until,
)
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.adapters.kube import LIST_PAGE, client_from_kubeconfig
from cpn.api.status import rfc3339
from cpn.cli.devbed import bootstrap_testbed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per AIJob")
    parser.add_argument("--steady-s", type=float, default=60.0)
    parser.add_argument("--finished", type=int, default=0, help="Succeeded AIJobs on the hub too")
    parser.add_argument("--restart", action="store_true", help="time a restart after steady")
    parser.add_argument("--keep-bed", action="store_true")
    parser.add_argument("--profile", type=Path, help="py-spy output (collapsed stacks)")
    parser.add_argument("--profile-s", type=int, default=120)
    parser.add_argument("--json", action="store_true", help="(output is always JSON)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="cpn-bench-memory-"))
    out: dict[str, Any] = {"bench": "memory", "n": args.n, "gpus_each": args.gpus}
    out["finished"] = args.finished
    tb = bed(args.keep_bed)
    op = None
    spy = None
    try:
        bootstrap_testbed(tb, policy_yaml=POLICY)
        custom = client.CustomObjectsApi(client_from_kubeconfig(tb.kubeconfig("hub").read_text()))
        core = client.CoreV1Api(client_from_kubeconfig(tb.kubeconfig("hub").read_text()))
        namespaces = [f"mem-{i}" for i in range(10)]  # ten tenants
        reuse = False
        for name in namespaces:
            try:
                core.create_namespace({"metadata": {"name": name}})
            except ApiException as err:
                if err.status != 409:
                    raise
                reuse = True  # a kept bed from an earlier run: its AIJobs are there
        t0 = time.monotonic()

        def create(i: int) -> None:
            custom.create_namespaced_custom_object(
                "cpn.io",
                "v1alpha1",
                namespaces[i % len(namespaces)],
                "aijobs",
                aijob(f"m{i:05d}", gpus=args.gpus),
            )

        def create_finished(i: int) -> None:
            namespace = namespaces[i % len(namespaces)]
            made = custom.create_namespaced_custom_object(
                "cpn.io", "v1alpha1", namespace, "aijobs", aijob(f"f{i:06d}", gpus=args.gpus)
            )
            custom.patch_namespaced_custom_object_status(
                "cpn.io",
                "v1alpha1",
                namespace,
                "aijobs",
                made["metadata"]["name"],
                {"status": finished_status(i, tb.members)},
            )

        if reuse:
            out["reused_aijobs_of_an_earlier_run"] = True
        else:
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(create, range(args.n)))
                list(pool.map(create_finished, range(args.finished)))
            out["hub_create_s"] = round(time.monotonic() - t0, 1)

        def caught_up(op: Operator) -> bool:
            # The operator's own count (its log's cycle lines): listing 10,000 AIJobs with
            # their status would load the hub more than the operator does.
            cycles = operator_cycles(op.log)
            last = cycles[-1] if cycles else {}
            return bool(last) and last["pending"] + last["running"] >= args.n

        started = time.monotonic()
        op = first = Operator(tb, folder / "operator.log")
        spy = pyspy(op.proc.pid, args.profile_s, args.profile) if args.profile else None
        wait_until(
            lambda: caught_up(first),
            timeout_s=1800,
            what="every AIJob queued or running",
            every_s=2,
        )
        out["operator_caught_up_s"] = round(time.monotonic() - started, 1)
        cycles_before = len(operator_cycles(op.log))
        metrics_before = op.metrics()
        steady: list[float] = []
        end = time.monotonic() + args.steady_s
        while time.monotonic() < end:
            steady.append(op.rss_mib()[0])
            time.sleep(1.0)
        rss, hwm = op.rss_mib()
        metrics_after = op.metrics()
        cycles = operator_cycles(op.log)
        out["aijobs"] = {"pending": cycles[-1]["pending"], "running": cycles[-1]["running"]}
        out["operator_log_warnings"] = sum(
            1 for line in op.log.read_text(errors="replace").splitlines() if "not written" in line
        )
        out["operator_rss_mib"] = {
            "steady_median": round(statistics.median(steady), 1),
            "steady_max": round(max(steady), 1),
            "peak_vmhwm": round(hwm, 1),
        }
        out["operator_peak_mb"] = round(hwm * 2**20 / 1e6, 1)  # the aim's unit (10^6 bytes)
        out["aim"] = "under 300 MB"
        name = "cpn_cycle_duration_seconds"
        count = metrics_after.get(f"{name}_count", 0) - metrics_before.get(f"{name}_count", 0)
        total = metrics_after.get(f"{name}_sum", 0) - metrics_before.get(f"{name}_sum", 0)
        walls = [c["wall_s"] for c in cycles[cycles_before:]]
        out["cycles_while_steady"] = {
            "count": int(count),
            "plan_cycle_mean_s": round(total / count, 3) if count else None,
            "plan_cycle_p50_s": round(percentile(walls, 0.5), 3) if walls else None,
            "plan_cycle_max_s": round(max(walls), 3) if walls else None,
            "pending_last": cycles[-1].get("pending") if cycles else None,
            "whole_cycle_mean_s": round(args.steady_s / count, 3) if count else None,
            "status_writes": int(
                metrics_after.get("cpn_status_writes_total", 0)
                - metrics_before.get("cpn_status_writes_total", 0)
            ),
        }
        whole = [k for k in metrics_after if k.startswith("cpn_cycle_total_seconds")]
        if whole:
            c = metrics_after.get("cpn_cycle_total_seconds_count", 0) - metrics_before.get(
                "cpn_cycle_total_seconds_count", 0
            )
            s = metrics_after.get("cpn_cycle_total_seconds_sum", 0) - metrics_before.get(
                "cpn_cycle_total_seconds_sum", 0
            )
            out["cycles_while_steady"]["whole_cycle_mean_s"] = round(s / c, 3) if c else None
        out["operator_rss_mib"]["at_end"] = round(rss, 1)
        if spy is not None:
            spy.wait()
        if args.restart:
            op.stop()
            list_alone_s = hub_list_s(custom)
            started = time.monotonic()
            op = second = Operator(tb, folder / "operator-2.log")
            wait_until(
                lambda: caught_up(second), timeout_s=1800, what="the restarted operator's cycle"
            )
            out["restart"] = {
                "to_first_full_cycle_s": round(time.monotonic() - started, 1),
                # the same paged list of every AIJob with nothing else running: the floor
                "hub_list_alone_s": round(list_alone_s, 3),
                "peak_rss_mib": round(second.rss_mib()[1], 1),
            }
    finally:
        if op is not None:
            op.stop()
        bed_down(tb)
    out["machine"] = machine()
    print(json.dumps(out))
    return 0


def hub_list_s(custom: Any) -> float:
    """Seconds to list every AIJob of the hub in the operator's pages, bodies not parsed."""
    started = time.monotonic()
    token = None
    while True:
        response = custom.list_cluster_custom_object(
            "cpn.io",
            "v1alpha1",
            "aijobs",
            limit=LIST_PAGE,
            _continue=token,
            _preload_content=False,
            _request_timeout=120,
        )
        token = json.loads(response.data)["metadata"].get("continue")
        if not token:
            return time.monotonic() - started


def finished_status(i: int, members: Sequence[str]) -> dict[str, Any]:
    """The status the operator leaves on an AIJob that Succeeded (runtimes vary by job)."""
    gpu = ("A100-80GB", "V100-32GB")[i % 2]
    actual = 1800.0 + (i * 37) % 3600
    end = time.time() - 86400 + i % 3600
    return {
        "phase": "Succeeded",
        "attempts": 1,
        "cluster": members[i % len(members)],
        "gpuType": gpu,
        "startTime": rfc3339(end - actual),
        "completionTime": rfc3339(end),
        "actualRuntimeSeconds": actual,
        "predictedRuntimeSeconds": {gpu: actual * 0.9},
    }


if __name__ == "__main__":
    raise SystemExit(main())
