"""Glue between the local test bed and the operator: register members, run the operator.

Used by ``make demo`` and the end-to-end tests. It does on the hub what an
admin does on a real one: install the CRDs (with the real ``kubectl``), create
the operator's namespace, one kubeconfig Secret and one MemberCluster per
member, and the policy ConfigMap.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from cpn.adapters.hubsetup import register
from testbed.bed import embedded_kubeconfig

ROOT = Path(__file__).resolve().parents[3]
CRDS = ROOT / "crds"
DEFAULT_POLICY = ROOT / "examples" / "policies" / "default.yaml"
NAMESPACE = "cpn-system"


def policy_configmap(policy_yaml: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cpn-policy", "namespace": namespace},
        "data": {"policy.yaml": policy_yaml},
    }


def bootstrap(
    kubectl: Path | str,
    hub_kubeconfig: Path,
    members: Mapping[str, Path],
    *,
    prometheus: Mapping[str, str] | None = None,
    policy_yaml: str | None = None,
    bandwidth_gbps: float = 10.0,
    namespace: str = NAMESPACE,
) -> None:
    """Install CRDs, namespace, member Secrets and MemberClusters, and the policy on the hub."""
    env = {**os.environ, "KUBECONFIG": str(hub_kubeconfig)}
    subprocess.run(
        [str(kubectl), "apply", "--server-side", "-f", str(CRDS)],
        check=True,
        env=env,
        capture_output=True,
    )
    subprocess.run(
        [
            str(kubectl),
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/aijobs.cpn.io",
            "crd/memberclusters.cpn.io",
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    text = policy_yaml if policy_yaml is not None else DEFAULT_POLICY.read_text()
    names = sorted(members)
    secrets = [
        {
            "metadata": {"name": f"member-{name}", "namespace": namespace},
            "stringData": {"kubeconfig": embedded_kubeconfig(members[name])},
        }
        for name in names
    ]
    bodies = [
        {
            "apiVersion": "cpn.io/v1alpha1",
            "kind": "MemberCluster",
            "metadata": {"name": name},
            "spec": {
                "kubeconfigSecret": {"name": f"member-{name}"},
                "prometheusURL": (prometheus or {}).get(name, ""),
                "bandwidthGbps": {o: bandwidth_gbps for o in names if o != name},
            },
        }
        for name in names
    ]
    register(
        hub_kubeconfig.read_text(),
        namespace,
        configmaps=[policy_configmap(text, namespace)],
        secrets=secrets,
        members=bodies,
    )


def bootstrap_testbed(
    tb: Any, *, policy_yaml: str | None = None, bandwidth_gbps: float = 10.0
) -> None:
    """:func:`bootstrap` for every member of a running :class:`testbed.bed.Testbed`."""
    bootstrap(
        tb.kubectl,
        tb.kubeconfig("hub"),
        {m: tb.kubeconfig(m) for m in tb.members},
        prometheus={m: tb.prometheus_url(m) for m in tb.members},
        policy_yaml=policy_yaml,
        bandwidth_gbps=bandwidth_gbps,
    )


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)


def operator_env(hub_kubeconfig: Path, **settings: object) -> dict[str, str]:
    """Environment of an operator process pointed at the hub."""
    env = {**os.environ, "KUBECONFIG": str(hub_kubeconfig), "CPN_NAMESPACE": NAMESPACE}
    env.update({f"CPN_{k.upper()}": str(v) for k, v in settings.items()})
    return env


@cache
def warm_predictor() -> None:
    """Train the predictor an operator trains at its start, once in this process: the inner
    cross-validation's answer is then kept on disk (``predictor.calibration_cache``, the
    same ``CPN_CACHE_DIR``), so every operator started from here trains in about a second
    instead of half a minute of CPU."""
    from cpn.api.predictions import PredictorEstimator

    PredictorEstimator()


def start_operator(
    hub_kubeconfig: Path, log_path: Path, *, args: Sequence[str] = (), **settings: object
) -> subprocess.Popen[bytes]:
    """Start ``cpn run`` as its own process (so tests can SIGKILL it), logging to a file;
    the predictor's cached answer is made first (:func:`warm_predictor`)."""
    warm_predictor()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "cpn", "run", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=operator_env(hub_kubeconfig, **settings),
            start_new_session=True,
        )


def wait_until(predicate: Any, *, timeout_s: float, what: str, every_s: float = 0.25) -> Any:
    """Poll ``predicate`` until it returns a truthy value; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(every_s)
