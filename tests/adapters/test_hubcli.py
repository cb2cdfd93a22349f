"""A command that reads the hub says what is wrong in one line: no traceback.

``cpn queue`` runs as a subprocess against kubeconfigs that are missing, not YAML,
incomplete, or point at a 127.0.0.1 port nobody listens on. The AIJob reads of
:mod:`cpn.adapters.hubcli` and the commands on top of them run against a small fake hub
on 127.0.0.1 that answers with fixed statuses.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cpn.adapters.hubcli import (
    HubAnswer,
    get_aijob,
    hub_api,
    kubeconfig_path,
    list_aijobs,
    on_hub,
)
from cpn.api.kubeconfig import context_namespace
from cpn.cli import explain, queue


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


def run_queue(*args: str) -> subprocess.CompletedProcess[str]:
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
    done = run_queue("--kubeconfig", str(path), "-o", "json")
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


# --- the AIJob reads, against a fake hub ---------------------------------------------------

AIJOBS = "/apis/cpn.io/v1alpha1"
JOB = {"metadata": {"namespace": "team-a", "name": "bert-1"}, "status": {"phase": "Queued"}}
#: path -> (HTTP status, body)
ANSWERS: dict[str, tuple[int, object]] = {
    f"{AIJOBS}/namespaces/team-a/aijobs": (200, {"items": [JOB]}),
    f"{AIJOBS}/namespaces/team-a/aijobs/bert-1": (200, JOB),
    f"{AIJOBS}/aijobs": (403, {"kind": "Status", "code": 403, "reason": "Forbidden"}),
    f"{AIJOBS}/namespaces/team-b/aijobs": (500, {"kind": "Status", "code": 500}),
    f"{AIJOBS}/namespaces/team-b/aijobs/secret": (403, {"kind": "Status", "code": 403}),
    f"{AIJOBS}/namespaces/team-b/aijobs/broken": (500, {"kind": "Status", "code": 500}),
}


class FakeHub(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, body = ANSWERS.get(self.path.split("?")[0], (404, {"kind": "Status"}))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[str]:
    """The path of a kubeconfig (context namespace team-a) for a fake hub on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "config"
    path.write_text(kubeconfig(f"http://127.0.0.1:{server.server_address[1]}", "team-a"))
    try:
        yield str(path)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_aijob_reads_answer_bodies_or_hub_answers(hub: str) -> None:
    """Reads return what the hub stores; a refusal is a HubAnswer with its status."""
    api = hub_api(hub)
    assert list_aijobs(api, "team-a") == [JOB]
    assert get_aijob(api, "team-a", "bert-1") == JOB
    with pytest.raises(HubAnswer) as refused:
        list_aijobs(api, None)
    assert refused.value.status == 403
    with pytest.raises(HubAnswer) as missing:
        get_aijob(api, "team-a", "gone")
    assert missing.value.status == 404


def test_on_hub_words_a_hub_answer_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def refuse() -> int:
        raise HubAnswer(500, "Internal Server Error")

    assert on_hub("cpn x", refuse) == 1
    assert capsys.readouterr().err == "cpn x: the hub answered (500 Internal Server Error)\n"


@pytest.mark.parametrize(
    ("args", "code", "out", "err"),
    [
        (["-o", "json"], 0, "team-a/bert-1", ""),
        (["-A"], 1, "", "cpn queue: you may not list AIJobs in all namespaces; try -n"),
        (["-n", "team-b"], 1, "", "cpn queue: the hub answered (500 Internal Server Error)"),
    ],
    ids=["context-namespace", "all-refused", "hub-error"],
)
def test_cpn_queue_on_the_fake_hub(
    hub: str, capsys: pytest.CaptureFixture[str], args: list[str], code: int, out: str, err: str
) -> None:
    assert queue.main(["--kubeconfig", hub, *args]) == code
    got = capsys.readouterr()
    assert out in got.out and (got.out == "") == (out == "")
    assert got.err.startswith(err) and (got.err == "") == (err == "")


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["bert-1"], 0, "team-a/bert-1: Queued"),
        (["gone"], 1, "cpn explain: no AIJob 'gone' in namespace team-a"),
        (["team-b/secret"], 1, "cpn explain: you may not read AIJobs in namespace team-b"),
        (["broken", "-n", "team-b"], 1, "cpn explain: the hub answered 500 Internal Server Error"),
    ],
    ids=["found", "missing", "refused", "hub-error"],
)
def test_cpn_explain_on_the_fake_hub(
    hub: str, capsys: pytest.CaptureFixture[str], args: list[str], code: int, expected: str
) -> None:
    assert explain.main([*args, "--kubeconfig", hub]) == code
    got = capsys.readouterr()
    assert expected in (got.out if code == 0 else got.err)
