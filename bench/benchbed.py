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
from dataclasses import dataclass
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
from testbed.spec import PORT_BLOCK  # noqa: E402

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


def bed(keep: bool, nodes_file: Path = NODES_FILE, timeout_s: float = 300) -> Testbed:
    """The bench bed, up (started with the layout of ``nodes_file`` when it is not running),
    with its metrics stack stopped; ``tb.up_s`` is how long bringing it up took."""
    tb = Testbed(nodes_file=None if _running() else nodes_file)
    tb.up_s = round(tb.up(timeout_s=timeout_s).elapsed_s, 1)  # type: ignore[attr-defined]
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
    return {owner: row["cpu_s"] for owner, row in _by_kind(tb, operator_pid).items()}


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


def _by_kind(tb: Testbed, operator_pid: int | None) -> dict[str, dict[str, float]]:
    ticks = os.sysconf("SC_CLK_TCK")
    page_mib = os.sysconf("SC_PAGE_SIZE") / 2**20
    owners = [("operator", operator_pid)] if operator_pid else []
    for key, proc in tb.process_table().items():
        cluster, component = key.split("/", 1)
        owners.append((f"{'hub' if cluster == 'hub' else 'members'}/{component}", proc.pid))
    out: dict[str, dict[str, float]] = {}
    for owner, pid in owners:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        row = out.setdefault(owner, {"processes": 0, "rss_mib": 0.0, "cpu_s": 0.0})
        row["processes"] += 1
        row["cpu_s"] += (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        row["rss_mib"] += int(fields[21]) * page_mib  # rss, in pages
    return out


def process_kinds(tb: Testbed, operator_pid: int | None = None) -> dict[str, dict[str, float]]:
    """Per kind of process ("members/kube-apiserver", "hub/etcd", "operator", ...): how
    many run, their resident memory summed (MiB) and their CPU seconds so far; most
    memory first."""
    rows = {
        owner: {k: round(v, 1) for k, v in row.items()}
        for owner, row in _by_kind(tb, operator_pid).items()
    }
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]["rss_mib"]))


def memory_available_gib() -> float:
    """The machine's MemAvailable (what can still be used without swapping), GiB."""
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return round(int(line.split()[1]) / 2**20, 2)
    return float("nan")


def process_age_s(pid: int) -> float:
    """Seconds since the process ``pid`` started (kernel clock, 10 ms steps)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime", encoding="ascii") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def gpus_on_bed(tb: Testbed) -> int:
    return sum(n.gpus for c in tb.spec.members for n in c.nodes)


def metrics_port(tb: Testbed) -> int:
    """The operator's /metrics port: base + 90 while the bed's clusters leave it free (up to
    9 clusters), else the last member's Kueue webhook port (free: only bench_peer.py runs
    Kueue, on the 3-member bench bed). On a bed of 10 members base + 90 is member-09's
    etcd, which answers /readyz and /metrics too: the operator's could not bind there."""
    port = tb.spec.port_base + 90
    if port < tb.spec.port_base + len(tb.spec.clusters) * PORT_BLOCK:
        return tb.port(tb.members[-1], "kueue-webhook")
    return port


class Operator:
    """``cpn run`` on the hub of the bed, with its /metrics on a port."""

    def __init__(self, tb: Testbed, log: Path, **settings: object) -> None:
        self.tb = tb
        self.metrics_port = metrics_port(tb)
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


def seen_quantiles(watch: JobWatch, keys: list[str], t0: float) -> dict[str, float]:
    """Seconds from the start until a quarter, half, ... of the member Jobs were seen."""
    seen = sorted(watch.seen[key] - t0 for key in keys)
    return {
        f"p{q}": round(seen[min(len(seen) - 1, len(seen) * q // 100)], 2) for q in (25, 50, 75, 90)
    }


@dataclass
class Dispatch:
    """One burst of AIJobs through cpn: the figures, and the watch that saw the member
    Jobs (stopped; ``watch.jobs`` holds them) with the monotonic times it ran between."""

    figures: dict[str, Any]
    watch: JobWatch
    uids: list[str]
    t0: float
    done: float


def dispatch(
    op: Operator,
    bodies: list[dict[str, Any]],
    *,
    workers: int,
    timeout_s: float = 600,
    profile: Path | None = None,
) -> Dispatch:
    """Create ``bodies`` (AIJobs) in a new namespace of the hub with ``workers`` client
    threads and time it until a watch on the members has seen every member Job: how long
    the creates took, when the last member Job appeared, quarter by quarter, where they
    went, the CPU seconds of every process and the hub's API calls per AIJob meanwhile."""
    tb = op.tb
    namespace = op.namespace("bench")
    watch = JobWatch(
        tb, namespace=None, selector=UID_LABEL, key_of=lambda j: j.metadata.labels[UID_LABEL]
    )
    spy = pyspy(op.proc.pid, 60, profile) if profile else None
    cpu0 = cpu_seconds(tb, op.proc.pid)
    hub0 = api_requests(tb, "hub")
    t0 = time.monotonic()
    uids = op.create_many(namespace, bodies, workers=workers)
    applied = time.monotonic()
    done = watch.wait_for(uids, timeout_s=timeout_s)
    cpu = cpu_delta(cpu0, cpu_seconds(tb, op.proc.pid))
    hub_calls = requests_delta(hub0, api_requests(tb, "hub"), len(bodies))
    watch.stop()
    if spy is not None:
        spy.wait()
    spread: dict[str, int] = {}
    for uid in uids:
        spread[watch.where[uid]] = spread.get(watch.where[uid], 0) + 1
    figures = {
        "apply_s": round(applied - t0, 2),
        "all_member_jobs_s": round(done - t0, 2),
        "seen_s": seen_quantiles(watch, uids, t0),
        "spread": dict(sorted(spread.items())),
        "cpu_s": cpu,
        # calls to the hub's API server per AIJob until every member Job existed: the
        # bench's own create (1 "POST aijobs") and the operator's reads and writes
        "hub_requests_per_aijob": hub_calls,
    }
    return Dispatch(figures=figures, watch=watch, uids=uids, t0=t0, done=done)


#: The scale bed's four GPU types (as in testbed/nodes.yaml, plus T4), two per member in
#: turn: member 1 has A100 and V100 nodes, member 2 V100 and H100, member 3 H100 and T4...
SCALE_GPU_MODELS: dict[str, dict[str, Any]] = {
    "A100-80GB": {
        "product": "NVIDIA A100-SXM4-80GB",
        "family": "ampere",
        "memory_mib": 81920,
        "power_limit_w": 400,
        "idle_power_w": 60,
    },
    "V100-32GB": {
        "product": "Tesla V100-SXM2-32GB",
        "family": "volta",
        "memory_mib": 32768,
        "power_limit_w": 300,
        "idle_power_w": 40,
    },
    "H100-80GB": {
        "product": "NVIDIA H100 80GB HBM3",
        "family": "hopper",
        "memory_mib": 81559,
        "power_limit_w": 700,
        "idle_power_w": 70,
    },
    "T4-16GB": {
        "product": "Tesla T4",
        "family": "turing",
        "memory_mib": 15360,
        "power_limit_w": 70,
        "idle_power_w": 10,
    },
}


def scale_layout(members: int, nodes: int, gpus_per_node: int = 8) -> dict[str, Any]:
    """A nodes file (testbed/spec.py format) for ``members`` members of ``nodes`` fake
    nodes each, without the GPU metrics stack; each member's nodes are two of the four
    GPU types of :data:`SCALE_GPU_MODELS`, half and half."""
    if members < 1 or nodes < 1 or gpus_per_node < 1:
        raise ValueError("members, nodes and GPUs per node must be at least 1")
    types = list(SCALE_GPU_MODELS)
    layout: dict[str, Any] = {"metrics": False, "gpu_models": SCALE_GPU_MODELS, "members": {}}
    for i in range(members):
        groups = []
        for j, count in enumerate((nodes - nodes // 2, nodes // 2)):
            if count:
                gpu = types[(i + j) % len(types)]
                groups.append(
                    {
                        "prefix": f"m{i + 1:02d}-{gpu.split('-')[0].lower()}",
                        "count": count,
                        "gpu_model": gpu,
                        "gpus": gpus_per_node,
                        "cpu": 96,
                        "memory_gib": 1024,
                    }
                )
        layout["members"][f"member-{i + 1:02d}"] = groups
    return layout
