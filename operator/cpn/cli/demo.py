"""``cpn demo``: the whole product on the local test bed, start to finish.

Brings the test bed up (hub + member clusters with simulated GPU nodes),
installs the CRDs, policy and MemberClusters, starts the operator, applies a
batch of AIJobs with ``kubectl`` (the original notes' resnet50, yolov8m and
llama3 among other models, of several sizes, from three teams), shows the
queue live (``cpn queue``'s table, finished jobs included) until every job has
finished, then prints a summary: completion time, wait, and predicted against
actual runtime for each job; the explanation (``cpn explain``, from the
operator's decision log) of the job that waited longest; and what to look at next.

The simulated runtime of each job on each GPU type is the benchmark-based
runtime (Gavel's measured throughput where it has the model, GPU specifications
and model FLOPs elsewhere) made off by up to ±25% at random, so the operator's
predictions are compared with a truth they do not know exactly.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from cpn.api.aijob import parse_time
from cpn.api.status import human_duration
from cpn.cli import demousage
from cpn.cli.devbed import DEFAULT_POLICY, bootstrap_testbed, start_operator, stop_process
from cpn.cli.queue import render_table, rows_from


def demo_policy() -> str:
    """The shipped default policy, except that team-nlp's urgent jobs (priority 1) count:
    the default counts every ``spec.priority`` above 0 as 0 unless an admin grants it."""
    policy = DEFAULT_POLICY.read_text().replace(
        "  groups: {}                      # no quotas",
        "  groups: {nlp: {max_priority: 1}}  # team-nlp may rank its urgent jobs higher",
    )
    if "nlp: {max_priority: 1}" not in policy:
        raise RuntimeError("examples/policies/default.yaml no longer has 'groups: {}'")
    return policy


TEAMS = {
    "team-vision": ("alice", "vision"),
    "team-nlp": ("bob", "nlp"),
    "team-robotics": ("carol", "robotics"),
}
#: model, batch size, GPUs per worker, workers, target seconds on an A100, team
MIX: list[tuple[str, int, int, int, int, str]] = [
    ("resnet50", 128, 1, 1, 20, "team-vision"),
    ("resnet50", 256, 4, 1, 35, "team-vision"),
    ("yolov8m", 64, 2, 1, 30, "team-vision"),
    ("yolov8m", 64, 4, 1, 25, "team-robotics"),
    ("llama3-8b", 8, 8, 2, 45, "team-nlp"),
    ("llama3-8b", 8, 8, 1, 40, "team-nlp"),
    ("bert-base", 32, 1, 1, 15, "team-nlp"),
    ("gpt2", 16, 2, 1, 30, "team-nlp"),
    ("resnet18", 128, 1, 1, 10, "team-robotics"),
    ("transformer", 128, 1, 1, 20, "team-robotics"),
    ("cyclegan", 1, 1, 1, 25, "team-vision"),
    ("resnet50", 256, 8, 1, 30, "team-vision"),
]
TYPES = ("A100-80GB", "V100-32GB")
#: A public image that exists, named by the demo's jobs (examples/aijobs name cpn's own
#: workload image, workloads/, which the user builds). On the test bed KWOK runs no
#: container: the per-GPU-type duration annotation says how long each "runs".
IMAGE = "python:3.12-slim"
FINISHED = {"Succeeded", "Failed", "Invalid"}


def demo_jobs(count: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """(namespace, AIJob manifest) pairs whose simulated durations follow the benchmarks."""
    from cpn.api.predictions import PredictorEstimator
    from cpn.core.model import Job, frozen_map

    estimator = PredictorEstimator(retrain="off")
    rng = random.Random(seed)
    out = []
    for index in range(count):
        model, batch, gpus, workers, target, team = MIX[index % len(MIX)]
        target_s = target * rng.uniform(0.7, 1.3)
        probe = Job(
            key="probe",
            submit_s=0.0,
            gpus_per_worker=gpus,
            workers=workers,
            model=model,
            features=frozen_map({"batch_size": batch, "dataset_samples": 100000.0, "epochs": 1.0}),
        )
        runtime = estimator.estimate(probe, TYPES).runtime_s
        samples = int(100000 * target_s / runtime[TYPES[0]])
        # The "truth" of the test bed: the benchmark-based runtime, off by up to 25%.
        durations = {
            t: f"{target_s * runtime[t] / runtime[TYPES[0]] * rng.uniform(0.75, 1.25):.0f}s"
            for t in TYPES
        }
        name = f"{model.replace('.', '-')}-{index:02d}"
        notes = {"cpn.io/per-gpu-type": json.dumps({"testbed.cpn.io/duration": durations})}
        body = {
            "apiVersion": "cpn.io/v1alpha1",
            "kind": "AIJob",
            "metadata": {"name": name, "namespace": team},
            "spec": {
                "workers": workers,
                "priority": 1 if team == "team-nlp" and index % 5 == 0 else 0,
                "resources": {"gpus": gpus, "cpu": "4", "memory": "16Gi"},
                "model": {
                    "name": model,
                    "batchSize": batch,
                    "datasetSamples": samples,
                    "epochs": 1,
                },
                "template": {
                    "metadata": {"annotations": notes},
                    "spec": {
                        "containers": [
                            {
                                "name": "train",
                                "image": IMAGE,
                                "command": ["python", "-c", f"print('cpn demo job: {model}')"],
                            }
                        ]
                    },
                },
            },
        }
        out.append((team, body))
    return out


def _kubectl(
    kubectl: Path, kubeconfig: Path, *args: str, input_: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), *args],
        input=input_,
        text=True,
        capture_output=True,
        check=False,
    )


def _items(kubectl: Path, kubeconfig: Path) -> list[dict[str, Any]]:
    result = _kubectl(kubectl, kubeconfig, "get", "aijobs", "-A", "-o", "json")
    if result.returncode != 0:
        return []
    items: list[dict[str, Any]] = json.loads(result.stdout).get("items") or []
    return items


def summary(items: Sequence[dict[str, Any]]) -> tuple[str, dict[str, float]]:
    """The per-job table and the aggregate figures."""
    rows = []
    jcts, waits, errors = [], [], []
    for item in sorted(items, key=lambda i: (i["metadata"]["namespace"], i["metadata"]["name"])):
        status = item.get("status") or {}
        created = parse_time(item["metadata"]["creationTimestamp"]) or 0.0
        start = parse_time(status.get("startTime"))
        finish = parse_time(status.get("completionTime"))
        actual = status.get("actualRuntimeSeconds")
        predicted = (status.get("predictedRuntimeSeconds") or {}).get(status.get("gpuType", ""))
        wait = (start - created) if start else None
        jct = (finish - created) if finish else None
        error = (abs(predicted - actual) / actual) if predicted and actual else None
        if jct is not None:
            jcts.append(jct)
        if wait is not None:
            waits.append(wait)
        if error is not None:
            errors.append(error)
        rows.append(
            [
                f"{item['metadata']['namespace']}/{item['metadata']['name']}",
                status.get("phase", ""),
                status.get("cluster", ""),
                status.get("gpuType", ""),
                str(status.get("gpus", "")),
                human_duration(wait),
                human_duration(jct),
                human_duration(predicted),
                human_duration(actual),
                f"{error * 100:.0f}%" if error is not None else "",
            ]
        )
    header = [
        "AIJOB",
        "PHASE",
        "CLUSTER",
        "GPU-TYPE",
        "GPUS",
        "WAIT",
        "JCT",
        "PREDICTED",
        "ACTUAL",
        "ERROR",
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    errors.sort()
    figures = {
        "jobs": float(len(items)),
        "succeeded": float(sum((i.get("status") or {}).get("phase") == "Succeeded" for i in items)),
        "avg_jct_s": sum(jcts) / len(jcts) if jcts else 0.0,
        "avg_wait_s": sum(waits) / len(waits) if waits else 0.0,
        "max_wait_s": max(waits, default=0.0),
        "median_prediction_error": errors[len(errors) // 2] if errors else 0.0,
    }
    return "\n".join(lines), figures


def longest_wait(items: Sequence[dict[str, Any]]) -> str | None:
    """NAMESPACE/NAME of the started job that waited longest (None when none started)."""
    waits = {}
    for item in items:
        start = parse_time((item.get("status") or {}).get("startTime"))
        created = parse_time(item["metadata"]["creationTimestamp"])
        if start is not None and created is not None:
            waits[f"{item['metadata']['namespace']}/{item['metadata']['name']}"] = start - created
    return max(sorted(waits), key=lambda key: waits[key]) if waits else None


def _log_files(decisions: Path) -> list[Path]:
    """The decision log's files oldest first: LOG.N ... LOG.1, LOG."""
    rotated = [p for p in decisions.parent.glob(decisions.name + ".*") if p.suffix[1:].isdigit()]
    rotated.sort(key=lambda p: -int(p.suffix[1:]))
    return [*rotated, decisions] if decisions.exists() else rotated


def _explain(job: str, decisions: Path) -> str:
    """What ``cpn explain JOB --log ...`` prints (its error when it has nothing to say)."""
    files = [str(p) for p in _log_files(decisions)]
    done = subprocess.run(
        [sys.executable, "-m", "cpn", "explain", job, "--log", *files],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout + done.stderr


def next_steps(tb: Any, decisions: Path, job: str | None) -> str:
    """What a newcomer should look at next, with this bed's paths (the operator is stopped)."""
    example = job or "NAMESPACE/NAME"
    bin_dir = Path(sys.executable).parent  # where `cpn` is
    namespace, _, name = example.partition("/")
    prometheus = ", ".join(f"{m} {tb.prometheus_url(m)}" for m in tb.members)
    lines = [
        "",
        "== next: the test bed is still up (the operator is stopped); in this shell:",
        f"  export KUBECONFIG={tb.kubeconfig_merged} PATH={tb.kubectl.parent}:{bin_dir}:$PATH",
        "  kubectl get aijobs -A                  # every job: phase, cluster, GPU type",
        f"  kubectl describe aijob -n {namespace} {name}   # its conditions and Events",
        "  cpn queue -A --all                     # the queue view, finished jobs too",
        f"  cpn explain {example} --log {decisions}",
        "                                         # why it waited and why it went there",
        f"  dashboards: Prometheus of each member ({prometheus}),",
        "    the Grafana dashboard manifests/grafana-dashboard.json (docs/observability.md)",
        "  make testbed-down                      # stop the test bed",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="cpn demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=48)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument("--refresh-s", type=float, default=3.0)
    parser.add_argument("--down", action="store_true", help="stop the test bed at the end")
    args = parser.parse_args(list(argv))
    from testbed.bed import Testbed

    tb = Testbed()
    print("== test bed: starting hub and member clusters (real control planes, KWOK nodes)")
    tb.up()
    hub = tb.kubeconfig("hub")
    kubectl = tb.kubectl
    print("== hub: CRDs, policy, MemberClusters")
    bootstrap_testbed(tb, policy_yaml=demo_policy())
    for namespace, (user, group) in TEAMS.items():
        _kubectl(kubectl, hub, "create", "namespace", namespace)
        _kubectl(
            kubectl,
            hub,
            "label",
            "namespace",
            namespace,
            "--overwrite",
            f"cpn.io/user={user}",
            f"cpn.io/group={group}",
        )
    log = tb.state_dir / "logs" / "operator.log"
    decisions = tb.state_dir / "logs" / "decisions.jsonl"
    for old in decisions.parent.glob(decisions.name + "*"):  # a previous demo's cycles
        old.unlink()
    print(f"== operator: starting (log: {log}, decision log: {decisions})")
    proc = start_operator(hub, log, interval_s=5, debounce_s=0.2, decision_log=decisions)
    longest = None
    try:
        for namespace in TEAMS:  # a previous demo's jobs: gone before the new ones come
            _kubectl(kubectl, hub, "delete", "aijobs", "--all", "-n", namespace, "--timeout=120s")
        jobs = demo_jobs(args.jobs, args.seed)
        docs = yaml.safe_dump_all([body for _, body in jobs])
        print(f"== kubectl apply: {len(jobs)} AIJobs from {len(TEAMS)} teams")
        applied_s = time.time()
        result = _kubectl(kubectl, hub, "apply", "-f", "-", input_=docs)
        if result.returncode != 0:
            print(result.stderr, file=sys.stderr)
            return 1
        deadline = time.monotonic() + args.timeout_s
        items: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                print(f"operator exited with {proc.returncode}; see {log}", file=sys.stderr)
                return 1
            items = [i for i in _items(kubectl, hub) if i["metadata"]["namespace"] in TEAMS]
            done = sum((i.get("status") or {}).get("phase") in FINISHED for i in items)
            rows = rows_from(items, include_finished=True)
            table = render_table(rows) if rows else "no AIJobs yet"
            width = shutil.get_terminal_size((120, 40))
            if sys.stdout.isatty():
                print("\033[2J\033[H", end="")
            print(f"== queue ({done}/{len(items)} finished)  {time.strftime('%H:%M:%S')}")
            print("\n".join(table.splitlines()[: max(width.lines - 4, 10)]), flush=True)
            if done == len(jobs):
                break
            time.sleep(args.refresh_s)
        text, figures = summary(items)
        print("\n== summary\n" + text)
        print("\n" + json.dumps({k: round(v, 3) for k, v in figures.items()}))
        longest = longest_wait(items)
        if longest:
            print(f"\n== the job that waited longest: cpn explain {longest} --log {decisions}")
            print(_explain(longest, decisions), end="")
        ok = figures["succeeded"] == len(jobs)
        if ok:
            counted, text = demousage.check(tb, applied_s, len(jobs))
            print("\n== accounting (cpn usage against the member Jobs)\n" + text)
            ok = counted
        print("== demo " + ("passed: every AIJob Succeeded, usage recorded" if ok else "FAILED"))
        return 0 if ok else 1
    finally:
        stop_process(proc)
        if args.down:
            tb.down()
        else:
            print(next_steps(tb, decisions, longest))
