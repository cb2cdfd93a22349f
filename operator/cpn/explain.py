"""``cpn explain NAMESPACE/NAME --log DECISIONS``: why a job waits, or why it went where it went.

Reads the operator's decision log (``CPN_DECISION_LOG``), takes the last cycle
in which the job was pending, and prints what that cycle weighed: the job's
score and the terms of the formula, the quotas it uses, and every candidate
cluster and GPU type with predicted runtime, transfer time, earliest start and
completion time, and which one won.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from cpn.api.status import human_duration
from cpn.core.explain import Explanation, explain
from cpn.decisions import read_log


def render(found: Explanation, cycle: int) -> str:
    lines = [f"{found.job_key}: {found.outcome} ({found.reason}) in cycle {cycle}"]
    if found.message:
        lines.append(f"  why: {found.message}")
    if found.position:
        lines.append(
            f"  position {found.position}" + (f", level {found.level}" if found.level else "")
        )
    lines.append(f"  score {found.score:.3f}" + (f" = {found.formula}" if found.formula else ""))
    used = (
        "priority",
        "aging",
        "wait_s",
        "runtime_s",
        "gpus",
        "gpu_time_s",
        "service_s",
        "quota_used",
        "user_level",
        "group_level",
    )
    lines.append(
        "  terms: " + ", ".join(f"{n}={found.terms[n]:g}" for n in used if n in found.terms)
    )
    for quota in found.quotas:
        lines.append(f"  quota: {quota}")
    lines.append("  candidates (completion = wait + transfer + runtime):")
    for c in found.candidates:
        mark = "chosen" if c.chosen else ("room now" if c.room_now else "no room now")
        wait = human_duration(c.earliest_start_s) if c.earliest_start_s is not None else "never"
        done = human_duration(c.completion_s) if c.completion_s is not None else "-"
        lines.append(
            f"    {c.cluster:<12} {c.gpu_type:<12} runtime {human_duration(c.runtime_s):>8}"
            f"  transfer {human_duration(c.transfer_s) or '0s':>6}  wait {wait:>8}"
            f"  completion {done:>8}  {mark}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="cpn explain",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job", help="NAMESPACE/NAME of the AIJob")
    parser.add_argument(
        "--log", required=True, nargs="+", type=Path, help="decision log file(s), oldest first"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(list(argv))
    last = None
    for decision in read_log(*args.log):
        if any(j.key == args.job for j in decision.snapshot.pending):
            last = decision
    if last is None:
        print(f"cpn explain: {args.job} was not pending in any cycle of the log")
        return 1
    found = explain(last.snapshot, last.plan, args.job)
    if args.json:
        print(
            json.dumps({"cycle": last.cycle, **dataclasses.asdict(found)}, indent=1, default=dict)
        )
    else:
        print(render(found, last.cycle))
    return 0
