"""``cpn explain NAME``: why a job waits, or why it went where it went.

From the live cluster (the default): reads the AIJob, with no more access than a
namespace's users have (get on aijobs), and prints the explanation the operator keeps
in its status: the condition ``Admitted`` (reason and message: the quota, reservation or
room it waits for, which running job's end makes room, the predicted start), its place
in its queue, the start range, and for a placed job the place chosen and the runner-up
with what each would have cost. The namespace: ``-n``, else ``NAMESPACE/NAME``, else
the kubeconfig context's.

``--log DECISIONS...`` replays the operator's decision log instead
(``CPN_DECISION_LOG``), or a simulated run's (``cpn simulate --decisions``, whose jobs are
named by their trace ids): the last cycle in which the job was pending (``--at``: at or
before that instant of the log's clock), with the job's score and the terms of the
formula, the quotas it uses, and every candidate cluster and GPU type with predicted
runtime, transfer time, earliest start and completion time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cpn.api import constants as k
from cpn.api.kubeconfig import context_namespace
from cpn.api.status import human_duration, likely
from cpn.cli.usage import parse_when
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


def live_view(body: Mapping[str, Any]) -> dict[str, Any]:
    """What ``cpn explain`` shows of an AIJob read from the cluster (its status only)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    admitted: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == k.COND_ADMITTED), {}
    )
    view = {
        "aijob": f"{meta.get('namespace')}/{meta.get('name')}",
        "phase": status.get("phase") or "",
        "reason": admitted.get("reason") or status.get("reason") or "",
        "explanation": admitted.get("message") or status.get("message") or "",
        "admitted": {"True": True, "False": False}.get(admitted.get("status", "")),
        "since": admitted.get("lastTransitionTime"),
        "queue": status.get("queue"),
        "position": status.get("position"),
        "eta": status.get("eta"),
        "estimatedStart": status.get("estimatedStart"),
        "estimatedStartRange": status.get("estimatedStartRange"),
        "estimatedFinish": status.get("estimatedFinish"),
        "fifoDue": status.get("fifoDue"),
        "fifoDueCalibrated": status.get("fifoDueCalibrated"),
        "cluster": status.get("cluster"),
        "gpuType": status.get("gpuType"),
        "nodes": status.get("nodes"),
        "placement": status.get("placement"),
    }
    return {
        key: value for key, value in view.items() if value is not None and value not in ("", [])
    }


def render_live(view: Mapping[str, Any]) -> str:
    """The terminal form of :func:`live_view`."""
    phase = view.get("phase") or "not yet seen by the operator"
    head = f"{view['aijob']}: {phase}"
    if view.get("reason"):
        head += f" ({view['reason']})"
    if view.get("position"):
        head += f", position {view['position']} in queue {view.get('queue', 'default')}"
    lines = [head]
    if view.get("explanation"):
        lines.append(f"  why: {view['explanation']}")
    if view.get("cluster"):
        nodes = ", ".join(view.get("nodes") or [])
        lines.append(f"  on: {view['cluster']} ({view.get('gpuType', '')}), nodes {nodes}")
    if phase in {k.PHASE_QUEUED, k.PHASE_SUSPENDED} and view.get("eta"):
        lines.append(f"  start: {view['eta']}{likely(view.get('estimatedStartRange'))}")
    if phase in {k.PHASE_QUEUED, k.PHASE_SUSPENDED} and view.get("fifoDue"):
        # docs/policy.md: under reservation.drain_fifo the job drains by this budget (fifo_share)
        lines.append(f"  FIFO due: {view['fifoDue']} (strict FIFO's estimated start)")
        calibrated = view.get("fifoDueCalibrated")
        if calibrated and calibrated != view["fifoDue"]:
            lines.append(f"  FIFO due: {calibrated} (calibrated: runtimes as long as jobs ran)")
    elif view.get("eta"):
        lines.append(f"  finish: {view['eta']}")
    placement = view.get("placement") or {}
    for label, key in (("chosen", "chosen"), ("runner-up", "runnerUp")):
        c = placement.get(key)
        if c:
            lines.append(
                f"  {label + ':':<10} {c['cluster']:<12} {c['gpuType']:<12} runtime "
                f"{human_duration(c['runtimeSeconds']):>8}  transfer "
                f"{human_duration(c['transferSeconds']) or '0s':>6}  wait "
                f"{human_duration(c['waitSeconds']) or '0s':>8}  completion "
                f"{human_duration(c['completionSeconds']) or '0s':>8}"
            )
    if placement and "runnerUp" not in placement:
        lines.append("  runner-up: none (no other cluster and GPU type could take it)")
    if view.get("since") and view.get("admitted") is not None:
        state = "admitted" if view["admitted"] else "waiting"
        lines.append(f"  ({state} since {view['since']})")
    return "\n".join(lines)


def _target(job: str, namespace: str | None, kubeconfig: str | None) -> tuple[str, str]:
    """(namespace, name): -n, else NAMESPACE/NAME, else the kubeconfig context's."""
    if "/" in job:
        given, name = job.split("/", 1)
        return namespace or given, name
    if namespace:
        return namespace, job
    path = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    file = Path(path) if path else Path.home() / ".kube" / "config"
    try:
        text = file.read_text()
    except OSError:
        return "default", job
    return context_namespace(text), job


def _live(args: argparse.Namespace) -> int:
    from cpn.adapters.hubcli import HubAnswer, get_aijob
    from cpn.adapters.kube import client_from_kubeconfig, hub_client

    namespace, name = _target(args.job, args.namespace, args.kubeconfig)
    api = (
        client_from_kubeconfig(Path(args.kubeconfig).read_text())
        if args.kubeconfig
        else hub_client()
    )
    try:
        body = get_aijob(api, namespace, name)
    except HubAnswer as err:
        if err.status == 404:
            print(f"cpn explain: no AIJob {name!r} in namespace {namespace}", file=sys.stderr)
        elif err.status in {401, 403}:
            print(f"cpn explain: you may not read AIJobs in namespace {namespace}", file=sys.stderr)
        else:
            print(f"cpn explain: the hub answered {err.status} {err.reason}", file=sys.stderr)
        return 1
    view = live_view(body)
    print(json.dumps(view, indent=1) if args.json else render_live(view))
    return 0


def _instant(text: str) -> float:
    """``--at``: seconds as given, else a date, a time or an age, as ``cpn usage`` reads
    them (:func:`cpn.cli.usage.parse_when`; an age counts back from now)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_when(text, time.time())
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"neither seconds nor {err}") from None


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="cpn explain",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job", help="NAME or NAMESPACE/NAME of the AIJob")
    parser.add_argument("-n", "--namespace", help="its namespace (default: the context's)")
    parser.add_argument("--kubeconfig", help="the hub's kubeconfig (default: $KUBECONFIG)")
    parser.add_argument(
        "--log", nargs="+", type=Path, help="replay decision log file(s), oldest first"
    )
    parser.add_argument(
        "--at",
        type=_instant,
        metavar="WHEN",
        help="with --log: the last cycle at or before this instant of the log's clock: "
        "seconds (Unix time for the operator's log, from the trace's start for "
        "`cpn simulate --decisions`), a time (2026-12-07T14:05:00Z, UTC unless it says) "
        "or an age (2h: two hours ago)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(list(argv))
    if not args.log:
        if args.at is not None:
            parser.error("--at reads a decision log: give --log")
        return _live(args)
    namespace, name = _target(args.job, args.namespace, args.kubeconfig)
    key = f"{namespace}/{name}"
    # A simulated job's key is its trace id, with no namespace: a bare name matches it too.
    keys = {key} if "/" in args.job or args.namespace else {key, args.job}
    last = None
    for decision in read_log(*args.log, mentioning=keys):
        if args.at is not None and decision.snapshot.now_s > args.at:
            break  # the log is in time order (files oldest first)
        found_key = next((j.key for j in decision.snapshot.pending if j.key in keys), None)
        if found_key is not None:
            last, key = decision, found_key
    if last is None:
        when = "" if args.at is None else f" at or before {args.at:.0f} s"
        print(f"cpn explain: {key} was not pending in any cycle of the log{when}", file=sys.stderr)
        return 1
    found = explain(last.snapshot, last.plan, key)
    if args.json:
        print(
            json.dumps({"cycle": last.cycle, **dataclasses.asdict(found)}, indent=1, default=dict)
        )
    else:
        print(render(found, last.cycle))
    return 0
