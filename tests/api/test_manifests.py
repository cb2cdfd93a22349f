"""manifests/: kustomizations that resolve, least-privilege RBAC, a hardened Deployment, samples.

The pure tests build the kustomizations with a small resolver of our own (resources, and
configMapGenerator files) so they run without kubectl. The ``e2e`` tests apply the RBAC to
the test bed and ask the real API server what the ServiceAccounts may do.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest

from cpn.api import constants as k
from cpn.api.documents import read_documents
from cpn.api.policy import CONFIGMAP_KEY, parse_policy_configmap
from cpn.cli.validate import main as validate_main
from cpn.config import OperatorConfig
from testbed.bed import Testbed

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SA_USER = "system:serviceaccount:cpn-system:cpn"
MEMBER_USER = "system:serviceaccount:cpn-jobs:cpn-hub"


# --- a small kustomize resolver ---------------------------------------------------------------


def kustomization_file(directory: Path) -> Path:
    found = [directory / n for n in KUSTOMIZATION_NAMES if (directory / n).is_file()]
    assert len(found) == 1, f"{directory}: expected one kustomization file, found {found}"
    return found[0]


def load_yaml_docs(path: Path) -> list[Any]:
    return [doc.value for doc in read_documents(path.read_text())]


def build(directory: Path) -> list[dict[str, Any]]:
    """The objects a kustomization emits: its resources (files and directories, recursively)
    and the ConfigMaps of its configMapGenerator; ``namespace:`` applied to namespaced kinds."""
    (spec,) = load_yaml_docs(kustomization_file(directory))
    objects: list[dict[str, Any]] = []
    for entry in spec.get("resources") or []:
        target = (directory / entry).resolve()
        if target.is_dir():
            objects += build(target)
        else:
            assert target.is_relative_to(directory.resolve()), (
                f"{directory}: {entry} is a file outside the kustomization's root"
            )
            objects += load_yaml_docs(target)
    for generator in spec.get("configMapGenerator") or []:
        data = {}
        for item in generator.get("files") or []:
            key, _, name = item.rpartition("=")
            path = (directory / name).resolve()
            assert path.is_relative_to(directory.resolve())
            data[key or path.name] = path.read_text()
        assert (generator.get("options") or {}).get("disableNameSuffixHash") is True
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": generator["name"], "namespace": generator.get("namespace")},
                "data": data,
            }
        )
    namespace = spec.get("namespace")
    if namespace:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = namespace
    return objects


CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "MemberCluster",
    "GPUBenchmark",
}
KUSTOMIZATIONS = sorted(
    {p.parent for name in KUSTOMIZATION_NAMES for p in MANIFESTS.glob(f"**/{name}")}
    | {ROOT / "crds", ROOT / "examples" / "policies", ROOT / "examples" / "aijobs"}
)


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return build(MANIFESTS)


# --- RBAC evaluation ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Access:
    """One API request: verb on group/resource, in a namespace ("" = cluster scope)."""

    verb: str
    group: str
    resource: str
    namespace: str = ""


def allowed(objects: list[dict[str, Any]], user_ns: str, user: str, access: Access) -> bool:
    """Whether the RBAC objects grant ``access`` to ServiceAccount ``user_ns/user``."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects}
    for binding in objects:
        if binding["kind"] not in {"RoleBinding", "ClusterRoleBinding"}:
            continue
        subjects = binding.get("subjects") or []
        if not any(
            s["kind"] == "ServiceAccount" and (s["name"], s["namespace"]) == (user, user_ns)
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], namespace, ref["name"]))
        assert role is not None, f"{binding['metadata']['name']} binds a missing {ref['name']}"
        bound_ns = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else ""
        if bound_ns and access.namespace != bound_ns:
            continue
        for rule in role.get("rules") or []:
            if (
                access.group in rule.get("apiGroups", [])
                and access.resource in rule.get("resources", [])
                and access.verb in rule.get("verbs", [])
                and not rule.get("resourceNames")
            ):
                return True
    return False


#: Every call the operator makes on the hub (adapters/hub.py for the runtime, handlers/, kopf).
OPERATOR_NEEDS = [
    Access(verb="list", group="cpn.io", resource="aijobs"),
    Access(verb="watch", group="cpn.io", resource="aijobs"),
    Access(verb="patch", group="cpn.io", resource="aijobs/status", namespace="team-a"),
    Access(verb="list", group="cpn.io", resource="memberclusters"),
    Access(verb="watch", group="cpn.io", resource="memberclusters"),
    Access(verb="patch", group="cpn.io", resource="memberclusters/status"),
    Access(verb="list", group="cpn.io", resource="gpubenchmarks"),
    Access(verb="watch", group="cpn.io", resource="gpubenchmarks"),
    Access(verb="create", group="cpn.io", resource="gpubenchmarks"),
    Access(verb="patch", group="cpn.io", resource="gpubenchmarks/status"),
    Access(verb="list", group="cpn.io", resource="groupquotas"),
    Access(verb="watch", group="cpn.io", resource="groupquotas"),
    Access(verb="patch", group="cpn.io", resource="groupquotas/status", namespace="team-a"),
    Access(verb="list", group="", resource="namespaces"),
    Access(verb="watch", group="", resource="namespaces"),
    Access(verb="create", group="", resource="events", namespace="team-a"),
    Access(verb="create", group="events.k8s.io", resource="events", namespace="team-a"),
    Access(verb="list", group="apiextensions.k8s.io", resource="customresourcedefinitions"),
    Access(verb="watch", group="apiextensions.k8s.io", resource="customresourcedefinitions"),
    Access(verb="get", group="", resource="configmaps", namespace="cpn-system"),
    Access(verb="watch", group="", resource="configmaps", namespace="cpn-system"),
    Access(verb="create", group="", resource="configmaps", namespace="cpn-system"),  # last good
    Access(verb="get", group="", resource="secrets", namespace="cpn-system"),
    Access(verb="create", group="coordination.k8s.io", resource="leases", namespace="cpn-system"),
    Access(verb="update", group="coordination.k8s.io", resource="leases", namespace="cpn-system"),
]
OPERATOR_MUST_NOT = [
    Access(verb="list", group="", resource="secrets", namespace="cpn-system"),
    Access(verb="get", group="", resource="secrets", namespace="team-a"),
    Access(verb="list", group="", resource="configmaps"),
    Access(verb="get", group="", resource="configmaps", namespace="team-a"),
    Access(verb="create", group="", resource="configmaps", namespace="team-a"),
    # Only cpn-policy-last-good may be updated (rules with resourceNames do not count here;
    # the live test below checks the named update), never the admins' policy.
    Access(verb="update", group="", resource="configmaps", namespace="cpn-system"),
    Access(verb="delete", group="cpn.io", resource="aijobs", namespace="team-a"),
    Access(verb="patch", group="cpn.io", resource="aijobs", namespace="team-a"),
    Access(verb="update", group="cpn.io", resource="aijobs", namespace="team-a"),
    Access(verb="create", group="cpn.io", resource="aijobs", namespace="team-a"),
    Access(verb="update", group="cpn.io", resource="memberclusters"),
    Access(verb="delete", group="cpn.io", resource="gpubenchmarks"),
    Access(verb="patch", group="cpn.io", resource="gpubenchmarks"),
    Access(verb="patch", group="cpn.io", resource="groupquotas", namespace="team-a"),
    Access(verb="create", group="", resource="pods", namespace="team-a"),
    Access(verb="create", group="batch", resource="jobs", namespace="team-a"),
    Access(verb="patch", group="", resource="namespaces"),
    Access(verb="create", group="coordination.k8s.io", resource="leases", namespace="team-a"),
    Access(verb="create", group="rbac.authorization.k8s.io", resource="rolebindings"),
]
#: What the operator does on a member (adapters/members.py) with the members/rbac identity.
MEMBER_NEEDS = [
    Access(verb="list", group="", resource="nodes"),
    Access(verb="watch", group="", resource="nodes"),
    Access(verb="list", group="", resource="pods"),
    Access(verb="watch", group="", resource="pods"),
    Access(verb="list", group="", resource="pods", namespace="cpn-jobs"),  # benchmark results
    Access(verb="list", group="batch", resource="jobs", namespace="cpn-jobs"),
    Access(verb="watch", group="batch", resource="jobs", namespace="cpn-jobs"),
    Access(verb="create", group="batch", resource="jobs", namespace="cpn-jobs"),
    Access(verb="delete", group="batch", resource="jobs", namespace="cpn-jobs"),
]
MEMBER_MUST_NOT = [
    Access(verb="create", group="batch", resource="jobs", namespace="default"),
    Access(verb="delete", group="", resource="pods", namespace="default"),
    Access(verb="get", group="", resource="secrets", namespace="cpn-jobs"),
    Access(verb="patch", group="", resource="nodes"),
]


# --- the kustomizations -------------------------------------------------------------------------


def test_every_manifest_parses() -> None:
    """Every YAML file under manifests/ (and every Kustomization) parses with the safe loader."""
    paths = sorted(MANIFESTS.glob("**/*.yaml")) + [d / "Kustomization" for d in KUSTOMIZATIONS]
    for path in paths:
        if path.exists():
            assert load_yaml_docs(path), f"{path} holds no document"


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda d: str(d.relative_to(ROOT)))
def test_kustomization_lists_files_that_exist(directory: Path) -> None:
    """Each kustomization's resources and generator files exist (and build)."""
    assert build(directory), f"{directory} emits nothing"


def test_base_refers_to_the_crds_and_policy_in_place() -> None:
    """The base uses ../crds and ../examples/policies, never copies of them."""
    (spec,) = load_yaml_docs(MANIFESTS / "kustomization.yaml")
    assert "../crds" in spec["resources"]
    assert not list(MANIFESTS.glob("**/aijob*.yaml")) and not list(
        MANIFESTS.glob("**/default.yaml")
    )


def test_suffixless_kustomizations_keep_plain_directories_plain() -> None:
    """Kustomizations in crds/ and examples/ are named `Kustomization`: `apply -f dir` sees YAML."""
    for directory in (ROOT / "crds", ROOT / "examples" / "policies", ROOT / "examples" / "aijobs"):
        assert kustomization_file(directory).name == "Kustomization"


def test_base_has_every_part(base: list[dict[str, Any]]) -> None:
    """Namespace, ServiceAccount, RBAC, Deployment, Service, policy ConfigMap and the four CRDs."""
    kinds = sorted(o["kind"] for o in base)
    for kind in (
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "ConfigMap",
    ):
        assert kind in kinds
    crds = {o["metadata"]["name"] for o in base if o["kind"] == "CustomResourceDefinition"}
    assert crds == {
        f"{k.AIJOB_PLURAL}.{k.GROUP}",
        f"{k.MEMBER_PLURAL}.{k.GROUP}",
        f"{k.BENCHMARK_PLURAL}.{k.GROUP}",
        f"groupquotas.{k.GROUP}",
    }


def test_policy_configmap_is_the_default_policy_where_the_operator_looks(
    base: list[dict[str, Any]],
) -> None:
    """ConfigMap cpn-policy in cpn-system (the operator's defaults) holds default.yaml, valid."""
    defaults = OperatorConfig()
    configmap = one(base, "ConfigMap", defaults.policy_configmap)
    assert configmap["metadata"]["namespace"] == defaults.namespace
    text = (ROOT / "examples" / "policies" / "default.yaml").read_text()
    assert configmap["data"] == {CONFIGMAP_KEY: text}
    assert parse_policy_configmap(configmap).name == "default"


def test_dev_overlay_is_the_base_without_the_workload(base: list[dict[str, Any]]) -> None:
    """overlays/dev installs all of the base except Deployment, PDB and Service."""
    dev = build(MANIFESTS / "overlays" / "dev")
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    missing = {key(o) for o in base} - {key(o) for o in dev}
    assert {kind for kind, _ in missing} == {"Deployment", "PodDisruptionBudget", "Service"}


# --- RBAC ---------------------------------------------------------------------------------------


RBAC_KINDS = {"Role", "ClusterRole"}


@pytest.mark.parametrize("directory", [MANIFESTS, MANIFESTS / "members" / "rbac"], ids=str)
def test_rbac_has_no_wildcards(directory: Path) -> None:
    """No rule names "*" as verb, resource or API group, and no rule grants escalation verbs."""
    rules = [r for o in build(directory) if o["kind"] in RBAC_KINDS for r in o["rules"]]
    assert rules
    for rule in rules:
        for field in ("verbs", "resources", "apiGroups", "resourceNames", "nonResourceURLs"):
            assert not any("*" in item for item in rule.get(field) or []), rule
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule


@pytest.mark.parametrize("access", OPERATOR_NEEDS, ids=str)
def test_operator_may_do_what_it_does(base: list[dict[str, Any]], access: Access) -> None:
    """The ServiceAccount cpn is granted each call the operator and kopf make on the hub."""
    assert allowed(base, "cpn-system", "cpn", access)


@pytest.mark.parametrize("access", OPERATOR_MUST_NOT, ids=str)
def test_operator_may_not_do_more(base: list[dict[str, Any]], access: Access) -> None:
    """Nothing beyond: no Secrets listing, no other namespaces' ConfigMaps, no pods or Jobs."""
    assert not allowed(base, "cpn-system", "cpn", access)


def test_member_rbac_grants_exactly_the_member_calls() -> None:
    """On a member, cpn-hub reads nodes and pods and manages Jobs in cpn-jobs only."""
    member = build(MANIFESTS / "members" / "rbac")
    for access in MEMBER_NEEDS:
        assert allowed(member, "cpn-jobs", "cpn-hub", access), access
    for access in MEMBER_MUST_NOT:
        assert not allowed(member, "cpn-jobs", "cpn-hub", access), access


def test_member_example_matches_member_rbac() -> None:
    """The example MemberCluster names its Secret and the namespace members/rbac creates."""
    example = build(MANIFESTS / "members" / "example")
    member = one(example, "MemberCluster")
    secret = one(example, "Secret")
    ref = member["spec"]["kubeconfigSecret"]
    assert (ref["name"], secret["metadata"]["namespace"]) == (
        secret["metadata"]["name"],
        OperatorConfig().namespace,
    )
    assert ref.get("key", "kubeconfig") in secret["stringData"]
    rbac_namespaces = {
        o["metadata"]["name"]
        for o in build(MANIFESTS / "members" / "rbac")
        if o["kind"] == "Namespace"
    }
    assert member["spec"]["namespace"] in rbac_namespaces


# --- the Deployment -----------------------------------------------------------------------------


def container(base: list[dict[str, Any]]) -> dict[str, Any]:
    (only,) = one(base, "Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(only)


def env_of(base: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(base)["env"]}


def test_deployment_two_replicas_non_root_read_only(base: list[dict[str, Any]]) -> None:
    """Two replicas, non-root uid, read-only root FS, no privilege escalation, caps dropped."""
    deployment = one(base, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["serviceAccountName"] == one(base, "ServiceAccount")["metadata"]["name"]
    security = container(base)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container(base)["resources"]["requests"] and container(base)["resources"]["limits"]


def test_deployment_runs_one_active_replica_via_the_lease(base: list[dict[str, Any]]) -> None:
    """CPN_LEADER_ELECTION=true; every CPN_* variable is a field of OperatorConfig (or proposed)."""
    env = env_of(base)
    assert env["CPN_LEADER_ELECTION"] == "true"
    known = {f"CPN_{f.name.upper()}" for f in fields(OperatorConfig)}
    proposed = {"CPN_METRICS_ADDRESS"}  # bind address of /metrics: see the report to the lead
    assert {name for name in env if name.startswith("CPN_")} <= known | proposed


def test_decision_log_is_on_and_bounded_by_the_state_volume(base: list[dict[str, Any]]) -> None:
    """The Deployment writes the decision log (cpn replay needs it) onto the state volume,
    and its rotation (size x files) fits in that volume's size limit."""
    env = env_of(base)
    path = env["CPN_DECISION_LOG"]
    mounts = {m["mountPath"]: m["name"] for m in container(base)["volumeMounts"]}
    mount = next(m for m in mounts if path.startswith(m + "/"))
    volumes = {v["name"]: v for v in one(base, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    limit = volumes[mounts[mount]]["emptyDir"]["sizeLimit"]
    assert limit.endswith(("Gi", "Mi"))
    limit_bytes = int(limit[:-2]) << (30 if limit.endswith("Gi") else 20)
    default = {f.name: f.default for f in fields(OperatorConfig)}
    size = int(env.get("CPN_DECISION_LOG_MAX_BYTES", default["decision_log_max_bytes"]))
    files = 1 + int(env.get("CPN_DECISION_LOG_BACKUPS", default["decision_log_backups"]))
    assert size * files <= limit_bytes / 2  # half of it left for the predictor's history


def test_metrics_service_reaches_the_metrics_port(base: list[dict[str, Any]]) -> None:
    """Service port 9090 targets the container port the operator serves CPN_METRICS_PORT on."""
    service = one(base, "Service")
    (port,) = service["spec"]["ports"]
    ports = {p["name"]: p["containerPort"] for p in container(base)["ports"]}
    assert port["port"] == 9090
    assert ports[port["targetPort"]] == int(env_of(base)["CPN_METRICS_PORT"])
    labels = one(base, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_probes_use_the_liveness_endpoint_cpn_run_is_given(base: list[dict[str, Any]]) -> None:
    """Each probe GETs the path and port of the --liveness URL passed to `cpn run`."""
    main = container(base)
    (liveness,) = [a.split("=", 1)[1] for a in main["args"] if a.startswith("--liveness=")]
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = main[probe]["httpGet"]
        assert liveness.endswith(f":{ports[get['port']]}{get['path']}"), probe


def test_cpn_run_accepts_the_deployment_args(
    base: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cpn run` parses the Deployment's args, takes the Lease first (on by default), and
    hands kopf the liveness endpoint."""
    import kopf

    from cpn.cli import run

    calls: list[Mapping[str, Any]] = []
    leads: list[str] = []
    monkeypatch.delenv("CPN_LEADER_ELECTION", raising=False)
    monkeypatch.setattr(kopf, "run", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(kopf, "configure", lambda **kwargs: None)
    monkeypatch.setattr(run, "_lead", lambda namespace, duration_s: leads.append(namespace))
    assert run.main(container(base)["args"]) == 0
    assert leads == ["cpn-system"]
    assert calls[0].get("liveness_endpoint") == "http://0.0.0.0:8080/healthz"


# --- samples -------------------------------------------------------------------------------------


def test_sample_aijobs_pass_cpn_validate(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/aijobs and the members/example MemberCluster pass `cpn validate`."""
    paths = [ROOT / "examples" / "aijobs", MANIFESTS / "members" / "example" / "membercluster.yaml"]
    assert validate_main(["-q", *map(str, paths)]) == 0, capsys.readouterr().out


def test_samples_cover_the_models_and_sizes() -> None:
    """The samples are resnet50, yolov8m, llama3-8b and bert, of different GPU counts, with
    per-GPU-type test-bed durations for both of the test bed's GPU types."""
    import json

    jobs = [o for o in build(MANIFESTS / "samples") if o["kind"] == "AIJob"]
    models = {j["spec"]["model"]["name"] for j in jobs}
    assert {"resnet50", "yolov8m", "llama3-8b"} <= models and any("bert" in m for m in models)
    sizes = {j["spec"]["resources"]["gpus"] * j["spec"].get("workers", 1) for j in jobs}
    assert len(sizes) == len(jobs)
    for job in jobs:
        table = json.loads(
            job["spec"]["template"]["metadata"]["annotations"][k.ANNOTATION_PER_GPU_TYPE]
        )
        assert set(table["testbed.cpn.io/duration"]) == {"A100-80GB", "V100-32GB"}
    namespace = one(build(MANIFESTS / "samples"), "Namespace")
    assert {k.LABEL_USER, k.LABEL_GROUP} <= set(namespace["metadata"]["labels"])


# --- end to end: the real API server -----------------------------------------------------------


def kubectl(tb: Testbed, cluster: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tb.kubectl), "--kubeconfig", str(tb.kubeconfig(cluster)), *args],
        text=True,
        capture_output=True,
        check=False,
        timeout=120,
    )


def can_i(tb: Testbed, cluster: str, user: str, access: Access) -> bool:
    resource = (
        f"{access.resource.split('/')[0]}.{access.group}" if access.group else access.resource
    )
    args = ["auth", "can-i", access.verb, resource, f"--as={user}"]
    if "/" in access.resource:
        args.append(f"--subresource={access.resource.split('/')[1]}")
    args += ["-n", access.namespace] if access.namespace else ["--all-namespaces"]
    result = kubectl(tb, cluster, *args)
    assert result.stdout.strip() in {"yes", "no"}, result.stderr
    return result.stdout.strip() == "yes"


@pytest.fixture(scope="module")
def hub_with_manifests(testbed: Testbed) -> Iterator[Testbed]:
    """The test bed's hub with overlays/dev applied and member-a with members/rbac."""
    applied = kubectl(
        testbed,
        "hub",
        "apply",
        "--server-side",
        "--force-conflicts",
        "-k",
        str(MANIFESTS / "overlays" / "dev"),
    )
    assert applied.returncode == 0, applied.stderr
    member = kubectl(
        testbed, testbed.members[0], "apply", "-k", str(MANIFESTS / "members" / "rbac")
    )
    assert member.returncode == 0, member.stderr
    yield testbed


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_api_server_accepts_the_whole_base(hub_with_manifests: Testbed) -> None:
    """`kubectl apply --dry-run=server -k manifests` (Deployment, PDB, Service included) passes."""
    result = kubectl(hub_with_manifests, "hub", "apply", "--dry-run=server", "-k", str(MANIFESTS))
    assert result.returncode == 0, result.stderr


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_api_server_authorizes_exactly_the_operators_calls(hub_with_manifests: Testbed) -> None:
    """`kubectl auth can-i --as` the ServiceAccounts agrees with the RBAC tables, hub and member."""
    tb = hub_with_manifests
    for access in OPERATOR_NEEDS:
        assert can_i(tb, "hub", SA_USER, access), access
    for access in OPERATOR_MUST_NOT:
        assert not can_i(tb, "hub", SA_USER, access), access
    # It updates its own copy of the last good policy and the group bounds, never the admins'
    # policy.
    for name, answer in (
        ("cpn-policy-last-good", "yes"),
        ("cpn-group-bounds", "yes"),
        ("cpn-policy", "no"),
    ):
        asked = kubectl(
            tb,
            "hub",
            "auth",
            "can-i",
            "update",
            f"configmaps/{name}",
            f"--as={SA_USER}",
            "-n",
            "cpn-system",
        )
        assert asked.stdout.strip() == answer, (name, asked.stdout, asked.stderr)
    for access in MEMBER_NEEDS:
        assert can_i(tb, tb.members[0], MEMBER_USER, access), access
    for access in MEMBER_MUST_NOT:
        assert not can_i(tb, tb.members[0], MEMBER_USER, access), access


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_member_identity_works_with_a_token(hub_with_manifests: Testbed) -> None:
    """A token of cpn-jobs/cpn-hub (as a member Secret's kubeconfig holds) reads nodes and is
    refused Secrets. (The bed's controller manager runs no token controller, so the token comes
    from the TokenRequest API rather than members/rbac's token Secret.)"""
    tb = hub_with_manifests
    member = tb.members[0]
    issued = kubectl(tb, member, "-n", "cpn-jobs", "create", "token", "cpn-hub", "--duration=10m")
    assert issued.returncode == 0, issued.stderr
    cluster = read_documents(tb.kubeconfig(member).read_text()).__next__().value["clusters"][0]
    as_member_identity = [
        str(tb.kubectl),
        "--kubeconfig=/dev/null",
        f"--server={cluster['cluster']['server']}",
        f"--certificate-authority={cluster['cluster']['certificate-authority']}",
        f"--token={issued.stdout.strip()}",
    ]
    run = lambda *args: subprocess.run(  # noqa: E731
        [*as_member_identity, *args], text=True, capture_output=True, check=False, timeout=60
    )
    nodes = run("get", "nodes", "-o", "name")
    assert nodes.returncode == 0 and nodes.stdout.startswith("node/"), nodes.stderr
    secrets = run("-n", "cpn-jobs", "get", "secrets")
    assert secrets.returncode != 0 and "forbidden" in secrets.stderr, secrets.stderr


API_CASES = sorted(
    p for p in (ROOT / "tests" / "data" / "validate").glob("*/*.yaml") if "# api:" in p.read_text()
)


@pytest.mark.e2e
@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", API_CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_api_server_verdict_matches_the_validate_cases(
    hub_with_manifests: Testbed, path: Path
) -> None:
    """The real API server accepts or refuses each `# api:` case as the case says, so the
    offline schema checks of `cpn validate` are compared with the server on the same files."""
    verdict = next(
        line.split(":", 1)[1].strip()
        for line in path.read_text().splitlines()
        if line.startswith("# api:")
    )
    result = kubectl(
        hub_with_manifests, "hub", "apply", "--dry-run=server", "-n", "default", "-f", str(path)
    )
    if verdict == "accept":
        assert result.returncode == 0, result.stderr
    else:
        assert verdict == "refuse"
        assert result.returncode != 0 and "created" not in result.stdout, result.stdout
