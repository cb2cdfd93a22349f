"""Security on the real API server (issue #7): least privilege, tenant isolation, credentials,
listening sockets.

The operator runs as its ServiceAccount from manifests/ (a TokenRequest token in a kubeconfig,
no admin certificate), and reaches each member with the member's own ServiceAccount from
manifests/members/rbac (the member Secrets hold token kubeconfigs). Users are ServiceAccounts
``alice`` (namespace team-a, group vision) and ``bob`` (team-b, group nlp) bound to the
``cpn-aijob-editor`` role cpn ships, each in their own namespace only.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from cpn.adapters.kube import client_from_kubeconfig
from cpn.cli.devbed import NAMESPACE, bootstrap_testbed, start_operator, stop_process, wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import TEST_POLICY, Hub, aijob, apply, events_of, wait_status

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
OPERATOR = f"system:serviceaccount:{NAMESPACE}:cpn"
#: Users' jobs are capped at priority 10 by default; group nlp may go to 1000.
POLICY = (
    TEST_POLICY
    + """
levels:
  - {name: urgent, min_priority: 100}
  - {name: normal}
quotas:
  max_priority: 10
  groups:
    vision: {gpus: 0}
    nlp: {gpus: 0, max_priority: 1000}
"""
)
TEAMS = {"team-a": ("alice", "vision"), "team-b": ("bob", "nlp"), "team-c": ("carol", "ops")}
METRICS_PORT = int(os.environ.get("CPN_TESTBED_PORT_BASE", "21000")) + 95


def kubectl(tb: Testbed, cluster: str, *args: str, kubeconfig: Path | None = None) -> Any:
    config = kubeconfig or tb.kubeconfig(cluster)
    return subprocess.run(
        [str(tb.kubectl), "--kubeconfig", str(config), *args],
        text=True,
        capture_output=True,
        check=False,
        timeout=120,
    )


def token_kubeconfig(tb: Testbed, cluster: str, namespace: str, account: str, out: Path) -> Path:
    """A kubeconfig holding only a TokenRequest token of ``namespace/account`` (no certificate)."""
    issued = kubectl(tb, cluster, "-n", namespace, "create", "token", account, "--duration=2h")
    assert issued.returncode == 0, issued.stderr
    admin = yaml.safe_load(tb.kubeconfig(cluster).read_text())["clusters"][0]["cluster"]
    ca = base64.b64encode(Path(admin["certificate-authority"]).read_bytes()).decode()
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": admin["server"], "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": account, "user": {"token": issued.stdout.strip()}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": account}}],
        "current-context": cluster,
    }
    out.write_text(yaml.safe_dump(doc))
    out.chmod(0o600)
    return out


class ServiceAccountHub(Hub):
    """The hub, with the operator started from a ServiceAccount kubeconfig (tests stay admin)."""

    def __init__(self, tb: Testbed, log: Path, operator_kubeconfig: Path, **settings: Any) -> None:
        self.operator_kubeconfig = operator_kubeconfig
        super().__init__(tb, log, **settings)

    def start(self) -> Any:
        return start_operator(self.operator_kubeconfig, self.log, args=self.args, **self.settings)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("security")


@pytest.fixture(scope="module")
def hub(testbed: Testbed, folder: Path) -> Iterator[ServiceAccountHub]:
    """manifests/ applied (hub and members), member Secrets with member tokens, operator as SA."""
    tb = testbed
    applied = kubectl(
        tb,
        "hub",
        "apply",
        "--server-side",
        "--force-conflicts",
        "-k",
        str(MANIFESTS / "overlays/dev"),
    )
    assert applied.returncode == 0, applied.stderr
    bootstrap_testbed(tb, policy_yaml=POLICY)  # the test policy over the default one
    admin: Any = client.CoreV1Api(client_from_kubeconfig(tb.kubeconfig("hub").read_text()))
    for member in tb.members:
        done = kubectl(tb, member, "apply", "-k", str(MANIFESTS / "members" / "rbac"))
        assert done.returncode == 0, done.stderr
        config = token_kubeconfig(tb, member, "cpn-jobs", "cpn-hub", folder / f"{member}.kc")
        admin.replace_namespaced_secret(
            f"member-{member}",
            NAMESPACE,
            {
                "metadata": {"name": f"member-{member}", "namespace": NAMESPACE},
                "stringData": {"kubeconfig": config.read_text()},
            },
        )
    operator_config = token_kubeconfig(tb, "hub", NAMESPACE, "cpn", folder / "operator.kc")
    for namespace, (user, group) in TEAMS.items():
        labels = {"cpn.io/user": user, "cpn.io/group": group}
        kubectl(tb, "hub", "create", "namespace", namespace)
        kubectl(
            tb,
            "hub",
            "label",
            "namespace",
            namespace,
            "--overwrite",
            *(f"{k}={v}" for k, v in labels.items()),
        )
        kubectl(tb, "hub", "-n", namespace, "create", "serviceaccount", user)
        kubectl(
            tb,
            "hub",
            "-n",
            namespace,
            "create",
            "rolebinding",
            f"{user}-aijobs",
            "--clusterrole=cpn-aijob-editor",
            f"--serviceaccount={namespace}:{user}",
        )
    hub = ServiceAccountHub(tb, folder / "operator.log", operator_config)
    try:
        yield hub
    finally:
        for namespace in TEAMS:
            kubectl(tb, "hub", "delete", "aijobs", "--all", "-n", namespace, "--timeout=60s")
        stop_process(hub.proc)
        for namespace in TEAMS:
            kubectl(tb, "hub", "delete", "namespace", namespace, "--wait=false")
        print(hub.log.read_text()[-5000:])


def user_kubeconfig(hub: Hub, folder: Path, namespace: str) -> Path:
    user = TEAMS[namespace][0]
    return token_kubeconfig(hub.tb, "hub", namespace, user, folder / f"{user}.kc")


def as_(hub: Hub, identity: str, *args: str) -> Any:
    return kubectl(hub.tb, "hub", f"--as={identity}", *args)


# --- (a) the operator as its ServiceAccount ---------------------------------------------------


def test_operator_as_its_serviceaccount_runs_an_aijob_to_succeeded(hub: ServiceAccountHub) -> None:
    """With only manifests/' RBAC on the hub and the members, an AIJob runs end to end."""
    assert apply(hub, "team-c", aijob("ok")).returncode == 0
    status = wait_status(hub, "team-c", "ok", timeout_s=180, phase="Succeeded")
    assert status["actualRuntimeSeconds"] > 0 and status["cluster"] in hub.tb.members
    log = hub.log.read_text()
    # A refusal shows as the status code on its own ("HTTP 403", "(403)") or as the API
    # server's "forbidden"; 403 inside a word (a host name such as vm-bf4036, a resource
    # version) is not one.
    refusal = re.search(r"(?<![\w-])403(?!\w)|forbidden", log, re.IGNORECASE)
    assert refusal is None, log[-3000:]


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (("get", "secrets", "-n", "team-a"), "forbidden"),
        (("get", "secrets", "-n", NAMESPACE), "forbidden"),  # by name only, never list
        (("delete", "namespace", "team-a", "--dry-run=server"), "forbidden"),
        (("create", "configmap", "x", "-n", "team-a", "--dry-run=server"), "forbidden"),
        (
            ("-n", NAMESPACE, "patch", "configmap", "cpn-policy", "-p", '{"data":{"a":"b"}}'),
            "forbidden",
        ),
        (("delete", "aijobs", "--all", "-n", "team-c", "--dry-run=server"), "forbidden"),
        (
            (
                "create",
                "clusterrolebinding",
                "x",
                "--clusterrole=admin",
                f"--user={OPERATOR}",
                "--dry-run=server",
            ),
            "forbidden",
        ),
        (("run", "x", "--image=i", "-n", "team-a", "--dry-run=server"), "forbidden"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else v,
)
def test_operator_serviceaccount_is_refused_what_it_does_not_need(
    hub: ServiceAccountHub, args: tuple[str, ...], refusal: str
) -> None:
    """The real API server refuses the operator's identity everything it does not need."""
    result = kubectl(hub.tb, "hub", *args, kubeconfig=hub.operator_kubeconfig)
    assert result.returncode != 0 and refusal in result.stderr, result.stderr


def test_operator_serviceaccount_reads_what_it_needs(hub: ServiceAccountHub) -> None:
    """...and allows what it needs: a member Secret by name, AIJobs everywhere, the policy."""
    config = hub.operator_kubeconfig
    member = hub.tb.members[0]
    for args in (
        ("get", "secret", f"member-{member}", "-n", NAMESPACE, "-o", "name"),
        ("get", "aijobs", "-A", "-o", "name"),
        ("get", "configmap", "cpn-policy", "-n", NAMESPACE, "-o", "name"),
    ):
        result = kubectl(hub.tb, "hub", *args, kubeconfig=config)
        assert result.returncode == 0, (args, result.stderr)


def test_operator_serviceaccount_cannot_write_an_aijob(hub: ServiceAccountHub) -> None:
    """It may write an AIJob's status, never the AIJob itself (spec, labels, finalizers)."""
    assert apply(hub, "team-c", aijob("pinned", suspend=True)).returncode == 0
    for patch in ('{"spec":{"priority":1000}}', '{"metadata":{"finalizers":["x.io/hold"]}}'):
        result = kubectl(
            hub.tb,
            "hub",
            *("-n", "team-c", "patch", "aijob", "pinned", "--type=merge", "-p", patch),
            kubeconfig=hub.operator_kubeconfig,
        )
        assert result.returncode != 0 and "forbidden" in result.stderr, result.stderr
    # As the operator writes it (a merge patch of the status subresource; kubectl would GET it
    # first, which the operator needs no right for).
    operator = client.CustomObjectsApi(client_from_kubeconfig(hub.operator_kubeconfig.read_text()))
    written = operator.patch_namespaced_custom_object_status(
        "cpn.io", "v1alpha1", "team-c", "aijobs", "pinned", {"status": {"reason": "Checked"}}
    )
    assert written["status"]["reason"] == "Checked"


# --- (b) namespace isolation --------------------------------------------------------------------


def test_users_cannot_touch_another_namespaces_aijobs(hub: ServiceAccountHub) -> None:
    """alice (editor in team-a) works in team-a; team-b's AIJobs are invisible and untouchable."""
    alice = "system:serviceaccount:team-a:alice"
    assert apply(hub, "team-b", aijob("bobs", suspend=True)).returncode == 0
    mine = subprocess.run(
        [
            str(hub.tb.kubectl),
            "--kubeconfig",
            str(hub.kubeconfig),
            f"--as={alice}",
            "-n",
            "team-a",
            "apply",
            "-f",
            "-",
        ],
        input=yaml.safe_dump(aijob("alices", suspend=True)),
        text=True,
        capture_output=True,
        check=False,
    )
    assert mine.returncode == 0, mine.stderr
    for args in (
        ("-n", "team-b", "get", "aijob", "bobs"),
        ("-n", "team-b", "get", "aijobs"),
        ("get", "aijobs", "-A"),
        (
            "-n",
            "team-b",
            "patch",
            "aijob",
            "bobs",
            "--type=merge",
            "-p",
            '{"spec":{"suspend":false}}',
        ),
        ("-n", "team-b", "delete", "aijob", "bobs"),
    ):
        result = as_(hub, alice, *args)
        assert result.returncode != 0 and "forbidden" in result.stderr, (args, result.stderr)
        assert "bobs" not in result.stdout


def test_users_cannot_set_their_user_group_or_status(hub: ServiceAccountHub) -> None:
    """No field or object alice may write names a user or group: not spec, status, or labels."""
    alice = "system:serviceaccount:team-a:alice"
    # A spec field for the group does not exist: the API server drops it (and warns).
    patched = as_(
        hub,
        alice,
        "-n",
        "team-a",
        "patch",
        "aijob",
        "alices",
        "--type=merge",
        "-p",
        '{"spec":{"group":"nlp","user":"bob"}}',
    )
    assert 'unknown field "spec.group"' in patched.stderr, patched.stderr
    stored = hub.aijob("team-a", "alices")
    assert "group" not in stored["spec"] and "user" not in stored["spec"]
    assert wait_status(hub, "team-a", "alices", group="vision", user="alice")
    attempts = {
        "status": (
            "-n",
            "team-a",
            "patch",
            "aijob",
            "alices",
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status":{"group":"nlp"}}',
        ),
        "namespace label": ("label", "namespace", "team-a", "cpn.io/group=nlp", "--overwrite"),
        "policy": (
            "-n",
            NAMESPACE,
            "patch",
            "configmap",
            "cpn-policy",
            "--type=merge",
            "-p",
            '{"data":{"policy.yaml":"{}"}}',
        ),
        "rolebinding": (
            "-n",
            "team-b",
            "create",
            "rolebinding",
            "x",
            "--clusterrole=cpn-aijob-editor",
            "--serviceaccount=team-a:alice",
        ),
        "own rolebinding": (
            "-n",
            "team-a",
            "create",
            "rolebinding",
            "y",
            "--clusterrole=admin",
            "--serviceaccount=team-a:alice",
        ),
    }
    for what, args in attempts.items():
        result = as_(hub, alice, *args)
        assert result.returncode != 0 and "forbidden" in result.stderr, (what, result.stderr)


def test_a_spec_priority_cannot_outrank_the_policys_bound(hub: ServiceAccountHub) -> None:
    """alice writes priority 1000 but her group is capped at 10: she ranks below bob's 500
    (nlp may go to 1000) and never reaches the 'urgent' level (min_priority 100)."""
    assert apply(hub, "team-a", aijob("claims-1000", priority=1000)).returncode == 0
    assert apply(hub, "team-b", aijob("asks-500", priority=500)).returncode == 0
    alice = wait_status(hub, "team-a", "claims-1000", reason="Quota")
    bob = wait_status(hub, "team-b", "asks-500", reason="Quota")
    assert alice["level"] == "normal" and bob["level"] == "urgent"
    assert alice["score"] < bob["score"]
    assert alice["score"] < 1e6 * 11  # 1e6 × the cap (10), plus aging, minus GPU-time


def test_cpn_queue_with_a_users_kubeconfig_shows_only_what_rbac_allows(
    hub: ServiceAccountHub, folder: Path
) -> None:
    """`cpn queue` as alice lists team-a's jobs; team-b's and all namespaces are refused."""
    config = user_kubeconfig(hub, folder, "team-a")

    def queue(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cpn", "queue", "--kubeconfig", str(config), "--all", *args],
            text=True,
            capture_output=True,
            check=False,
            timeout=120,
        )

    own = queue("-n", "team-a", "-o", "json")
    assert own.returncode == 0, own.stderr
    rows = json.loads(own.stdout)
    assert rows and {row["aijob"].split("/")[0] for row in rows} == {"team-a"}
    assert {row["group"] for row in rows} == {"vision"}
    for args in (("-n", "team-b"), ("-A",), ()):  # () = the context's: none, so "default"
        other = queue(*args)
        assert other.returncode != 0
        assert "asks-500" not in other.stdout and "bobs" not in other.stdout
        assert other.stderr.startswith("cpn queue: you may not list AIJobs in "), other.stderr
        assert "Traceback" not in other.stderr
    doc = yaml.safe_load(config.read_text())
    doc["contexts"][0]["context"]["namespace"] = "team-a"
    config.write_text(yaml.safe_dump(doc))
    in_context = queue("-o", "json")  # no -n: the context's namespace, as kubectl
    assert in_context.returncode == 0, in_context.stderr
    assert {r["aijob"] for r in json.loads(in_context.stdout)} == {r["aijob"] for r in rows}


def test_the_aijob_roles_show_their_jobs_events_in_describe(hub: ServiceAccountHub) -> None:
    """A user bound only to cpn-aijob-editor (alice) or cpn-aijob-viewer (vera) sees the
    Events cpn wrote about an AIJob in `kubectl describe`, as the user guide promises."""
    assert apply(hub, "team-a", aijob("described")).returncode == 0
    reasons = wait_until(
        lambda: events_of(hub, "team-a", "described"), timeout_s=120, what="an Event"
    )
    kubectl(hub.tb, "hub", "-n", "team-a", "create", "serviceaccount", "vera")
    kubectl(
        hub.tb,
        "hub",
        *("-n", "team-a", "create", "rolebinding", "vera-aijobs"),
        *("--clusterrole=cpn-aijob-viewer", "--serviceaccount=team-a:vera"),
    )
    for user in ("alice", "vera"):
        described = as_(
            hub,
            f"system:serviceaccount:team-a:{user}",
            "-n",
            "team-a",
            "describe",
            "aijob",
            "described",
        )
        assert described.returncode == 0, described.stderr
        events = described.stdout.split("\nEvents:", 1)[1]
        assert reasons[0] in events, (user, described.stdout[-1500:])
        assert "<none>" not in events.splitlines()[0]


# --- (c) member credentials only in Secrets ------------------------------------------------------


def test_membercluster_has_no_inline_credentials(hub: ServiceAccountHub) -> None:
    """The API server refuses a MemberCluster that carries a kubeconfig or token inline."""
    for field in ("kubeconfig", "token", "password"):
        body = {
            "apiVersion": "cpn.io/v1alpha1",
            "kind": "MemberCluster",
            "metadata": {"name": f"inline-{field}"},
            "spec": {"kubeconfigSecret": {"name": "x"}, field: "secret-value"},
        }
        created = subprocess.run(
            [
                str(hub.tb.kubectl),
                "--kubeconfig",
                str(hub.kubeconfig),
                "apply",
                "--dry-run=server",
                "-f",
                "-",
            ],
            input=json.dumps(body),
            text=True,
            capture_output=True,
            check=False,
        )
        assert created.returncode != 0 and f'unknown field "spec.{field}"' in created.stderr


# --- (d) nothing listens beyond what is configured -----------------------------------------------


def listening(pid: int) -> set[tuple[str, str, int]]:
    """(protocol, address, port) of every listening TCP or bound unconnected UDP socket of pid."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        lines = Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]
        for line in lines:
            cols = line.split()
            local, remote, state, inode = cols[1], cols[2], cols[3], cols[9]
            if inode not in inodes:
                continue
            is_listening = state == "0A" if proto.startswith("tcp") else remote.endswith(":0000")
            if is_listening:
                address, port = local.split(":")
                found.add((proto, _address(address), int(port, 16)))
    return found


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw[::-1])
    words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
    return ":".join(b.hex() for b in words)


def test_nothing_listens_without_a_metrics_port_and_only_it_when_set(
    hub: ServiceAccountHub,
) -> None:
    """Without CPN_METRICS_PORT the operator has no listening socket; with it, exactly one on
    127.0.0.1 at that port (checked from /proc: the process's socket inodes)."""
    assert listening(hub.proc.pid) == set()
    stop_process(hub.proc)
    hub.settings["metrics_port"] = METRICS_PORT
    hub.restart()
    wait_until(lambda: listening(hub.proc.pid), timeout_s=120, what="the metrics port open")
    assert listening(hub.proc.pid) == {("tcp", "127.0.0.1", METRICS_PORT)}
    assert hub.proc.poll() is None
