"""Member credentials only in Secrets: the MemberCluster CRD holds none, and a member
kubeconfig may carry only inline credentials (no files, no exec, no auth-provider)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cpn.api.kubeconfig import kubeconfig_problems
from testbed.bed import embedded_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
CREDENTIAL_WORDS = ("token", "password", "secret", "cert", "key", "kubeconfig", "auth", "bearer")


def _property_paths(schema: dict[str, Any], prefix: str) -> list[str]:
    out = []
    for name, sub in (schema.get("properties") or {}).items():
        out.append(f"{prefix}.{name}")
        out += _property_paths(sub, f"{prefix}.{name}")
    return out


def test_membercluster_crd_has_no_inline_credential_field() -> None:
    """Every credential-like field of MemberCluster.spec is the reference to a Secret."""
    crd = yaml.safe_load((ROOT / "crds" / "membercluster.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert not schema.get("x-kubernetes-preserve-unknown-fields")
    suspicious = [
        p for p in _property_paths(schema, "spec") if any(w in p.lower() for w in CREDENTIAL_WORDS)
    ]
    assert suspicious and all(p.startswith("spec.kubeconfigSecret") for p in suspicious)
    assert set(schema["properties"]["kubeconfigSecret"]["properties"]) == {"name", "key"}


INLINE = """
apiVersion: v1
kind: Config
clusters:
  - name: m
    cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: "AAAA"}
users:
  - name: u
    user: {token: "abc"}
contexts:
  - {name: m, context: {cluster: m, user: u}}
current-context: m
"""


def test_inline_kubeconfig_is_accepted() -> None:
    """A token or embedded certificates, inline: nothing to refuse."""
    assert kubeconfig_problems(INLINE) == []


def test_devbed_member_secret_kubeconfig_is_accepted(tmp_path: Path) -> None:
    """What `cpn.cli.devbed` puts in member Secrets (files inlined) passes the check."""
    for name in ("ca.crt", "c.crt", "c.key"):
        (tmp_path / name).write_text("x")
    config = {
        "clusters": [
            {
                "name": "m",
                "cluster": {
                    "server": "https://x",
                    "certificate-authority": str(tmp_path / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": "u",
                "user": {
                    "client-certificate": str(tmp_path / "c.crt"),
                    "client-key": str(tmp_path / "c.key"),
                },
            }
        ],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    assert kubeconfig_problems(embedded_kubeconfig(path)) == []


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (
            {"users": [{"name": "u", "user": {"exec": {"command": "sh", "args": ["-c", "id"]}}}]},
            "users[0].user.exec",
        ),
        (
            {"users": [{"name": "u", "user": {"auth-provider": {"name": "oidc"}}}]},
            "users[0].user.auth-provider",
        ),
        (
            {"users": [{"name": "u", "user": {"tokenFile": "/var/run/secrets/token"}}]},
            "users[0].user.tokenFile",
        ),
        (
            {"users": [{"name": "u", "user": {"client-key": "/etc/ssl/private/k"}}]},
            "users[0].user.client-key",
        ),
        (
            {
                "clusters": [
                    {
                        "name": "m",
                        "cluster": {"server": "https://x", "certificate-authority": "/ca"},
                    }
                ]
            },
            "clusters[0].cluster.certificate-authority",
        ),
        (
            {
                "clusters": [
                    {"name": "m", "cluster": {"server": "https://x", "proxy-url": "http://evil"}}
                ]
            },
            "clusters[0].cluster.proxy-url",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_kubeconfig_that_runs_programs_or_reads_files_is_refused(
    change: dict[str, Any], path: str
) -> None:
    """exec, auth-provider, file paths and proxies are refused, naming the field."""
    doc = {**yaml.safe_load(INLINE), **change}
    problems = kubeconfig_problems(yaml.safe_dump(doc))
    assert any(p.startswith(f"{path}: not allowed") for p in problems), problems


def test_kubeconfig_yaml_bombs_are_refused() -> None:
    """The Secret's text goes through the safe loader: anchors and aliases are refused."""
    problems = kubeconfig_problems("a: &a [1]\nb: *a\n")
    assert problems and "not accepted as YAML" in problems[0]


def test_member_secret_template_passes_the_check() -> None:
    """The kubeconfig in manifests/members/example/secret.yaml holds only inline credentials."""
    secret = yaml.safe_load(
        (ROOT / "manifests" / "members" / "example" / "secret.yaml").read_text()
    )
    assert kubeconfig_problems(secret["stringData"]["kubeconfig"]) == []
