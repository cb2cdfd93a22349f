"""Benchmark: the same N one-pod jobs through (a) direct creates on the members, (b) Kueue's
MultiKueue with its default client limits, (c) MultiKueue with raised client QPS/burst,
(d) cpn, one after another in one run on one bed.

On the bench test bed (bench/bed-nodes.yaml: 3 members, 2,160 fake GPUs; its metrics stack
stopped, as in the other operator benchmarks). Every job is one pod asking 1 GPU, 1 CPU,
4 GiB and running (simulated) for an hour, so all fit at once. Per mode:

* burst: N jobs created by ``--workers`` client threads; time from the first submit until a
  watch on the members has seen the last member Job (``all_member_jobs_s``), and the
  CPU-seconds (user+system, /proc/<pid>/stat) each bed process spent meanwhile
  (``cpu_s``: hub/..., members/... summed over members, operator = cpn's process);
* paced: ``--latency-n`` jobs submitted at ``--rate`` per second; submit -> member-Job-seen
  latency p50/p99.

Modes: (a) plain ``batch/v1`` Jobs created on the members round-robin; (b)/(c) plain Jobs
labelled ``kueue.x-k8s.io/queue-name`` created on the hub (testbed/kueue.py: Kueue v0.17.0,
one controller manager per cluster, hub ClusterQueue with a MultiKueue AdmissionCheck over
every member); (d) AIJobs created on the hub with ``cpn run`` attached (as bench_dispatch).
Between modes the namespaces are deleted and the bench waits until they are gone.

    CPN_TESTBED_DIR=... CPN_TESTBED_PORT_BASE=... python bench/bench_peer.py [--n 1000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchbed import (
    UID_LABEL,
    JobWatch,
    Operator,
    aijob,
    bed,
    bed_down,
    cpu_delta,
    cpu_seconds,
    gpus_on_bed,
    machine,
    percentile,
    wait_until,
)
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.adapters.kube import client_from_kubeconfig
from testbed import kueue
from testbed.bed import Testbed
from testbed.workloads import gpu_job

RUN_LABEL = "bench.cpn.io/run"
#: no cpn process in modes a-c: cpu_seconds() then reads only the bed's processes
NO_OPERATOR = 0


def job_body(name: str, run: str, *, queue: bool) -> dict[str, Any]:
    labels = {RUN_LABEL: run}
    if queue:
        labels[kueue.QUEUE_LABEL] = kueue.QUEUE
    return gpu_job(name, gpus=1, duration="1h", cpu="1", memory="4Gi", labels=labels)


def paced(submit: Callable[[int], str], n: int, rate: float) -> tuple[dict[str, float], int]:
    """Call ``submit(i)`` for i < n at ``rate`` per second from 8 threads; returns the
    monotonic time just before each call by the key it returned, and how many calls
    started over 100 ms late."""
    before: dict[str, float] = {}
    lock = threading.Lock()
    late = 0

    def one(i: int) -> None:
        t = time.monotonic()
        key = submit(i)
        with lock:
            before[key] = t

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        for i in range(n):
            wait = t0 + i / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # the steady submission schedule itself
            elif wait < -0.1:
                late += 1
            pool.submit(one, i)
    return before, late


class Mode:
    """How one mode submits a job (burst and paced) and which member Jobs are its own."""

    def __init__(self, tb: Testbed, name: str, op: Operator | None = None) -> None:
        self.tb, self.name, self.op = tb, name, op
        self.run = uuid.uuid4().hex[:6]
        self.namespaces: list[str] = []
        self.hub = client.BatchV1Api(client_from_kubeconfig(tb.kubeconfig("hub").read_text()))
        self.members = {
            m: client.BatchV1Api(client_from_kubeconfig(tb.kubeconfig(m).read_text()))
            for m in tb.members
        }
        self._next_member = itertools.cycle(tb.members)
        self._lock = threading.Lock()

    def namespace(self, phase: str) -> str:
        name = f"{self.name[:8]}-{phase}-{self.run}"
        if self.op is not None:
            self.op.core.create_namespace({"metadata": {"name": name}})
        elif self.name == "direct":
            for m in self.tb.members:
                client.CoreV1Api(self.members[m].api_client).create_namespace(
                    {"metadata": {"name": name}}
                )
        else:
            kueue.queue_namespace(self.tb, name)
        self.namespaces.append(name)
        return name

    def watch(self, namespace: str) -> JobWatch:
        if self.op is not None:
            return JobWatch(
                self.tb,
                namespace=None,
                selector=UID_LABEL,
                key_of=lambda j: j.metadata.labels[UID_LABEL],
            )
        return JobWatch(
            self.tb,
            namespace=namespace,
            selector=f"{RUN_LABEL}={self.run}",
            key_of=lambda j: j.metadata.name,
        )

    def submit(self, namespace: str, name: str) -> str:
        """Create one job; returns the key its member Job is watched by."""
        if self.op is not None:
            return self.op.create(namespace, aijob(name))
        if self.name == "direct":
            with self._lock:
                member = next(self._next_member)
            self.members[member].create_namespaced_job(
                namespace, job_body(name, self.run, queue=False)
            )
            return name
        self.hub.create_namespaced_job(namespace, job_body(name, self.run, queue=True))
        return name

    def cleanup(self, timeout_s: float) -> None:
        """Delete this mode's namespaces everywhere and wait until they are gone."""
        cores = {
            c: client.CoreV1Api(client_from_kubeconfig(self.tb.kubeconfig(c).read_text()))
            for c in self.tb.clusters
        }
        for ns in self.namespaces:
            for core in cores.values():
                try:
                    core.delete_namespace(ns, propagation_policy="Background")
                except ApiException as e:
                    if e.status != 404:
                        raise

        def gone() -> bool:
            for ns in self.namespaces:
                for core in cores.values():
                    try:
                        core.read_namespace(ns)
                        return False
                    except ApiException as e:
                        if e.status != 404:
                            raise
            return True

        wait_until(gone, timeout_s=timeout_s, what=f"{self.name} namespaces deleted", every_s=1)


def run_mode(mode: Mode, args: argparse.Namespace) -> dict[str, Any]:
    tb, pid = mode.tb, (mode.op.proc.pid if mode.op else NO_OPERATOR)
    timeout = max(900.0, args.n * 2.0)
    out: dict[str, Any] = {}
    # burst
    ns = mode.namespace("burst")
    w = mode.watch(ns)
    names = [f"b{i:05d}" for i in range(args.n)]
    cpu0 = cpu_seconds(tb, pid)
    t0 = time.monotonic()
    with ThreadPoolExecutor(args.workers) as pool:
        keys = list(pool.map(lambda n: mode.submit(ns, n), names))
    submitted = time.monotonic()
    done = w.wait_for(keys, timeout_s=timeout)
    cpu = cpu_delta(cpu0, cpu_seconds(tb, pid))
    w.stop()
    spread: dict[str, int] = {}
    for key in keys:
        spread[w.where[key]] = spread.get(w.where[key], 0) + 1
    out["burst"] = {
        "submit_calls_s": round(submitted - t0, 2),
        "all_member_jobs_s": round(done - t0, 2),
        "jobs_per_s": round(args.n / (done - t0), 1),
        "spread": spread,
        "cpu_s": cpu,
        "cpu_s_total": round(sum(cpu.values()), 1),
    }
    # paced
    ns = mode.namespace("lat")
    w = mode.watch(ns)
    before, late = paced(lambda i: mode.submit(ns, f"l{i:05d}"), args.latency_n, args.rate)
    w.wait_for(list(before), timeout_s=timeout)
    w.stop()
    lat = [w.seen[k] - t for k, t in before.items()]
    out["paced"] = {
        "n": args.latency_n,
        "rate_per_s": args.rate,
        "submissions_late_over_100ms": late,
        "latency_s": {
            "p50": round(percentile(lat, 0.50), 3),
            "p99": round(percentile(lat, 0.99), 3),
            "max": round(max(lat), 3),
        },
    }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="jobs in each burst")
    parser.add_argument("--latency-n", type=int, default=200, help="jobs at --rate per mode")
    parser.add_argument("--rate", type=float, default=10.0, help="paced submissions per second")
    parser.add_argument("--workers", type=int, default=16, help="client threads of a burst")
    parser.add_argument("--raised-qps", type=float, default=500.0)
    parser.add_argument("--raised-burst", type=int, default=1000)
    parser.add_argument(
        "--modes",
        default="direct,multikueue_default,multikueue_raised,cpn",
        help="subset, in order",
    )
    parser.add_argument("--keep-bed", action="store_true", help="leave the bed running")
    parser.add_argument("--json", action="store_true", help="(output is always JSON)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    folder = Path(tempfile.mkdtemp(prefix="cpn-bench-peer-"))
    root = kueue.build()
    out: dict[str, Any] = {
        "bench": "peer",
        "n": args.n,
        "workers": args.workers,
        "kueue_build": (root / "build.ok").read_text().strip(),
    }
    tb = bed(args.keep_bed)
    try:
        out["bed"] = {
            "members": list(tb.members),
            "gpus": gpus_on_bed(tb),
            "job": "1 pod: 1 GPU, 1 CPU, 4 GiB, 1 h simulated run; all fit at once",
        }
        limits = {
            "multikueue_default": kueue.Limits(),
            "multikueue_raised": kueue.Limits(qps=args.raised_qps, burst=args.raised_burst),
        }
        for name in modes:
            if name in limits:
                took = kueue.start(tb, limits=limits[name], root=root)
                mode = Mode(tb, name)
                out[name] = {
                    "kueue_client": {"qps": limits[name].qps, "burst": limits[name].burst},
                    "kueue_start_s": round(took, 1),
                    **run_mode(mode, args),
                }
                mode.cleanup(timeout_s=600)
            elif name == "direct":
                mode = Mode(tb, name)
                out[name] = run_mode(mode, args)
                mode.cleanup(timeout_s=600)
            elif name == "cpn":
                kueue.stop(tb)
                op = Operator(tb, folder / "operator.log")
                try:
                    out[name] = run_mode(Mode(tb, name, op), args)
                    _rss, hwm = op.rss_mib()
                    out[name]["operator_peak_rss_mib"] = round(hwm, 1)
                finally:
                    op.stop()
            else:
                raise SystemExit(f"unknown mode {name}")
            print(
                json.dumps({name: out[name]}), file=sys.stderr, flush=True
            )  # kept if a later mode fails
        kueue.stop(tb)
    finally:
        bed_down(tb)
    base = out.get("direct", {}).get("burst", {}).get("all_member_jobs_s")
    if base:
        out["ratio_direct_over"] = {
            m: round(base / out[m]["burst"]["all_member_jobs_s"], 3) for m in modes if m != "direct"
        }
    out["machine"] = machine()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
