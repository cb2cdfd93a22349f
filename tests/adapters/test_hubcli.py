"""A command that reads the hub says what is wrong in one line: no traceback.

``cpn queue`` runs as a subprocess against kubeconfigs that are missing, not YAML,
incomplete, or point at a 127.0.0.1 port nobody listens on.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cpn.adapters.hubcli import kubeconfig_path
from cpn.api.kubeconfig import context_namespace


def kubeconfig(server: str, namespace: str | None = None) -> str:
    context = {"cluster": "hub", "user": "me"} | ({"namespace": namespace} if namespace else {})
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: hub, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: me, user: {token: abc}}]\n"
        f"contexts: [{{name: here, context: {context}}}]\n"
        "current-context: here\n"
    )


def free_port() -> int:
    """A 127.0.0.1 port that was free a moment ago (bound, then closed: nobody listens)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def queue(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpn", "queue", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read the kubeconfig {path}: No such file or directory"),
        ("clusters: [", "the kubeconfig {path} is not usable: while parsing a flow node"),
        ("apiVersion: v1\nkind: Config\n", "the kubeconfig {path} is not usable: Invalid kube"),
        ("UNREACHABLE", "cannot reach the hub at https://127.0.0.1:{port}: "),
    ],
    ids=["missing", "not-yaml", "no-contexts", "unreachable"],
)
def test_a_bad_kubeconfig_or_unreachable_hub_is_one_line(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    path = tmp_path / "config"
    port = free_port()
    if content == "UNREACHABLE":
        content = kubeconfig(f"https://127.0.0.1:{port}")
    if content is not None:
        path.write_text(content)
    done = queue("--kubeconfig", str(path), "-o", "json")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("cpn queue: " + expected.format(path=path, port=port)), lines


def test_unreachable_hub_found_through_kubeconfig_env(tmp_path: Path) -> None:
    """Without --kubeconfig the first file of $KUBECONFIG is used, as kubectl does."""
    port = free_port()
    path = tmp_path / "config"
    path.write_text(kubeconfig(f"https://127.0.0.1:{port}", "team-a"))
    done = subprocess.run(
        [sys.executable, "-m", "cpn", "queue"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "KUBECONFIG": f"{path}:{tmp_path / 'other'}"},
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"cpn queue: cannot reach the hub at https://127.0.0.1:{port}: ")
    assert "Connection refused" in done.stderr


def test_kubeconfig_path_follows_kubectl(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert kubeconfig_path(None) == tmp_path / "a"
    assert kubeconfig_path("given") == Path("given")
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert kubeconfig_path(None) == tmp_path / ".kube" / "config"


def test_context_namespace() -> None:
    """The current context's namespace; "default" when it names none or is not found."""
    assert context_namespace(kubeconfig("https://x", "team-a")) == "team-a"
    assert context_namespace(kubeconfig("https://x")) == "default"
    assert context_namespace(kubeconfig("https://x", "team-a"), context="other") == "default"
    assert context_namespace("[") == "default"
