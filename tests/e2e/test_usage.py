"""Issue 21 (accounting) on the test bed: after a few AIJobs ran (one of them preempted and
resumed), ``cpn usage --json`` totals equal the sum of (end - start) x GPUs over the member
clusters' own Job records, the ``cpn_gpu_hours_total`` counter agrees, and both are the
same after the operator is killed and started again.

The member Jobs' records are read by a watch on every member: a completed Job's
``status.startTime`` and ``completionTime``; a preempted attempt's Job is deleted (it has no
completion), so its end is when its deletion was seen. Why a tolerance of
``TOLERANCE_S`` x GPUs per run: the bed's clocks are one machine, but (1) the Jobs' times
have whole seconds (truncated), (2) the operator counts a run from when it saw all its
workers running, a moment after the Job controller stamped ``startTime`` (pods scheduled,
then started by KWOK), (3) a run may end when the operator saw its Job succeed (the
``SuccessCriteriaMet`` condition comes before ``completionTime`` is stamped), and (4) a
preempted run ends when the operator decided it, a moment before its Job's deletion is
seen here. Measured on the bed: starts 1.6-2.2 s late, ends within 1 s.
"""

from __future__ import annotations

import re
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client, watch

from cpn.api.usage import LABEL_USAGE, decode
from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from testbed.spec import RESTART_COST_ANNOTATION
from tests.e2e.hubkit import (
    Hub,
    aijob,
    apply,
    free_port,
    get,
    new_namespace,
    running_hub,
    wait_status,
)
from tests.test_json_output import run_json

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

V100, A100 = "V100-32GB", "A100-80GB"
RESTART_S, INTERVAL_S, WORK_S = 4, 10, 40
POLICY = f"""
retry: {{max_attempts: 2, backoff_s: 1}}
reservation: {{enabled: false}}
quotas: {{max_priority: null}}
preemption: {{enabled: true, restart_cost_s: {RESTART_S}, min_run_s: 0}}
"""
#: Seconds a run's start or end may differ from its member Job's record (the start lags by
#: 1-3 s on the bed: the operator sees all the workers running after the Job controller's
#: startTime); per run and GPU, what the totals may differ by.
TOLERANCE_S = 5.0


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    folder = tmp_path_factory.mktemp("usage")
    with running_hub(testbed, folder, policy=POLICY, metrics_port=free_port()) as h:
        yield h


def stamp(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class MemberJobs:
    """cpn's Jobs on every member, as their own API servers record them: the last version
    of each, and when a deleted one was seen gone."""

    def __init__(self, hub: Hub) -> None:
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.deleted_at: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hub = hub
        members = list(hub.tb.members)
        self._ready = threading.Barrier(len(members) + 1)
        self._threads = [
            threading.Thread(target=self._follow, args=(m,), daemon=True) for m in members
        ]
        for thread in self._threads:
            thread.start()
        self._ready.wait(timeout=60)

    def _follow(self, member: str) -> None:
        with self._hub.tb.api_client(member) as api:
            batch = client.BatchV1Api(api)
            version = self._list(member, api, batch)
            self._ready.wait()
            while not self._stop.is_set():
                try:
                    if version is None:  # a watch broke: list again, and watch from there
                        version = self._list(member, api, batch)
                    w = watch.Watch()  # type: ignore[no-untyped-call]
                    for event in w.stream(  # type: ignore[no-untyped-call]
                        batch.list_job_for_all_namespaces,
                        label_selector="cpn.io/aijob-uid",
                        resource_version=version,
                        timeout_seconds=5,
                    ):
                        obj = event["object"]
                        version = obj.metadata.resource_version
                        self._seen(member, api.sanitize_for_serialization(obj), event["type"])
                except Exception as err:  # an API server closing watches: list again
                    print(f"member Jobs of {member}: {type(err).__name__}; listing again")
                    version = None
                    self._stop.wait(0.5)

    def _list(self, member: str, api: Any, batch: Any) -> str:
        listed = batch.list_job_for_all_namespaces(label_selector="cpn.io/aijob-uid")
        names = set()
        for job in listed.items:
            names.add(job.metadata.name)
            self._seen(member, api.sanitize_for_serialization(job), "LISTED")
        with self._lock:  # gone while no watch ran: gone by now
            for key in [k for k in self.jobs if k[0] == member and k[1] not in names]:
                self.deleted_at.setdefault(key, time.time())
        return str(listed.metadata.resource_version)

    def _seen(self, member: str, job: dict[str, Any], event: str) -> None:
        key = (member, job["metadata"]["name"])
        with self._lock:
            self.jobs[key] = job
            if event == "DELETED":
                self.deleted_at.setdefault(key, time.time())

    def runs(self) -> list[dict[str, Any]]:
        """Each Job that ran: its AIJob UID, attempt, GPUs, start and end."""
        out = []
        with self._lock:
            items = list(self.jobs.items())
        for key, job in items:
            status = job.get("status") or {}
            start = stamp(status.get("startTime"))
            end = stamp(status.get("completionTime")) or self.deleted_at.get(key)
            if start is None or end is None:
                continue
            spec = job["spec"]
            limits = spec["template"]["spec"]["containers"][0]["resources"]["limits"]
            gpus = float(limits.get("nvidia.com/gpu", 0)) * int(spec.get("parallelism") or 1)
            labels = job["metadata"]["labels"]
            out.append(
                {
                    "job": key,
                    "uid": labels["cpn.io/aijob-uid"],
                    "attempt": int(labels["cpn.io/attempt"]),
                    "gpus": gpus,
                    "gpu_s": gpus * (end - start),
                    "start": start,
                    "end": end,
                }
            )
        return out

    def stop(self) -> None:
        self._stop.set()


def usage(hub: Hub, group: str) -> dict[str, Any]:
    doc: dict[str, Any] = run_json(
        "-m", "cpn", "usage", "--kubeconfig", str(hub.kubeconfig), "--group", group,
        "--by", "user", "--json",
    )  # fmt: skip
    return doc


def settled(doc: dict[str, Any], runs: int) -> dict[str, Any] | None:
    return doc if doc["runs"] == runs else None


def counter(hub: Hub, group: str) -> float | None:
    """cpn_gpu_hours_total of ``group`` summed over users and GPU types (None: no answer)."""
    code, body = get(f"http://127.0.0.1:{hub.settings['metrics_port']}/metrics")
    if code != 200:
        return None
    pattern = rf'^cpn_gpu_hours_total\{{[^}}]*group="{re.escape(group)}"[^}}]*\}} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, body, flags=re.M))


def cycles(hub: Hub) -> float:
    code, body = get(f"http://127.0.0.1:{hub.settings['metrics_port']}/metrics")
    found = re.search(r"^cpn_cycles_total (\S+)$", body, flags=re.M) if code == 200 else None
    return float(found.group(1)) if found else 0.0


def stored_runs(hub: Hub) -> list[Any]:
    """Every run kept in the usage ConfigMaps."""
    listed = hub.core.list_namespaced_config_map("cpn-system", label_selector=f"{LABEL_USAGE}=day")
    return [
        run for cm in listed.items for run in decode(cm.metadata.name, cm.data or {}).runs.values()
    ]


def test_usage_equals_the_member_jobs_and_survives_a_restart(hub: Hub) -> None:
    suffix = uuid.uuid4().hex[:5]
    vision, nlp = f"vision-{suffix}", f"nlp-{suffix}"
    member_jobs = MemberJobs(hub)
    long_job = aijob(
        "long",
        workers=6,
        gpus=4,
        durations={V100: f"{WORK_S}s"},
        gpu_types=[V100],
        checkpoint=True,
        checkpointIntervalSeconds=INTERVAL_S,
        annotations={RESTART_COST_ANNOTATION: f"{RESTART_S}s"},
    )
    shorts = [
        aijob(f"short-{i}", gpus=4, durations={V100: "8s"}, gpu_types=[V100], priority=5)
        for i in range(2)
    ]
    small = [
        aijob("one", gpus=1, durations={A100: "6s"}, gpu_types=[A100]),
        aijob("pair", gpus=2, workers=2, durations={A100: "9s"}, gpu_types=[A100]),
    ]
    try:
        with (
            new_namespace(hub, "usage-a", user="ada", group=vision) as ns_a,
            new_namespace(hub, "usage-b", user="bob", group=nlp) as ns_b,
        ):
            assert apply(hub, ns_a, long_job).returncode == 0
            assert apply(hub, ns_b, *small).returncode == 0
            wait_status(hub, ns_a, "long", phase="Running", timeout_s=120)
            # the long job holds every V100; 10 s in, the shorts arrive and preempt it
            wait_until(lambda: _ran_for(hub, ns_a, "long") >= 10, timeout_s=60, what="10 s run")
            assert apply(hub, ns_a, *shorts).returncode == 0
            wait_until(
                lambda: hub.status(ns_a, "long").get("preemptions") == 1,
                timeout_s=60,
                what="the long job preempted",
            )
            for ns, name in [(ns_a, "short-0"), (ns_a, "short-1"), (ns_b, "one"), (ns_b, "pair")]:
                wait_status(hub, ns, name, phase="Succeeded", timeout_s=180)
            done = wait_status(hub, ns_a, "long", phase="Succeeded", timeout_s=240)
            assert done["attempts"] == 2
            uids = {
                hub.aijob(ns, name)["metadata"]["uid"]: group
                for ns, group, names in [
                    (ns_a, vision, ["long", "short-0", "short-1"]),
                    (ns_b, nlp, ["one", "pair"]),
                ]
                for name in names
            }

            # the watch here may see the last Job's completion a moment after the operator
            wait_until(
                lambda: len([r for r in member_jobs.runs() if r["uid"] in uids]) >= 6,
                timeout_s=30,
                what="six member Jobs that ran, seen here",
            )
            runs = [r for r in member_jobs.runs() if r["uid"] in uids]
            assert len(runs) == 6, [r["job"] for r in runs]  # long twice, 2 shorts, one, pair
            expected = {
                g: sum(r["gpu_s"] for r in runs if uids[r["uid"]] == g) for g in (vision, nlp)
            }
            tolerance = {
                g: sum(TOLERANCE_S * r["gpus"] for r in runs if uids[r["uid"]] == g)
                for g in (vision, nlp)
            }
            want_runs = {g: sum(1 for r in runs if uids[r["uid"]] == g) for g in (vision, nlp)}
            docs = {
                g: wait_until(
                    lambda g=g: settled(usage(hub, g), want_runs[g]),
                    timeout_s=60,
                    what=f"{g}'s {want_runs[g]} runs in the usage store",
                )
                for g in (vision, nlp)
            }
            for g in (vision, nlp):
                got = docs[g]["totalGpuSeconds"]
                print(f"{g}: usage {got} s, member Jobs {expected[g]:.1f} s", flush=True)
                assert got == pytest.approx(expected[g], abs=tolerance[g]), (g, docs[g], runs)
            assert set(docs[vision]["gpuHoursBy"]) == {"ada"}
            assert set(docs[nlp]["gpuHoursBy"]) == {"bob"}
            # Run by run: each member Job is one stored run, of the same GPUs and times.
            kept = {(r.uid, r.attempt): r for r in stored_runs(hub) if r.uid in uids}
            assert sorted(kept) == sorted((r["uid"], r["attempt"]) for r in runs)
            for run in runs:
                mine = kept[(run["uid"], run["attempt"])]
                lag, late = mine.start_s - run["start"], mine.end_s - run["end"]
                print(
                    f"{mine.name}#{mine.attempt} {mine.kind}: start +{lag:.1f} s, end {late:+.1f} s"
                )
                assert mine.gpus == run["gpus"], (mine, run)
                assert -1.0 <= lag <= TOLERANCE_S and abs(late) <= TOLERANCE_S, (mine, run)
            (fragment,) = [r for r in kept.values() if r.kind == "preempted"]
            assert (fragment.name, fragment.attempt, fragment.gpus) == ("long", 1, 24.0)
            for g in (vision, nlp):
                assert counter(hub, g) == pytest.approx(docs[g]["totalGpuHours"], abs=1e-3)

            hub.proc.send_signal(signal.SIGKILL)  # no goodbye flush
            hub.proc.wait(timeout=10)
            hub.restart()
            wait_until(lambda: cycles(hub) >= 3, timeout_s=120, what="three cycles after restart")
            for g in (vision, nlp):
                assert usage(hub, g) == docs[g]  # nothing counted twice, nothing lost
                assert counter(hub, g) == pytest.approx(docs[g]["totalGpuHours"], abs=1e-3)
    finally:
        member_jobs.stop()


def _ran_for(hub: Hub, namespace: str, name: str) -> float:
    started = stamp(hub.status(namespace, name).get("startTime"))
    return time.time() - started if started else 0.0
