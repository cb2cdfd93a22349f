"""Kueue's MultiKueue as a peer on the test bed: one Kueue controller manager per cluster.

The hub's Kueue is the MultiKueue manager: a ClusterQueue ``cpn-peer`` whose AdmissionCheck
(controller ``kueue.x-k8s.io/multikueue``) names a MultiKueueConfig listing every member as a
MultiKueueCluster (its kubeconfig in a Secret of ``kueue-system``). Each member runs its own
Kueue (MultiKueue creates a Workload on every worker, the worker's Kueue admits it in its own
ClusterQueue/LocalQueue of the same names, and the manager then creates the Job copy there).

No cert-manager and no Service: each Kueue serves its webhooks on 127.0.0.1 with a serving
certificate from the bed's CA (``internalCertManagement.enable: false``, ``webhook.certDir``),
and the bed registers only the webhooks of Kueue's own kinds and of ``batch/v1`` Jobs, by URL.
The CRDs are installed without their conversion webhooks (only v1beta2, the stored version,
is used). Metrics and the visibility server are off; the health probe is on 127.0.0.1.

Usage: ``cpn testbed up --with kueue``, or :func:`start` on a running :class:`Testbed`;
then a ``batch/v1`` Job labelled ``kueue.x-k8s.io/queue-name: cpn-peer`` in a namespace
made by :func:`queue_namespace` is run on a member. The binary and CRDs come from
``testbed/kueue/build.sh`` (cached outside the work tree by a hash of its inputs).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed import procs
from testbed.bed import TestbedError, embedded_kubeconfig
from testbed.binaries import MissingBinaryError, cache_dir, cache_key

KUEUE_DIR = Path(__file__).with_name("kueue")
COMPONENT = "kueue"
NAMESPACE = "kueue-system"
QUEUE = "cpn-peer"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ADMISSION_CHECK = "cpn-peer-multikueue"
#: client-side limits of every Kueue's client of its own cluster (Kueue's defaults)
DEFAULT_QPS, DEFAULT_BURST = 20.0, 30
#: Kueue v0.17.0 loads a serving pair from here whenever internalCertManagement is off
#: (cmd/kueue/main.go), even with its metrics server off; the only path outside the bed's
#: state folder that the bed writes
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
#: webhook paths the bed registers: Kueue's own kinds and batch/v1 Jobs (no other framework)
_WEBHOOK_PATH_PARTS = ("-kueue-x-k8s-io-", "-batch-v1-job")


def default_root() -> Path:
    """``$CPN_TESTBED_KUEUE``, else ``${CPN_TESTBED_CACHE:-~/.cache/cpn-testbed}/kueue-<key>``
    with <key> from sha256(go.mod + go.sum + build.sh), as build.sh computes it."""
    explicit = os.environ.get("CPN_TESTBED_KUEUE")
    if explicit:
        return Path(explicit)
    key = cache_key(KUEUE_DIR, ("go.mod", "go.sum", "build.sh"))
    return cache_dir() / f"kueue-{key}"


def locate(root: Path | None = None) -> Path:
    """The build folder (bin/kueue, crd/, webhook.yaml) or MissingBinaryError."""
    root = root or default_root()
    if not os.access(root / "bin" / "kueue", os.X_OK) or not (root / "build.ok").exists():
        raise MissingBinaryError(f"Kueue is not built in {root}: run `bash testbed/kueue/build.sh`")
    return root


def build() -> Path:
    """Run build.sh (reuses the cache when it is there); return the build folder."""
    out = subprocess.run(
        ["bash", str(KUEUE_DIR / "build.sh")], check=False, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise TestbedError(f"testbed/kueue/build.sh failed: {out.stderr.strip()[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Client-side rate limits of each Kueue's client of its own cluster."""

    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST


# ---------------------------------------------------------------------- manifests


def config(tb: Any, cluster: str, limits: Limits) -> dict[str, Any]:
    """Kueue's Configuration for the Kueue of ``cluster``."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{tb.port(cluster, 'kueue-health')}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {
            "port": tb.port(cluster, "kueue-webhook"),
            "host": "127.0.0.1",
            "certDir": str(tb.cluster_dir(cluster) / "kueue-certs"),
        },
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": limits.qps, "burst": limits.burst},
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": {"VisibilityOnDemand": False},
    }


def webhook_configurations(root: Path, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations cut to Kueue's kinds and Jobs, pointed at ``url``."""
    out = []
    for doc in yaml.safe_load_all((root / "webhook.yaml").read_text()):
        if not doc:
            continue
        kept = []
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"]["path"]
            if not any(part in path for part in _WEBHOOK_PATH_PARTS):
                continue
            hook["clientConfig"] = {
                "url": url + path,
                "caBundle": base64.b64encode(ca_pem).decode(),
            }
            kept.append(hook)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        doc["webhooks"] = kept
        out.append(doc)
    return out


def crds(root: Path) -> list[dict[str, Any]]:
    """Kueue's CRDs as shipped (no conversion webhook: the API server keeps v1beta2)."""
    return [yaml.safe_load(p.read_text()) for p in sorted((root / "crd").glob("*.yaml"))]


def _quota(cpu: str, memory: str, gpus: str) -> list[dict[str, Any]]:
    return [
        {
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [
                {
                    "name": "default",
                    "resources": [
                        {"name": "cpu", "nominalQuota": cpu},
                        {"name": "memory", "nominalQuota": memory},
                        {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                    ],
                }
            ],
        }
    ]


def queue_objects(tb: Any, cluster: str) -> list[dict[str, Any]]:
    """ResourceFlavor + ClusterQueue (+ MultiKueue objects on the hub). Quota: the hub's is
    far above the bed (MultiKueue dispatches, the members' own quota decides); a member's is
    its nodes' capacity."""
    kueue = "kueue.x-k8s.io/v1beta2"
    docs: list[dict[str, Any]] = [
        {"apiVersion": kueue, "kind": "ResourceFlavor", "metadata": {"name": "default"}}
    ]
    spec = tb.spec.cluster(cluster)
    if spec.is_hub:
        quota = _quota("1000000", "100000Ti", "100000")
        docs += [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"kueue-{m}", "namespace": NAMESPACE},
                "stringData": {"kubeconfig": embedded_kubeconfig(tb.kubeconfig(m))},
            }
            for m in tb.members
        ]
        docs += [
            {
                "apiVersion": kueue,
                "kind": "MultiKueueCluster",
                "metadata": {"name": m},
                "spec": {
                    "clusterSource": {
                        "kubeConfig": {"locationType": "Secret", "location": f"kueue-{m}"}
                    }
                },
            }
            for m in tb.members
        ]
        docs += [
            {
                "apiVersion": kueue,
                "kind": "MultiKueueConfig",
                "metadata": {"name": QUEUE},
                "spec": {"clusters": list(tb.members)},
            },
            {
                "apiVersion": kueue,
                "kind": "AdmissionCheck",
                "metadata": {"name": ADMISSION_CHECK},
                "spec": {
                    "controllerName": "kueue.x-k8s.io/multikueue",
                    "parameters": {
                        "apiGroup": "kueue.x-k8s.io",
                        "kind": "MultiKueueConfig",
                        "name": QUEUE,
                    },
                },
            },
        ]
    else:
        cpu = sum(n.cpu for n in spec.nodes)
        mem = sum(n.memory_gib for n in spec.nodes)
        gpus = sum(n.gpus for n in spec.nodes)
        quota = _quota(str(cpu), f"{mem}Gi", str(gpus))
    cq: dict[str, Any] = {
        "apiVersion": kueue,
        "kind": "ClusterQueue",
        "metadata": {"name": QUEUE},
        "spec": {"namespaceSelector": {}, "resourceGroups": quota},
    }
    if spec.is_hub:
        cq["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": ADMISSION_CHECK}]}
    docs.append(cq)
    return docs


# ---------------------------------------------------------------------- processes


def _kubectl_apply(tb: Any, cluster: str, docs: list[dict[str, Any]]) -> None:
    text = yaml.safe_dump_all(docs, sort_keys=False)
    out = subprocess.run(
        [
            str(tb.kubectl),
            f"--kubeconfig={tb.kubeconfig(cluster)}",
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
        ],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise TestbedError(f"kubectl apply on {cluster} failed: {out.stderr.strip()[:2000]}")


def _healthy(tb: Any, cluster: str) -> bool:
    url = f"http://127.0.0.1:{tb.port(cluster, 'kueue-health')}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def running(tb: Any) -> dict[str, procs.Proc]:
    """The live Kueue processes of the bed by cluster."""
    out = {}
    for key, proc in tb.process_table().items():
        cluster, component = key.split("/", 1)
        if component == COMPONENT and procs.alive(proc):
            out[cluster] = proc
    return out


def _wait(what: str, probe: Any, deadline: float, log: Path | None = None) -> None:
    while not probe():
        if time.monotonic() > deadline:
            raise TestbedError(f"timed out waiting for {what}" + (f"; see {log}" if log else ""))
        time.sleep(0.2)


def start(
    tb: Any, *, limits: Limits | None = None, root: Path | None = None, timeout_s: float = 180.0
) -> float:
    """Install Kueue on every cluster of a running bed and start one Kueue per cluster
    (restarting those that run, so new ``limits`` apply); returns seconds taken."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    root = locate(root)
    limits = limits or Limits()
    stop(tb)
    exe = root / "bin" / "kueue"
    ca_pem = tb.pki.ca.cert.read_bytes()
    serving = tb.pki.issue_serving("kueue-webhook")
    crd_docs = crds(root)
    METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(serving.cert, METRICS_CERT_DIR / "tls.crt")
    shutil.copyfile(serving.key, METRICS_CERT_DIR / "tls.key")
    for cluster in tb.clusters:
        d = tb.cluster_dir(cluster)
        certs = d / "kueue-certs"
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(serving.cert, certs / "tls.crt")
        shutil.copyfile(serving.key, certs / "tls.key")
        cfg = d / "kueue.yaml"
        cfg.write_text(yaml.safe_dump(config(tb, cluster, limits), sort_keys=False))
        url = f"https://127.0.0.1:{tb.port(cluster, 'kueue-webhook')}"
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        _kubectl_apply(tb, cluster, [*crd_docs, ns])
        _crds_established(tb, cluster, [d["metadata"]["name"] for d in crd_docs], deadline)
        log = tb.log(cluster, COMPONENT)
        proc = procs.spawn(
            [str(exe), f"--config={cfg}", f"--kubeconfig={tb.kubeconfig(cluster)}"],
            log,
            cwd=d,
        )
        tb.record_process(f"{cluster}/{COMPONENT}", proc)
        _kubectl_apply(tb, cluster, webhook_configurations(root, url, ca_pem))
    for cluster in tb.clusters:
        log = tb.log(cluster, COMPONENT)

        def ready(c: str = cluster, lg: Path = log) -> bool:
            if c not in running(tb):
                tail = lg.read_text(errors="replace")[-1500:] if lg.exists() else ""
                raise TestbedError(f"{c}/kueue exited during start-up; see {lg}:\n{tail}")
            return _healthy(tb, c)

        _wait(f"{cluster}/kueue ready", ready, deadline, log)
    for cluster in tb.clusters:
        # the webhooks answer once the manager is ready; objects are applied through them
        _apply_until_ok(tb, cluster, queue_objects(tb, cluster), deadline)
    _wait("MultiKueue clusters Active", lambda: _clusters_active(tb), deadline)
    return time.monotonic() - t0


def _crds_established(tb: Any, cluster: str, names: list[str], deadline: float) -> None:
    """Wait until the API server serves the CRDs (Kueue exits if a kind is not served yet)."""
    out = subprocess.run(
        [
            str(tb.kubectl),
            f"--kubeconfig={tb.kubeconfig(cluster)}",
            "wait",
            "--for=condition=Established",
            f"--timeout={max(1, int(deadline - time.monotonic()))}s",
            *(f"crd/{n}" for n in names),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise TestbedError(f"Kueue's CRDs not established on {cluster}: {out.stderr.strip()}")


def _apply_until_ok(tb: Any, cluster: str, docs: list[dict[str, Any]], deadline: float) -> None:
    while True:
        try:
            _kubectl_apply(tb, cluster, docs)
            return
        except TestbedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _clusters_active(tb: Any) -> bool:
    out = subprocess.run(
        [
            str(tb.kubectl),
            f"--kubeconfig={tb.kubeconfig('hub')}",
            "get",
            "multikueueclusters.kueue.x-k8s.io,admissionchecks.kueue.x-k8s.io",
            "-o",
            "yaml",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return False
    items = (yaml.safe_load(out.stdout) or {}).get("items") or []
    active = 0
    for item in items:
        conds = {c["type"]: c["status"] for c in (item.get("status") or {}).get("conditions") or []}
        active += conds.get("Active") == "True"
    return active == len(tb.members) + 1


WEBHOOK_CONFIGS = (
    "mutatingwebhookconfiguration/kueue-mutating-webhook-configuration",
    "validatingwebhookconfiguration/kueue-validating-webhook-configuration",
)


def stop(tb: Any) -> None:
    """Stop every Kueue of the bed and unregister its webhooks (they fail closed: left in
    place they would refuse every Job); Kueue's other objects stay."""
    live = running(tb)
    for cluster in live:
        subprocess.run(
            [
                str(tb.kubectl),
                f"--kubeconfig={tb.kubeconfig(cluster)}",
                "delete",
                "--ignore-not-found",
                *WEBHOOK_CONFIGS,
            ],
            capture_output=True,
            check=False,
        )
    if procs.stop(list(live.values())):
        raise TestbedError("could not stop Kueue")


def queue_namespace(tb: Any, name: str) -> None:
    """Create namespace ``name`` with LocalQueue ``cpn-peer`` on the hub and every member."""
    for cluster in tb.clusters:
        _kubectl_apply(
            tb,
            cluster,
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": QUEUE, "namespace": name},
                    "spec": {"clusterQueue": QUEUE},
                },
            ],
        )


def delete_namespace(tb: Any, name: str) -> None:
    """Delete namespace ``name`` everywhere (no wait)."""
    for cluster in tb.clusters:
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(
                [
                    str(tb.kubectl),
                    f"--kubeconfig={tb.kubeconfig(cluster)}",
                    "delete",
                    "namespace",
                    name,
                    "--wait=false",
                    "--ignore-not-found",
                ],
                capture_output=True,
                check=True,
            )
