"""Benchmark: N AIJobs applied at once -> seconds until every member Job exists, next to
creating the same N Jobs directly on the members with the Python client (same spread).

On the bench test bed (bench/bed-nodes.yaml: 3 members, 2,160 fake GPUs) with ``cpn run``
attached. Each AIJob asks for 1 GPU and runs (simulated) for an hour, so all N fit at
once and stay running. Phase 1: the N AIJobs are created on the hub by 16 client threads;
the clock stops when a watch on the members has seen every member Job. Phase 2: the
member Jobs cpn made are copied (cpn's labels and node pins removed) and created again
on the same members by 16 client threads; same watch. The figure is direct_s / cpn_s.

    CPN_TESTBED_DIR=... CPN_TESTBED_PORT_BASE=... python bench/bench_dispatch.py [--n 1000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchbed import (
    JobWatch,
    aijob,
    cpu_delta,
    cpu_seconds,
    dispatch,
    gpus_on_bed,
    machine,
    operator_on_bed,
    seen_quantiles,
    wait_until,
)
from kubernetes import client

from cpn.adapters.kube import client_from_kubeconfig


def direct_manifest(job: Any, run: str) -> dict[str, Any]:
    """The member Job cpn created, as a user would create it by hand."""
    body: dict[str, Any] = client.ApiClient().sanitize_for_serialization(job)
    meta = body["metadata"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if not k.startswith("cpn.io/")}
    labels["bench.cpn.io/run"] = run
    spec = body["spec"]
    spec.pop("selector", None)
    template = spec["template"]
    tlabels = template["metadata"].get("labels") or {}
    template["metadata"]["labels"] = {
        k: v
        for k, v in tlabels.items()
        if not k.startswith("cpn.io/")
        and "controller-uid" not in k
        and k != "job-name"
        and k != "batch.kubernetes.io/job-name"
    }
    template["spec"].pop("affinity", None)  # cpn's node pins; the default scheduler places them
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"direct-{meta['name']}"[:63], "labels": labels},
        "spec": spec,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=16, help="client threads (both phases)")
    parser.add_argument(
        "--operator-workers", type=int, default=0, help="the operator's dispatch threads"
    )
    parser.add_argument("--keep-bed", action="store_true", help="leave the bed running")
    parser.add_argument("--profile", type=Path, help="py-spy output (collapsed stacks)")
    parser.add_argument("--json", action="store_true", help="(output is always JSON)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="cpn-bench-dispatch-"))
    out: dict[str, Any] = {"bench": "dispatch", "n": args.n, "workers": args.workers}
    settings = {"dispatch_workers": args.operator_workers} if args.operator_workers else {}
    with operator_on_bed(args.keep_bed, folder / "operator.log", **settings) as op:
        tb = op.tb
        out["bed"] = {
            "members": list(tb.members),
            "gpus": gpus_on_bed(tb),
            "fit": f"{args.n} AIJobs x 1 GPU, 1 h simulated runtime; all fit at once",
        }
        run_ = dispatch(
            op,
            [aijob(f"j{i:05d}") for i in range(args.n)],
            workers=args.workers,
            profile=args.profile,
        )
        cpn_watch, t0, done = run_.watch, run_.t0, run_.done
        out["cpn"] = run_.figures

        # Let the member pods settle (all running) so phase 2 runs on a quiet bed too.
        def settled() -> bool:
            return op.phases().get("Running", 0) >= args.n

        try:
            wait_until(settled, timeout_s=300, what="all AIJobs Running", every_s=2)
            out["cpn"]["settled"] = True
        except TimeoutError:
            out["cpn"]["settled"] = False

        run = uuid.uuid4().hex[:6]
        plan: dict[str, list[dict[str, Any]]] = {m: [] for m in tb.members}
        for key, job in cpn_watch.jobs.items():
            plan[cpn_watch.where[key]].append(direct_manifest(job, run))
        batches = {}
        for member in tb.members:
            api = client_from_kubeconfig(tb.kubeconfig(member).read_text())
            client.CoreV1Api(api).create_namespace({"metadata": {"name": f"direct-{run}"}})
            batches[member] = client.BatchV1Api(api)
        direct_watch = JobWatch(
            tb,
            namespace=f"direct-{run}",
            selector=f"bench.cpn.io/run={run}",
            key_of=lambda j: j.metadata.name,
        )
        work = [(m, body) for m, bodies_ in plan.items() for body in bodies_]
        cpu1 = cpu_seconds(tb, op.proc.pid)
        t1 = time.monotonic()
        with ThreadPoolExecutor(args.workers) as pool:
            list(
                pool.map(
                    lambda mb: batches[mb[0]].create_namespaced_job(f"direct-{run}", mb[1]), work
                )
            )
        created = time.monotonic()
        done_direct = direct_watch.wait_for([b["metadata"]["name"] for _, b in work], timeout_s=600)
        direct_watch.stop()
        cpu_direct = cpu_delta(cpu1, cpu_seconds(tb, op.proc.pid))
        out["direct"] = {
            "create_calls_s": round(created - t1, 2),
            "all_jobs_s": round(done_direct - t1, 2),
            "seen_s": seen_quantiles(direct_watch, [b["metadata"]["name"] for _, b in work], t1),
            "cpu_s": cpu_direct,
        }
        cpn_s = done - t0
        direct_s = done_direct - t1
        out["ratio_direct_over_cpn"] = round(direct_s / cpn_s, 3)
        out["aim"] = "ratio above 0.5"
        rss, hwm = op.rss_mib()
        out["operator_rss_mib"] = round(rss, 1)
        out["operator_peak_rss_mib"] = round(hwm, 1)
    out["machine"] = machine()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
