"""The local test bed: a hub and member Kubernetes control planes on 127.0.0.1.

``Testbed(...).up()`` starts, per cluster and all clusters in parallel:

* hub:    etcd, kube-apiserver, kube-controller-manager
* member: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok
  (fake GPU nodes from ``nodes.yaml``), the simulated DCGM/node exporter
  (``testbed.dcgm``) and Prometheus scraping it.

Everything lives under one state directory (default ``/tmp/cpn-testbed``):
``state.json`` (ports and processes), ``pki/``, ``kubeconfig`` (contexts hub,
member-a, ...), ``<cluster>/`` (data, configs, per-cluster kubeconfig) and
``logs/<cluster>-<component>.log``. ``up`` is idempotent (it starts only what
is not running), ``down`` stops every process it recorded.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml

from testbed import procs
from testbed.binaries import Binaries
from testbed.pki import Pki
from testbed.spec import (
    KWOK_NODE_ANNOTATION,
    KWOK_NODE_VALUE,
    BedSpec,
    ClusterSpec,
    default_nodes_file,
    ephemeral_range,
    load_spec,
    ports_problem,
)
from testbed.staging import LINKS_FILE, write_links

KWOK_CONFIG = Path(__file__).with_name("kwok") / "kwok.yaml"
DEFAULT_STATE_DIR = Path("/tmp/cpn-testbed")
#: kube-controller-manager controllers (canonical names since Kubernetes 1.28)
KCM_CONTROLLERS = (
    "job-controller",
    "cronjob-controller",
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "ttl-after-finished-controller",
    "pod-garbage-collector-controller",
    "resourcequota-controller",
)
#: stop order: clients first, storage last
_STOP_TIERS = (
    ("kueue", "prometheus", "dcgm", "kwok", "kube-scheduler", "kube-controller-manager"),
    ("kube-apiserver",),
    ("etcd",),
)
PROMETHEUS_SCRAPE_INTERVAL_S = 2
#: Starts again, after the first, of a component whose Go runtime crashed during start-up (a
#: race in the component, not in its configuration: KWOK v0.8.0 died once of "fatal error:
#: concurrent map writes" in its CEL set-up on 5 Dec 2026 and failed a whole CI run with it)
CRASH_RESTARTS = 2


def go_runtime_crash(log_tail: str) -> str | None:
    """The Go runtime's fatal error in ``log_tail`` (what a process wrote before it exited),
    e.g. "concurrent map writes", or None: it exited for another reason (a bad flag, a port
    taken), which starting it again would not cure."""
    for line in log_tail.splitlines():
        if line.startswith("fatal error: "):
            return line.removeprefix("fatal error: ").strip()
    return None


def _read_from(log: Path, offset: int) -> str:
    """What ``log`` holds past ``offset``; "" if there is no log (nothing was started)."""
    if not log.exists():
        return ""
    with log.open(errors="replace") as f:
        f.seek(offset)
        return f.read()


class TestbedError(RuntimeError):
    """The bed could not be brought up; the message names the component and its log."""

    __test__ = False  # not a pytest class


_FILE_KEYS = {
    "certificate-authority": "certificate-authority-data",
    "client-certificate": "client-certificate-data",
    "client-key": "client-key-data",
}


def embedded_kubeconfig(path: Path) -> str:
    """The kubeconfig at ``path`` (the bed's kubeconfigs name their certificates by file) with every
    referenced file inlined, so it can live in a Secret."""
    doc = yaml.safe_load(path.read_text())
    for section in ("clusters", "users"):
        for entry in doc.get(section) or []:
            body = entry.get("cluster") or entry.get("user") or {}
            for file_key, data_key in _FILE_KEYS.items():
                if file_key in body:
                    body[data_key] = base64.b64encode(
                        Path(body.pop(file_key)).read_bytes()
                    ).decode()
    return str(yaml.safe_dump(doc, sort_keys=False))


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentHealth:
    """One component of one cluster: is its process alive, does it answer its health check."""

    cluster: str
    component: str
    pid: int | None
    running: bool
    healthy: bool
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BedStatus:
    """Health of every component of the bed."""

    components: tuple[ComponentHealth, ...]

    @property
    def healthy(self) -> bool:
        """Every component runs and answers its health check."""
        return bool(self.components) and all(c.healthy for c in self.components)

    @property
    def any_running(self) -> bool:
        """At least one process of the bed is alive."""
        return any(c.running for c in self.components)


@dataclass(slots=True, kw_only=True)
class UpReport:
    """What ``up`` did and how long it took."""

    elapsed_s: float
    started: list[str] = field(default_factory=list)
    already_running: bool = False


def _http_get(url: str, *, ctx: ssl.SSLContext | None = None, timeout_s: float = 2.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s, context=ctx) as resp:
        body: bytes = resp.read()
        return body.decode("utf-8", "replace")


def _port_free(port: int) -> bool:
    """True if nothing listens on 127.0.0.1:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _any_alive(saved: dict[str, Any]) -> bool:
    """Whether any process recorded in a saved state still runs."""
    return any(procs.alive(procs.Proc.from_json(v)) for v in saved["procs"].values())


def _insecure_ctx() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Testbed:
    """Hub + member clusters on loopback; see the module docstring."""

    __test__ = False  # not a pytest class

    def __init__(
        self,
        *,
        state_dir: Path | None = None,
        nodes_file: Path | None = None,
        port_base: int | None = None,
        bin_dir: Path | None = None,
    ) -> None:
        self.state_dir = Path(
            state_dir or os.environ.get("CPN_TESTBED_DIR") or DEFAULT_STATE_DIR
        ).absolute()
        self._bin_dir = bin_dir
        saved = self._load_state()
        if saved and nodes_file is None and port_base is None and _any_alive(saved):
            # a running bed keeps the layout it was started with (if that file still exists);
            # a stopped one is started again from this checkout's layout, not a stale one
            if Path(saved["nodes_file"]).exists():
                nodes_file = Path(saved["nodes_file"])
            port_base = int(saved["port_base"])
        self.nodes_file = (nodes_file or default_nodes_file()).absolute()
        self.spec: BedSpec = load_spec(self.nodes_file, port_base=port_base)
        self.pki = Pki(self.state_dir / "pki")
        self.logs_dir = self.state_dir / "logs"
        self._lock = threading.Lock()
        self._procs: dict[str, procs.Proc] = {}
        if saved:
            self._procs = {k: procs.Proc.from_json(v) for k, v in saved["procs"].items()}

    # ------------------------------------------------------------------ paths and urls

    @property
    def clusters(self) -> tuple[str, ...]:
        """Every cluster name, hub first."""
        return tuple(c.name for c in self.spec.clusters)

    def set_links(
        self, links: dict[tuple[str, str], float], sizes: dict[str, int] | None = None
    ) -> None:
        """Set the bed's true link table (Gbit/s between two members, both ways): how fast
        the simulated staging copies go (testbed/staging.py), and the true ``sizes`` (input
        ident -> bytes) of inputs declared without one; cpn never reads it."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        write_links(self.state_dir / LINKS_FILE, links, sizes)

    @property
    def members(self) -> tuple[str, ...]:
        """The member cluster names."""
        return tuple(c.name for c in self.spec.members)

    @property
    def kubeconfig_merged(self) -> Path:
        """One kubeconfig with a context per cluster (current context: hub)."""
        return self.state_dir / "kubeconfig"

    def kubeconfig(self, cluster: str) -> Path:
        """The admin kubeconfig of ``cluster``."""
        return self.state_dir / cluster / "admin.kubeconfig"

    def cluster_dir(self, cluster: str) -> Path:
        """The data and config folder of ``cluster``."""
        return self.state_dir / cluster

    def port(self, cluster: str, component: str) -> int:
        """Loopback port of a component."""
        return self.spec.cluster(cluster).port(self.spec.port_base, component)

    def api_url(self, cluster: str) -> str:
        """https URL of the cluster's kube-apiserver."""
        return f"https://127.0.0.1:{self.port(cluster, 'kube-apiserver')}"

    def prometheus_url(self, cluster: str) -> str:
        """http URL of a member's Prometheus."""
        self._require_member(cluster)
        return f"http://127.0.0.1:{self.port(cluster, 'prometheus')}"

    def dcgm_url(self, cluster: str) -> str:
        """http URL of a member's simulated exporters (``/nodes/<node>/dcgm``, ``.../node``)."""
        self._require_member(cluster)
        return f"http://127.0.0.1:{self.port(cluster, 'dcgm')}"

    @property
    def binaries(self) -> Binaries:
        """Every executable (raises MissingBinaryError if something is not installed)."""
        return Binaries.locate(self._bin_dir)

    @property
    def kubectl(self) -> Path:
        """kubectl of the same minor version as the servers."""
        return self.binaries.kubectl

    def log(self, cluster: str, component: str) -> Path:
        """Log file of one component."""
        return self.logs_dir / f"{cluster}-{component}.log"

    def api_client(self, cluster: str) -> Any:
        """A ``kubernetes.client.ApiClient`` for ``cluster`` (admin)."""
        from kubernetes import config

        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig(cluster))
        )

    def _require_member(self, cluster: str) -> None:
        if self.spec.cluster(cluster).is_hub:
            raise KeyError(f"{cluster} is the hub; it has no Prometheus")

    # ------------------------------------------------------------------ state file

    def _load_state(self) -> dict[str, Any] | None:
        path = self.state_dir / "state.json"
        if not path.exists():
            return None
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError:
            return None
        return raw if isinstance(raw, dict) and "procs" in raw else None

    def _save_state(self) -> None:
        with self._lock:
            raw = {
                "nodes_file": str(self.nodes_file),
                "port_base": self.spec.port_base,
                "procs": {k: p.to_json() for k, p in self._procs.items()},
            }
            tmp = self.state_dir / "state.json.tmp"
            tmp.write_text(json.dumps(raw, indent=1))
            tmp.replace(self.state_dir / "state.json")

    def process_table(self) -> dict[str, procs.Proc]:
        """Every recorded process by ``<cluster>/<component>`` (alive or not)."""
        return dict(self._procs)

    def record_process(self, key: str, proc: procs.Proc) -> None:
        """Record a process started beside the bed (``<cluster>/<component>``, e.g. the
        MultiKueue peer's ``hub/kueue``) so that ``down`` stops it too."""
        with self._lock:
            self._procs[key] = proc
        self._save_state()

    def processes(self) -> list[procs.Proc]:
        """The bed's processes that are alive now."""
        return [p for p in self._procs.values() if procs.alive(p)]

    def rss_bytes(self) -> int:
        """Resident memory of the whole bed (sum over its live processes)."""
        return sum(procs.rss_bytes(p) for p in self._procs.values())

    # ------------------------------------------------------------------ config files

    def _write_kubeconfig(self, path: Path, contexts: list[str], user: str, current: str) -> None:
        cert = self.pki.scheduler() if user == "kube-scheduler" else self.pki.admin()
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": c,
                    "cluster": {
                        "server": self.api_url(c),
                        "certificate-authority": str(self.pki.ca.cert),
                    },
                }
                for c in contexts
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate": str(cert.cert),
                        "client-key": str(cert.key),
                    },
                }
            ],
            "contexts": [{"name": c, "context": {"cluster": c, "user": user}} for c in contexts],
            "current-context": current,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def _write_configs(self, cluster: ClusterSpec) -> None:
        d = self.cluster_dir(cluster.name)
        d.mkdir(parents=True, exist_ok=True)
        self._write_kubeconfig(self.kubeconfig(cluster.name), [cluster.name], "admin", cluster.name)
        if cluster.is_hub:
            return
        self._write_kubeconfig(
            d / "scheduler.kubeconfig", [cluster.name], "kube-scheduler", cluster.name
        )
        scheduler = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(d / "scheduler.kubeconfig")},
            "leaderElection": {"leaderElect": False},
        }
        (d / "scheduler.yaml").write_text(yaml.safe_dump(scheduler, sort_keys=False))
        dcgm = f"127.0.0.1:{self.port(cluster.name, 'dcgm')}"
        prom = {
            "global": {
                "scrape_interval": f"{PROMETHEUS_SCRAPE_INTERVAL_S}s",
                "scrape_timeout": f"{PROMETHEUS_SCRAPE_INTERVAL_S}s",
                "evaluation_interval": f"{PROMETHEUS_SCRAPE_INTERVAL_S}s",
                "external_labels": {"cluster": cluster.name},
            },
            "scrape_configs": [
                {
                    # one target per fake node, as a dcgm-exporter DaemonSet would have;
                    # the simulator serves the targets list itself (HTTP service discovery)
                    "job_name": job,
                    "http_sd_configs": [
                        {"url": f"http://{dcgm}/sd/{job}", "refresh_interval": "5s"}
                    ],
                }
                for job in ("dcgm", "node")
            ],
        }
        (d / "prometheus.yml").write_text(yaml.safe_dump(prom, sort_keys=False))

    def _write_merged_kubeconfig(self) -> None:
        self._write_kubeconfig(self.kubeconfig_merged, list(self.clusters), "admin", "hub")

    # ------------------------------------------------------------------ commands

    def _argv(self, cluster: ClusterSpec, component: str, b: Binaries) -> list[str]:
        name = cluster.name
        d = self.cluster_dir(name)

        def port(c: str) -> int:
            return cluster.port(self.spec.port_base, c)

        admin = str(self.kubeconfig(name))
        if component == "etcd":
            client = f"http://127.0.0.1:{port('etcd')}"
            peer = f"http://127.0.0.1:{port('etcd-peer')}"
            return [
                str(b.etcd),
                f"--name={name}",
                f"--data-dir={d / 'etcd'}",
                "--logger=zap",
                "--log-level=warn",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={name}={peer}",
                "--unsafe-no-fsync",
                "--quota-backend-bytes=2147483648",
            ]
        if component == "kube-apiserver":
            serving = self.pki.serving(name)
            return [
                str(b.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{port('etcd')}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port('kube-apiserver')}",
                f"--cert-dir={d / 'apiserver-certs'}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={self.pki.ca.cert}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self.pki.sa_pub}",
                f"--service-account-signing-key-file={self.pki.sa_key}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                # no node-lifecycle controller runs to lift the not-ready taint this plugin
                # puts on new nodes; kwok's nodes are Ready as soon as kwok sees them
                "--disable-admission-plugins=TaintNodesByCondition",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                "--v=1",
            ]
        if component == "kube-controller-manager":
            return [
                str(b.kube_controller_manager),
                f"--kubeconfig={admin}",
                f"--authentication-kubeconfig={admin}",
                f"--authorization-kubeconfig={admin}",
                "--authentication-skip-lookup=true",
                f"--controllers={','.join(KCM_CONTROLLERS)}",
                f"--root-ca-file={self.pki.ca.cert}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port('kube-controller-manager')}",
                f"--cert-dir={d / 'kcm-certs'}",
                "--profiling=false",
                "--v=1",
            ]
        if component == "kube-scheduler":
            sk = str(d / "scheduler.kubeconfig")
            return [
                str(b.kube_scheduler),
                f"--config={d / 'scheduler.yaml'}",
                f"--authentication-kubeconfig={sk}",
                f"--authorization-kubeconfig={sk}",
                "--authentication-skip-lookup=true",
                "--bind-address=127.0.0.1",
                f"--secure-port={port('kube-scheduler')}",
                f"--cert-dir={d / 'scheduler-certs'}",
                "--profiling=false",
                "--v=1",
            ]
        if component == "kwok":
            return [
                str(b.kwok),
                f"--kubeconfig={admin}",
                f"--config={KWOK_CONFIG}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}",
                "--node-lease-duration-seconds=0",
                f"--server-address=127.0.0.1:{port('kwok')}",
            ]
        if component == "dcgm":
            return [
                sys.executable,
                "-m",
                "testbed.dcgm",
                f"--kubeconfig={admin}",
                f"--cluster={name}",
                f"--port={port('dcgm')}",
                f"--nodes-file={self.nodes_file}",
                f"--links-file={self.state_dir / LINKS_FILE}",
            ]
        if component == "prometheus":
            return [
                str(b.prometheus),
                f"--config.file={d / 'prometheus.yml'}",
                f"--storage.tsdb.path={d / 'prometheus'}",
                "--storage.tsdb.retention.time=1d",
                f"--web.listen-address=127.0.0.1:{port('prometheus')}",
                "--log.level=warn",
            ]
        raise KeyError(component)

    def _env(self, cluster: str, component: str) -> dict[str, str]:
        env = dict(os.environ)
        if component == "kwok":
            # kwok also reads ~/.kwok/kwok.yaml; give it an empty home so nothing leaks in
            home = self.cluster_dir(cluster) / "kwok-home"
            home.mkdir(parents=True, exist_ok=True)
            env["HOME"] = str(home)
        if component == "dcgm":
            root = str(Path(__file__).resolve().parent.parent)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        return env

    # ------------------------------------------------------------------ health

    def _check(self, cluster: str, component: str) -> tuple[bool, str]:
        """Ask one component's health endpoint; (healthy, detail)."""
        port = self.port(cluster, component)
        try:
            if component == "etcd":
                body = _http_get(f"http://127.0.0.1:{port}/health")
                return '"health":"true"' in body.replace(" ", ""), body.strip()
            if component == "kube-apiserver":
                ctx = ssl.create_default_context(cafile=str(self.pki.ca.cert))
                body = _http_get(f"https://127.0.0.1:{port}/readyz", ctx=ctx)
                return body.strip() == "ok", body.strip()
            if component in {"kube-controller-manager", "kube-scheduler"}:
                body = _http_get(f"https://127.0.0.1:{port}/healthz", ctx=_insecure_ctx())
                return body.strip() == "ok", body.strip()
            if component in {"kwok", "dcgm"}:
                body = _http_get(f"http://127.0.0.1:{port}/healthz")
                return body.strip() == "ok", body.strip()
            if component == "prometheus":
                body = _http_get(f"http://127.0.0.1:{port}/-/ready")
                return "Ready" in body, body.strip()
        except (OSError, urllib.error.URLError, ssl.SSLError) as e:
            return False, str(getattr(e, "reason", e))
        raise KeyError(component)

    def status(self) -> BedStatus:
        """Process and health-check state of every component."""
        out: list[ComponentHealth] = []
        for c in self.spec.clusters:
            for comp in c.components:
                proc = self._procs.get(f"{c.name}/{comp}")
                running = proc is not None and procs.alive(proc)
                healthy, detail = self._check(c.name, comp) if running else (False, "not running")
                out.append(
                    ComponentHealth(
                        cluster=c.name,
                        component=comp,
                        pid=proc.pid if running and proc else None,
                        running=running,
                        healthy=healthy,
                        detail=detail[:120],
                    )
                )
        return BedStatus(components=tuple(out))

    # ------------------------------------------------------------------ up

    def _wait(
        self,
        what: str,
        probe: Callable[[], bool],
        deadline: float,
        log: Path | None = None,
        every_s: float = 0.2,
    ) -> None:
        while True:
            if probe():
                return
            if time.monotonic() > deadline:
                hint = f"; see {log}" if log else ""
                raise TestbedError(f"timed out waiting for {what}{hint}")
            time.sleep(every_s)

    def _start(self, cluster: ClusterSpec, component: str, b: Binaries, deadline: float) -> bool:
        """Start one component unless it runs; wait until healthy. True if it was started.
        A component whose Go runtime crashes during start-up is started again, at most
        :data:`CRASH_RESTARTS` times."""
        log = self.log(cluster.name, component)
        restarts = 0
        while True:
            offset = log.stat().st_size if log.exists() else 0
            try:
                return self._start_once(cluster, component, b, deadline)
            except RuntimeError:  # TestbedError, or procs.spawn's "exited at once"
                crash = go_runtime_crash(_read_from(log, offset))
                if crash is None or restarts == CRASH_RESTARTS:
                    raise
                restarts += 1
                print(
                    f"testbed: {cluster.name}/{component} crashed at start-up ({crash})",
                    file=sys.stderr,
                )

    def _start_once(
        self, cluster: ClusterSpec, component: str, b: Binaries, deadline: float
    ) -> bool:
        key = f"{cluster.name}/{component}"
        log = self.log(cluster.name, component)
        proc = self._procs.get(key)
        started = False
        if proc is None or not procs.alive(proc):
            ports = [cluster.port(self.spec.port_base, component)]
            if component == "etcd":
                ports.append(cluster.port(self.spec.port_base, "etcd-peer"))
            for port in ports:
                if not _port_free(port):
                    raise TestbedError(
                        f"port {port} for {key} is taken by another process; "
                        "set CPN_TESTBED_PORT_BASE to move the bed"
                    )
            proc = procs.spawn(
                self._argv(cluster, component, b),
                log,
                env=self._env(cluster.name, component),
                cwd=self.cluster_dir(cluster.name),
            )
            with self._lock:
                self._procs[key] = proc
            self._save_state()
            started = True
        running = proc

        def probe() -> bool:
            if not procs.alive(running):
                raise TestbedError(f"{key} exited during start-up; see {log}")
            return self._check(cluster.name, component)[0]

        self._wait(key, probe, deadline, log)
        return started

    def _create_nodes(self, cluster: ClusterSpec) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with contextlib.closing(self.api_client(cluster.name)) as api:
            core = client.CoreV1Api(api)
            for node in cluster.nodes:
                try:  # the created Node is not read back: no decoding of 1,000s of them
                    core.create_node(cast(Any, node.manifest()), _preload_content=False)
                except ApiException as e:
                    if e.status != 409:
                        raise

    def _cluster_ready(self, cluster: ClusterSpec) -> bool:
        """Nodes Ready (kwok played node-initialize) and the default ServiceAccount exists."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with contextlib.closing(self.api_client(cluster.name)) as api:
            core = client.CoreV1Api(api)
            try:
                core.read_namespaced_service_account("default", "default")
            except ApiException as e:
                if e.status == 404:
                    return False
                raise
            if not cluster.nodes:
                return True
            # plain JSON, not the client's models: a member may have 1,000 nodes
            listed = json.loads(  # from the API server's cache (resourceVersion 0), not etcd
                cast(Any, core.list_node(resource_version="0", _preload_content=False)).data
            )
            ready = 0
            for n in listed["items"]:
                conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions", [])}
                ready += conds.get("Ready") == "True"
            return ready >= len(cluster.nodes)

    def _up_cluster(self, cluster: ClusterSpec, b: Binaries, deadline: float) -> list[str]:
        started: list[str] = []
        for component in cluster.components:
            if self._start(cluster, component, b, deadline):
                started.append(f"{cluster.name}/{component}")
            if component == "kube-apiserver" and cluster.nodes:
                self._create_nodes(cluster)
        self._wait(
            f"{cluster.name} nodes and service account",
            lambda: self._cluster_ready(cluster),
            deadline,
            every_s=max(0.2, len(cluster.nodes) / 500),  # a list of 1,000 nodes is ~3 MB
        )
        return started

    def up(self, *, timeout_s: float = 180.0) -> UpReport:
        """Start whatever is not running and wait until every component is healthy."""
        t0 = time.monotonic()
        b = self.binaries
        if self.status().healthy:
            return UpReport(elapsed_s=time.monotonic() - t0, already_running=True)
        problem = ports_problem(self.spec, ephemeral_range())
        if problem:
            raise TestbedError(problem)
        if not self.processes():
            self._cold_reset()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.pki.ensure_ca()
        self.pki.admin()
        self.pki.scheduler()
        for c in self.spec.clusters:
            self.pki.serving(c.name)
            self._write_configs(c)
        self._write_merged_kubeconfig()
        self._save_state()
        deadline = t0 + timeout_s
        report = UpReport(elapsed_s=0.0)
        with ThreadPoolExecutor(max_workers=len(self.spec.clusters)) as pool:
            futures = [pool.submit(self._up_cluster, c, b, deadline) for c in self.spec.clusters]
            errors: list[BaseException] = []
            for f in futures:
                try:
                    report.started += f.result()
                except BaseException as e:
                    errors.append(e)
        if errors:
            raise TestbedError("; ".join(str(e) for e in errors)) from errors[0]
        report.elapsed_s = time.monotonic() - t0
        return report

    def _cold_reset(self) -> None:
        """Nothing runs: start from empty data (PKI is kept) and fresh logs."""
        for c in self.spec.clusters:
            for sub in ("etcd", "prometheus"):
                shutil.rmtree(self.cluster_dir(c.name) / sub, ignore_errors=True)
        shutil.rmtree(self.logs_dir, ignore_errors=True)
        self._procs = {}

    # ------------------------------------------------------------------ down

    def down(self, *, purge: bool = False) -> float:
        """Stop every process of the bed (clients first); return seconds taken."""
        t0 = time.monotonic()
        survivors: list[procs.Proc] = []
        for tier in _STOP_TIERS:
            batch = [p for k, p in self._procs.items() if k.split("/", 1)[1] in tier]
            survivors += procs.stop(batch)
        if survivors:
            raise TestbedError(f"could not stop pids {[p.pid for p in survivors]}")
        self._procs = {}
        if purge:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        elif self.state_dir.exists():
            self._save_state()
        return time.monotonic() - t0

    # ------------------------------------------------------------------ faults

    def stop_component(self, cluster: str, component: str) -> None:
        """Stop one component (to test what happens when it fails); its data is kept."""
        key = f"{cluster}/{component}"
        proc = self._procs.get(key)
        if proc is None:
            raise TestbedError(f"{key} is not part of this bed")
        if procs.stop([proc]):
            raise TestbedError(f"could not stop {key} (pid {proc.pid})")

    @contextlib.contextmanager
    def paused(self, cluster: str, component: str) -> Iterator[int]:
        """Hang one component for the body of the ``with`` (SIGSTOP: its connections stay
        open and nothing answers, as with a hung server or a black-holed link); it is
        always resumed (SIGCONT) after, even when the body fails. Yields its pid."""
        key = f"{cluster}/{component}"
        proc = self._procs.get(key)
        if proc is None or not procs.alive(proc):
            raise TestbedError(f"{key} is not running")
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            yield proc.pid
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)

    def start_component(self, cluster: str, component: str, *, timeout_s: float = 60.0) -> None:
        """Start a stopped component again and wait until it is healthy."""
        spec = self.spec.cluster(cluster)
        if component not in spec.components:
            raise TestbedError(f"{cluster}/{component} is not part of this bed")
        self._start(spec, component, self.binaries, time.monotonic() + timeout_s)

    def stray_processes(self) -> list[int]:
        """Pids of any process whose command line mentions the state dir (should be none),
        other than this process and its ancestors (a shell that started the tests may
        name the dir in its own command line)."""
        needle = str(self.state_dir).encode()
        ours = _ancestors(os.getpid())
        found: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in ours:
                continue
            with contextlib.suppress(OSError):
                if needle in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
        return found


def _ancestors(pid: int) -> set[int]:
    """``pid`` and every process above it, up to init."""
    chain = {pid}
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rpartition(")")[2].split()[1])  # the field after the state: ppid
        chain.add(pid)
    return chain


def iter_status_lines(status: BedStatus) -> Iterator[str]:
    """Human-readable table of a BedStatus."""
    yield f"{'cluster':<10} {'component':<24} {'pid':>7}  {'health':<8} detail"
    for c in status.components:
        health = "ok" if c.healthy else ("running" if c.running else "down")
        yield f"{c.cluster:<10} {c.component:<24} {c.pid or '-':>7}  {health:<8} {c.detail}"
