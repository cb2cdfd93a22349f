"""``cpn benchmark run``: measure a member's GPU nodes now.

Creates one GPUBenchmark on the hub for ``--node`` of ``--cluster``, or for every GPU node
of that member when ``--node`` is absent, and prints what it created (``--json``: one JSON
document). The operator runs each under the usual rule: below every user job, one GPU,
pinned to its node (docs/admin-guide.md, "GPU benchmarks"). The member's nodes are read
with the kubeconfig in its Secret, as the operator reads them. An unknown cluster or node,
a member or hub that cannot be reached: one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from cpn.api.benchmarks import requested_benchmark
from cpn.core.policy import BENCHMARK_MODELS

PROG = "cpn benchmark run"


def _models(values: Sequence[str] | None) -> tuple[str, ...]:
    models = tuple(m for v in values or () for m in v.split(",") if m)
    unknown = [m for m in models if m not in BENCHMARK_MODELS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown model {', '.join(unknown)} (known: {', '.join(BENCHMARK_MODELS)})"
        )
    if len(set(models)) != len(models):
        raise argparse.ArgumentTypeError("a model is named twice")
    return models


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="cpn benchmark", description=__doc__)
    sub = top.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="create GPUBenchmarks for a member's GPU nodes")
    run.add_argument("--cluster", required=True, help="the MemberCluster")
    run.add_argument("--node", help="one node of it (default: every GPU node)")
    run.add_argument(
        "--models",
        nargs="+",
        metavar="MODEL",
        help=f"models to measure, space- or comma-separated ({', '.join(BENCHMARK_MODELS)}; "
        "default: the policy's)",
    )
    run.add_argument(
        "--budget-seconds",
        type=float,
        help="seconds per model, in [1, 86400] (default: the policy's budget_s)",
    )
    run.add_argument("--json", action="store_true", help="print one JSON document")
    run.add_argument("--kubeconfig", help="the hub's kubeconfig (default: as kubectl)")
    run.add_argument(
        "--operator-namespace",
        default=os.environ.get("CPN_NAMESPACE") or "cpn-system",
        help="where the members' kubeconfig Secrets are (default: $CPN_NAMESPACE or cpn-system)",
    )
    return top


def main(argv: Sequence[str]) -> int:
    top = parser()
    args = top.parse_args(list(argv))
    try:
        models = _models(args.models)
    except argparse.ArgumentTypeError as err:
        top.error(str(err))
    budget = args.budget_seconds
    if budget is not None and not 1 <= budget <= 86400:
        top.error(f"--budget-seconds must be in [1, 86400], got {budget:g}")
    from cpn.adapters.hubcli import on_hub

    return on_hub(PROG, lambda: _run(args, models))


def _run(args: argparse.Namespace, models: tuple[str, ...]) -> int:
    from cpn.adapters.benchcli import UnknownCluster, create_benchmark, gpu_nodes, read_member
    from cpn.adapters.hubcli import hub_api

    api = hub_api(args.kubeconfig)
    try:
        member = read_member(api, args.cluster)
    except UnknownCluster as err:
        known = ", ".join(err.known) or "none"
        print(f"{PROG}: no MemberCluster {err.name!r} (known: {known})", file=sys.stderr)
        return 1
    nodes = gpu_nodes(api, member, args.operator_namespace)
    if args.node is not None and args.node not in nodes:
        listed = ", ".join(sorted(nodes)) or "none"
        print(
            f"{PROG}: {args.node!r} is not a GPU node of {args.cluster} (its GPU nodes: "
            f"{listed[:300]})",
            file=sys.stderr,
        )
        return 1
    chosen = [args.node] if args.node is not None else sorted(nodes)
    if not chosen:
        print(f"{PROG}: {args.cluster} has no GPU node", file=sys.stderr)
        return 1
    created: list[dict[str, Any]] = []
    for node in chosen:
        body = requested_benchmark(args.cluster, node, models=models, budget_s=args.budget_seconds)
        made = create_benchmark(api, body)
        spec = made.get("spec") or {}
        created.append(
            {
                "name": made["metadata"]["name"],
                "cluster": args.cluster,
                "node": node,
                "gpuType": nodes[node],
                "models": spec.get("models"),
                "budgetSeconds": spec.get("budgetSeconds"),
            }
        )
    if args.json:
        print(json.dumps({"cluster": args.cluster, "created": created}, indent=1))
    else:
        for row in created:
            print(
                f"created GPUBenchmark {row['name']} for {row['cluster']}/{row['node']} "
                f"({row['gpuType']})"
            )
        print("follow them with: kubectl get gpubenchmarks")
    return 0
