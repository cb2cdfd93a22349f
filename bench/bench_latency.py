"""Benchmark: submit-to-member-Job latency at a steady rate of AIJobs.

On the bench test bed with ``cpn run`` attached: AIJobs (1 GPU, 30 s simulated run, so
the bed never fills) are created at ``--rate`` per second for ``--seconds``; a watch on
the members records when each member Job is first seen. Latency = first seen - just
before the create call (both time.monotonic in this process). Prints p50/p95/p99/max.

    CPN_TESTBED_DIR=... CPN_TESTBED_PORT_BASE=... python bench/bench_latency.py \
        [--rate 10] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchbed import UID_LABEL, JobWatch, aijob, machine, operator_on_bed, percentile, pyspy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=10.0, help="AIJobs per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--duration", default="30s", help="simulated runtime of each job")
    parser.add_argument("--keep-bed", action="store_true")
    parser.add_argument("--profile", type=Path, help="py-spy file of the operator (raw format)")
    parser.add_argument("--json", action="store_true", help="(output is always JSON)")
    parser.add_argument(
        "--samples", type=Path, help="also write uid -> [submitted, seen] (monotonic s) there"
    )
    args = parser.parse_args()
    n = int(args.rate * args.seconds)
    folder = Path(tempfile.mkdtemp(prefix="cpn-bench-latency-"))
    out: dict[str, Any] = {"bench": "latency", "rate_per_s": args.rate, "n": n}
    with operator_on_bed(args.keep_bed, folder / "operator.log") as op:
        namespace = op.namespace("lat")
        watcher = JobWatch(
            op.tb,
            namespace=None,
            selector=UID_LABEL,
            key_of=lambda j: j.metadata.labels[UID_LABEL],
        )
        submitted: dict[str, float] = {}
        lock = threading.Lock()
        late = 0

        def submit(i: int) -> None:
            before = time.monotonic()
            uid = op.create(namespace, aijob(f"l{i:05d}", duration=args.duration))
            with lock:
                submitted[uid] = before

        spy = pyspy(op.proc.pid, int(args.seconds), args.profile) if args.profile else None
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            for i in range(n):
                due = t0 + i / args.rate
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)  # the steady submission schedule itself
                elif wait < -0.1:
                    late += 1
                pool.submit(submit, i)
        submit_span = time.monotonic() - t0
        if spy is not None:
            spy.wait()
        watcher.wait_for(list(submitted), timeout_s=300)
        watcher.stop()
        latencies = [watcher.seen[uid] - t for uid, t in submitted.items()]
        if args.samples:
            args.samples.write_text(
                json.dumps({uid: [t, watcher.seen[uid]] for uid, t in submitted.items()})
            )
        out["submitted_in_s"] = round(submit_span, 1)
        out["submissions_late_over_100ms"] = late
        out["latency_s"] = {
            "p50": round(percentile(latencies, 0.50), 3),
            "p95": round(percentile(latencies, 0.95), 3),
            "p99": round(percentile(latencies, 0.99), 3),
            "max": round(max(latencies), 3),
        }
        out["aim"] = "p99 under 2 s"
        out["operator_peak_rss_mib"] = round(op.rss_mib()[1], 1)
    out["machine"] = machine()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
