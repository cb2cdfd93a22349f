"""The demo's accounting check: what ``cpn usage`` recorded against the member clusters'
own Job records.

After the demo's jobs finished, the GPU-hours the operator stored on the hub (the runs that
started since the demo began) must equal the sum over the member Jobs cpn created of
(``completionTime`` − ``startTime``) × GPUs, within :data:`TOLERANCE_S` per run and GPU:
the operator sees a run start when all its workers run, a moment after the Job
controller's ``startTime``, and Job timestamps are whole seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cpn.api.aijob import parse_time

#: Seconds a run's start or end may differ from its member Job's record, per run and GPU.
TOLERANCE_S = 5.0
_UID_LABEL = "cpn.io/aijob-uid"


def job_gpu_seconds(jobs: Iterable[Mapping[str, Any]]) -> tuple[float, float, int]:
    """GPU-seconds of the finished member Jobs (completion − start, × GPUs of every pod
    that ran at once), the tolerance for them, and how many there were."""
    total = tolerance = 0.0
    count = 0
    for job in jobs:
        status = job.get("status") or {}
        start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
        if start is None or end is None:
            continue
        spec = job.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") or {}
        per_pod = sum(
            float(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
            for c in pod.get("containers") or ()
        )
        gpus = per_pod * int(spec.get("parallelism") or 1)
        total += (end - start) * gpus
        tolerance += 2 * TOLERANCE_S * gpus
        count += 1
    return total, tolerance, count


def _member_jobs(kubectl: Path, kubeconfig: Path) -> list[dict[str, Any]]:
    argv = ["get", "jobs", "-A", "-l", _UID_LABEL, "-o", "json"]
    out = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), *argv],
        text=True,
        capture_output=True,
        check=True,
    )
    items: list[dict[str, Any]] = json.loads(out.stdout).get("items") or []
    return items


def _usage(hub: Path, since_s: float) -> dict[str, Any]:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since_s))
    argv = ["usage", "--json", "--by", "group", "--since", since, "--kubeconfig", str(hub)]
    out = subprocess.run(
        [sys.executable, "-m", "cpn", *argv],
        text=True,
        capture_output=True,
        check=True,
    )
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def check(tb: Any, since_s: float, jobs: int, timeout_s: float = 60.0) -> tuple[bool, str]:
    """Wait until the store holds a run per demo job (one write per cycle), then compare;
    (ok, the lines to print)."""
    hub = tb.kubeconfig("hub")
    deadline = time.monotonic() + timeout_s
    doc = _usage(hub, since_s)
    while doc["runs"] < jobs and time.monotonic() < deadline:
        time.sleep(1.0)
        doc = _usage(hub, since_s)
    member_jobs = [j for m in tb.members for j in _member_jobs(tb.kubectl, tb.kubeconfig(m))]
    fresh = [  # this demo's (an earlier demo's AIJobs and their member Jobs were deleted)
        j
        for j in member_jobs
        if (parse_time(j["metadata"].get("creationTimestamp")) or 0.0) >= since_s - 1
    ]
    expected, tolerance, count = job_gpu_seconds(fresh)
    got = float(doc["totalGpuSeconds"])
    ok = doc["runs"] >= jobs and abs(got - expected) <= tolerance
    by = ", ".join(f"{g} {h:.2f}" for g, h in (doc.get("gpuHoursBy") or {}).items())
    lines = [
        f"GPU-hours by group (cpn usage --by group --since ...): {by}",
        f"recorded {got / 3600:.3f} GPU-h in {doc['runs']} run(s); the {count} member Jobs' own "
        f"records (completion - start) x GPUs: {expected / 3600:.3f} GPU-h; "
        f"allowed difference {tolerance / 3600:.3f} GPU-h: " + ("equal" if ok else "DIFFERENT"),
    ]
    return ok, "\n".join(lines)
