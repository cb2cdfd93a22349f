"""``cpn testbed up|down|status|env``: drive the local test bed from a shell."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from testbed.bed import Testbed, TestbedError, iter_status_lines
from testbed.binaries import MissingBinaryError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cpn testbed", description=__doc__)
    p.add_argument("--state-dir", type=Path, help="default $CPN_TESTBED_DIR or /tmp/cpn-testbed")
    p.add_argument("--nodes", type=Path, help="nodes file (default testbed/nodes.yaml)")
    p.add_argument("--port-base", type=int, help="first port (default 26100)")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start hub + members (idempotent); prints where things are")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for health")
    up.add_argument(
        "--with",
        dest="extras",
        action="append",
        choices=["kueue"],
        default=[],
        help="also start a peer: kueue = Kueue's MultiKueue (hub manager, members as workers;"
        " builds it first if it is not cached)",
    )
    down = sub.add_parser("down", help="stop every process of the bed")
    down.add_argument("--purge", action="store_true", help="also delete the state directory")
    st = sub.add_parser("status", help="health of every component; exit 1 unless all healthy")
    st.add_argument("--json", action="store_true")
    sub.add_parser("env", help="print shell exports: KUBECONFIG and the kubectl path")
    return p


def main(argv: list[str]) -> int:
    """Entry point used by ``cpn testbed``."""
    args = _parser().parse_args(argv)
    try:
        tb = Testbed(state_dir=args.state_dir, nodes_file=args.nodes, port_base=args.port_base)
        if args.cmd == "up":
            report = tb.up(timeout_s=args.timeout)
            what = "already running" if report.already_running else "ready"
            print(f"test bed {what} in {report.elapsed_s:.1f} s (state {tb.state_dir})")
            print(f"  kubeconfig  {tb.kubeconfig_merged}  (contexts: {', '.join(tb.clusters)})")
            print(f"  kubectl     {tb.kubectl}")
            for m in tb.members:
                print(f"  {m:<10}  prometheus {tb.prometheus_url(m)}  api {tb.api_url(m)}")
            if "kueue" in args.extras:
                from testbed import kueue

                root = kueue.build()
                took = kueue.start(tb, root=root)
                print(f"  kueue       MultiKueue ready in {took:.1f} s ({root}); queue label")
                print(f"              {kueue.QUEUE_LABEL}={kueue.QUEUE}, see testbed/kueue.py")
            print(f"  logs        {tb.logs_dir}")
            return 0
        if args.cmd == "down":
            took = tb.down(purge=args.purge)
            stray = tb.stray_processes()
            print(f"test bed stopped in {took:.1f} s; processes left: {len(stray)}")
            return 0 if not stray else 1
        if args.cmd == "status":
            status = tb.status()
            if args.json:
                print(
                    json.dumps(
                        [
                            {
                                "cluster": c.cluster,
                                "component": c.component,
                                "pid": c.pid,
                                "running": c.running,
                                "healthy": c.healthy,
                                "detail": c.detail,
                            }
                            for c in status.components
                        ],
                        indent=1,
                    )
                )
            else:
                for line in iter_status_lines(status):
                    print(line)
            return 0 if status.healthy else 1
        if args.cmd == "env":
            print(f"export KUBECONFIG={tb.kubeconfig_merged}")
            print(f'export PATH="{tb.kubectl.parent}:$PATH"')
            return 0
    except (TestbedError, MissingBinaryError) as e:
        print(f"cpn testbed: {e}", file=sys.stderr)
        return 1
    return 2
