"""Benchmark of the local test bed: time to `up` with cached binaries, memory, time to `down`.

Runs a private bed (its own state dir and ports) so a bed already running is not
disturbed. Prints one JSON object. Needs the binaries: `bash testbed/setup.sh`.

    python bench/bench_testbed.py [--settle-s 10]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from testbed import procs
from testbed.bed import Testbed


def main() -> int:
    """Bring a private bed up, measure it, bring it down; print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settle-s", type=float, default=10.0, help="idle time before RSS")
    parser.add_argument("--port-base", type=int, default=27100)
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="cpn-testbed-bench-"))
    try:
        tb = Testbed(state_dir=state, port_base=args.port_base)
        report = tb.up()
        healthy = tb.status().healthy
        time.sleep(args.settle_s)  # let the apiservers finish their start-up work before RSS
        by_component: dict[str, float] = defaultdict(float)
        by_cluster: dict[str, float] = defaultdict(float)
        for key, proc in sorted(tb.process_table().items()):
            cluster, component = key.split("/", 1)
            rss = procs.rss_bytes(proc) / 2**20
            by_component[component] += rss
            by_cluster[cluster] += rss
        total = tb.rss_bytes() / 2**20
        n_procs = len(tb.processes())
        down_s = tb.down()
        stray = tb.stray_processes()
    finally:
        shutil.rmtree(state, ignore_errors=True)
    print(
        json.dumps(
            {
                "bench": "testbed",
                "clusters": list(tb.clusters),
                "fake_nodes": sum(len(c.nodes) for c in tb.spec.clusters),
                "up_s": round(report.elapsed_s, 2),
                "healthy_after_up": healthy,
                "processes": n_procs,
                "rss_mib_total": round(total, 1),
                "rss_mib_by_cluster": {k: round(v, 1) for k, v in by_cluster.items()},
                "rss_mib_by_component": {k: round(v, 1) for k, v in by_component.items()},
                "down_s": round(down_s, 2),
                "processes_left_after_down": len(stray),
            },
            indent=1,
        )
    )
    return 0 if healthy and not stray else 1


if __name__ == "__main__":
    raise SystemExit(main())
