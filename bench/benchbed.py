"""What the operator benchmarks share: a bench test bed, the operator process, AIJobs,
watches of member Jobs, RSS and /metrics readings, machine facts.

The bed is the one named by ``CPN_TESTBED_DIR``/``CPN_TESTBED_PORT_BASE``, laid out by
``bench/bed-nodes.yaml`` (3 members, 2,160 fake GPUs). A benchmark brings it up if it is
not running and (unless ``--keep-bed``) down at the end.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT)]

import urllib.request  # noqa: E402

from kubernetes import client, watch  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from cpn.adapters.kube import client_from_kubeconfig  # noqa: E402
from cpn.cli.devbed import bootstrap_testbed, start_operator, stop_process, wait_until  # noqa: E402
from testbed import procs  # noqa: E402
from testbed.bed import Testbed  # noqa: E402

NODES_FILE = Path(__file__).with_name("bed-nodes.yaml")
UID_LABEL = "cpn.io/aijob-uid"
#: The default policy with quick retries (as the e2e tests use).
POLICY = "retry: {max_attempts: 2, backoff_s: 1}\n"


def machine() -> dict[str, Any]:
    """Facts that figures depend on."""
    load1, load5, load15 = os.getloadavg()
    mem_kib = 0
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {
        "cores": os.cpu_count(),
        "load_avg_1_5_15": [round(load1, 2), round(load5, 2), round(load15, 2)],
        "memory_gib": round(mem_kib / 2**20, 1),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
    }


def _cpu_model() -> str:
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


#: Bed components that only feed GPU metrics to Prometheus; with 270 fake nodes they take
#: a good share of two cores. The benchmarks stop them (the operator then schedules from the
#: API's accounting and reports metrics as degraded, as it does when Prometheus is down).
METRICS_STACK = ("dcgm", "prometheus")


def bed(keep: bool) -> Testbed:
    """The bench bed, up (started with the bench layout when it is not running), with its
    metrics stack stopped."""
    tb = Testbed(nodes_file=None if _running() else NODES_FILE)
    tb.up(timeout_s=300)
    tb.keep = keep  # type: ignore[attr-defined]
    stack = [p for key, p in tb.process_table().items() if key.split("/")[1] in METRICS_STACK]
    procs.stop(stack)
    return tb


def _running() -> bool:
    return Testbed().status().any_running


def bed_down(tb: Testbed) -> None:
    if not getattr(tb, "keep", False):
        tb.down(purge=True)


def cpu_seconds(tb: Testbed, operator_pid: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by the operator and by each component of
    the bed, members summed ("hub/kube-apiserver", "members/kwok", ...): subtract two
    readings with :func:`cpu_delta` to see where a phase's CPU went."""
    ticks = os.sysconf("SC_CLK_TCK")
    owners = [("operator", operator_pid)]
    for key, proc in tb.process_table().items():
        cluster, component = key.split("/", 1)
        owners.append((f"{'hub' if cluster == 'hub' else 'members'}/{component}", proc.pid))
    out: dict[str, float] = {}
    for owner, pid in owners:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[owner] = out.get(owner, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per owner, CPU seconds between two :func:`cpu_seconds` readings (0.1 s and up)."""
    spent = {k: round(v - before.get(k, 0.0), 1) for k, v in after.items()}
    return dict(sorted(((k, v) for k, v in spent.items() if v >= 0.1), key=lambda kv: -kv[1]))


def api_requests(tb: Testbed, cluster: str) -> dict[str, int]:
    """Requests the API server of ``cluster`` has served so far, by "VERB resource[/sub]"
    (its own ``apiserver_request_total``): subtract two readings with :func:`requests_delta`
    to count a phase's calls, e.g. the hub writes per AIJob."""
    api = tb.api_client(cluster)
    try:
        resp = api.call_api("GET", api.configuration.host + "/metrics")
        resp.read()
        text = resp.data.decode()
    finally:
        api.close()
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
        key = f"{labels.get('verb', '?')} {labels.get('resource', '')}"
        if labels.get("subresource"):
            key += "/" + labels["subresource"]
        out[key] = out.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


def requests_delta(before: dict[str, int], after: dict[str, int], per: int) -> dict[str, float]:
    """Per "VERB resource", the calls between two :func:`api_requests` readings divided by
    ``per`` (0.01 and up), most first."""
    spent = {k: round((v - before.get(k, 0)) / per, 2) for k, v in after.items()}
    return dict(sorted(((k, v) for k, v in spent.items() if v >= 0.01), key=lambda kv: -kv[1]))


def gpus_on_bed(tb: Testbed) -> int:
    return sum(n.gpus for c in tb.spec.members for n in c.nodes)


class Operator:
    """``cpn run`` on the hub of the bed, with its /metrics on a port."""

    def __init__(self, tb: Testbed, log: Path, **settings: object) -> None:
        self.tb = tb
        self.metrics_port = tb.spec.port_base + 90
        bootstrap_testbed(tb, policy_yaml=POLICY)
        self.api = client_from_kubeconfig(tb.kubeconfig("hub").read_text())
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.proc = start_operator(
            tb.kubeconfig("hub"),
            log,
            interval_s=5,
            debounce_s=0.1,
            metrics_port=self.metrics_port,
            **settings,
        )
        self.log = log
        try:
            wait_until(self.ready, timeout_s=900, what="operator /readyz")
        except BaseException:
            self.stop()
            raise

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the operator exited ({self.proc.returncode}); see {self.log}")
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=10
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics (name{labels} -> value)."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10
        ) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def rss_mib(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) of the operator process in MiB."""
        fields = {}
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in {"VmRSS", "VmHWM"}:
                    fields[key] = int(value.split()[0]) / 1024
        return fields["VmRSS"], fields["VmHWM"]

    def stop(self) -> None:
        stop_process(self.proc)

    def namespace(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.core.create_namespace({"metadata": {"name": name}})
        return name

    def create(self, namespace: str, body: dict[str, Any]) -> str:
        """Create one AIJob; returns its UID."""
        created = self.custom.create_namespaced_custom_object(
            "cpn.io", "v1alpha1", namespace, "aijobs", body
        )
        return str(created["metadata"]["uid"])

    def create_many(
        self, namespace: str, bodies: list[dict[str, Any]], workers: int = 16
    ) -> list[str]:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda b: self.create(namespace, b), bodies))

    def phases(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        token = None
        while True:
            page = self.custom.list_cluster_custom_object(
                "cpn.io", "v1alpha1", "aijobs", limit=2000, _continue=token
            )
            for item in page["items"]:
                phase = (item.get("status") or {}).get("phase", "")
                counts[phase] = counts.get(phase, 0) + 1
            token = page["metadata"].get("continue")
            if not token:
                return counts


def aijob(name: str, *, gpus: int = 1, duration: str = "1h") -> dict[str, Any]:
    """A small AIJob whose simulated run on the bed lasts ``duration``."""
    notes = {
        "cpn.io/per-gpu-type": json.dumps(
            {"testbed.cpn.io/duration": {"A100-80GB": duration, "V100-32GB": duration}}
        )
    }
    return {
        "apiVersion": "cpn.io/v1alpha1",
        "kind": "AIJob",
        "metadata": {"name": name},
        "spec": {
            "workers": 1,
            "resources": {"gpus": gpus, "cpu": "1", "memory": "4Gi"},
            "model": {"name": "resnet50", "batchSize": 64, "datasetSamples": 50000, "epochs": 1},
            "template": {
                "metadata": {"annotations": notes},
                "spec": {"containers": [{"name": "train", "image": "trainer:1"}]},
            },
        },
    }


class JobWatch:
    """Watches Jobs on every member (label selector) and records when each was first seen
    (time.monotonic), keyed by ``key_of(job)``."""

    def __init__(
        self,
        tb: Testbed,
        *,
        namespace: str | None,
        selector: str,
        key_of: Callable[[Any], str],
    ) -> None:
        self.seen: dict[str, float] = {}
        self.where: dict[str, str] = {}
        self.jobs: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = []
        self._ready = threading.Barrier(len(tb.members) + 1)
        for member in tb.members:
            api = client_from_kubeconfig(tb.kubeconfig(member).read_text())
            t = threading.Thread(
                target=self._run,
                args=(member, client.BatchV1Api(api), namespace, selector, key_of),
                daemon=True,
            )
            t.start()
            self._threads.append(t)
        self._ready.wait(timeout=60)

    def _run(
        self,
        member: str,
        batch: Any,
        namespace: str | None,
        selector: str,
        key_of: Callable[[Any], str],
    ) -> None:
        if namespace:
            lister: Any = batch.list_namespaced_job
            args: tuple[Any, ...] = (namespace,)
        else:
            lister, args = batch.list_job_for_all_namespaces, ()
        listed = lister(*args, label_selector=selector)
        self._record(member, listed.items, key_of)
        version = listed.metadata.resource_version
        self._ready.wait(timeout=60)
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(
                    lister,
                    *args,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=5,
                ):
                    obj = event["object"]
                    version = obj.metadata.resource_version
                    if event["type"] == "ADDED":
                        self._record(member, [obj], key_of)
                    if self._stop.is_set():
                        break
            except ApiException as err:
                if err.status != 410:
                    raise
                listed = lister(*args, label_selector=selector)
                self._record(member, listed.items, key_of)
                version = listed.metadata.resource_version

    def _record(self, member: str, jobs: list[Any], key_of: Callable[[Any], str]) -> None:
        now = time.monotonic()
        with self._lock:
            for job in jobs:
                key = key_of(job)
                if key not in self.seen:
                    self.seen[key] = now
                    self.where[key] = member
                    self.jobs[key] = job

    def wait_for(self, keys: Collection[str], timeout_s: float) -> float:
        """Monotonic time when the last of ``keys`` was seen (TimeoutError otherwise). Jobs of
        earlier runs on a kept bed are seen too, hence keys rather than a count."""
        wait_until(
            lambda: all(key in self.seen for key in keys),
            timeout_s=timeout_s,
            what=f"{len(keys)} Jobs",
            every_s=0.05,
        )
        return max(self.seen[key] for key in keys)

    def stop(self) -> None:
        self._stop.set()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def operator_cycles(log: Path) -> list[dict[str, float]]:
    """The ``cycle ...`` lines of the operator's log as dicts."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"cycle (cycle=\d+ .*)$", line)
        if m:
            fields = dict(part.split("=", 1) for part in m.group(1).split())
            out.append({k: _num(v) for k, v in fields.items()})
    return out


def _num(raw: str) -> Any:
    try:
        return float(raw)
    except ValueError:
        return raw


@contextmanager
def operator_on_bed(keep: bool, log: Path, **settings: object) -> Iterator[Operator]:
    tb = bed(keep)
    op = None
    try:
        op = Operator(tb, log, **settings)
        yield op
    finally:
        if op is not None:
            op.stop()
        bed_down(tb)


def pyspy(pid: int, seconds: int, out: Path) -> subprocess.Popen[bytes] | None:
    """Sample the operator with py-spy when it is installed (profiling aid, optional):
    collapsed stacks of the thread holding the GIL (where Python spends CPU), one line each
    with its sample count."""
    exe = Path(sys.executable).with_name("py-spy")
    if not exe.exists():
        return None
    return subprocess.Popen(
        [
            *(str(exe), "record", "--nonblocking", "--gil", "-r", "50", "-p", str(pid)),
            *("-d", str(seconds), "-f", "raw", "-o", str(out)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
