"""The ``cpn`` command: one entry point, one sub-command per tool.

Each sub-command lives in its own module and registers itself here by name;
the module is imported only when its sub-command runs, so ``cpn simulate``
never imports kopf and ``cpn run`` never imports matplotlib.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

ACTION_VERBS = ("cancel", "suspend", "resume", "rerun")  # cpn.cli.actions: one function each

#: sub-command -> (module[:function] with ``main(argv) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("cpn.cli.run", "run the operator against the current kubeconfig's cluster (the hub)"),
    "demo": ("cpn.cli.demo", "the whole product on the local test bed: a batch of AIJobs, live"),
    "explain": ("cpn.cli.explain", "why a job waits or went where it went (--log: replay)"),
    "benchmark": ("cpn.cli.benchmark", "benchmark run: measure a member's GPU nodes now"),
    "queue": ("cpn.cli.queue", "the queue across clusters: position, ETA and why each job waits"),
    "clusters": ("cpn.cli.clusters", "member clusters: ready, free GPUs per domain, jobs, cache"),
    "simulate": ("cpn.sim.cli", "run a trace through the scheduler offline"),
    "predictor": ("predictor.cli", "train, evaluate and query the runtime predictor"),
    "testbed": ("testbed.cli", "start, stop and inspect the local test bed"),
    "validate": ("cpn.cli.validate", "check AIJob, MemberCluster and policy manifests offline"),
    "replay": ("cpn.cli.replay", "re-plan every cycle of a decision log and report differences"),
    "usage": ("cpn.cli.usage", "GPU-hours used per group, user, GPU type or domain (accounting)"),
    **{v: (f"cpn.cli.actions:{v}", f"{v} an AIJob, as kubectl would") for v in ACTION_VERBS},
}


def _usage() -> str:
    lines = ["usage: cpn COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<12} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``cpn COMMAND ...`` to the command's module."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"cpn: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, _, function = COMMANDS[name][0].partition(":")
    module = importlib.import_module(module_name)
    result: int = getattr(module, function or "main")(rest)
    return result
