"""The bad-input corpus (tests/data/bad/) against the real hub with the operator running.

Every AIJob file is applied with ``kubectl apply`` as a user would. Its ``# hub:`` line says
what must happen: ``refused | TEXT`` (kubectl or the API server refuses it, saying TEXT),
``invalid | TEXT`` (the API server accepts it; the operator marks it Invalid with TEXT in its
message and an InvalidSpec Event), or ``held | REASON`` (what kubectl sent is a valid job
that must wait: kubectl reads YAML 1.1 and keeps the last of two duplicate keys). Files kubectl
refuses or changes on the client are also POSTed to the API server as raw YAML (``# api:``
line), so the server's own verdict is checked too. None of them may ever get a member Job.
Every policy file is put into the policy ConfigMap: each is refused with an InvalidPolicy
Event naming the problem, and the last good policy stays in force. Afterwards the operator
is still running and a good AIJob runs to Succeeded.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import (
    TEST_POLICY,
    Hub,
    aijob,
    apply,
    member_jobs_by_uid,
    new_namespace,
    running_hub,
    set_policy,
    wait_events_of,
    wait_status,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

BAD = Path(__file__).resolve().parents[1] / "data" / "bad"
AIJOBS = sorted((BAD / "aijobs").glob("*.yaml"))
POLICIES = sorted((BAD / "policies").glob("*.yaml"))
#: The last good policy: a GPU quota of 1 for the group, so its effect is visible.
GOOD_POLICY = TEST_POLICY + "quotas: {groups: {vision: {gpus: 1}}}\n"


def header(path: Path, key: str) -> list[tuple[str, str]]:
    """``# key: WHAT | TEXT`` lines of a corpus file as (WHAT, TEXT)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(f"# {key}:"):
            what, _, text = line.removeprefix(f"# {key}:").partition(" | ")
            out.append((what.strip(), text.strip()))
    return out


def post_raw_yaml(tb: Testbed, namespace: str, text: bytes) -> tuple[int, str]:
    """POST the file's bytes as application/yaml (strict fields, dry run): status and message."""
    config = yaml.safe_load(tb.kubeconfig("hub").read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    context = ssl.create_default_context(cafile=cluster["certificate-authority"])
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    url = (
        f"{cluster['server']}/apis/cpn.io/v1alpha1/namespaces/{namespace}/aijobs"
        "?fieldValidation=Strict&dryRun=All"
    )
    request = urllib.request.Request(
        url, data=text, method="POST", headers={"Content-Type": "application/yaml"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=60) as response:
            return response.status, ""
    except urllib.error.HTTPError as err:
        return err.code, str(json.loads(err.read()).get("message", ""))


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(testbed, tmp_path_factory.mktemp("bad-input")) as hub:
        yield hub


@pytest.fixture(scope="module")
def namespace(hub: Hub) -> Iterator[str]:
    with new_namespace(hub, "bad", user="mallory", group="vision") as name:
        yield name


@pytest.fixture(scope="module")
def raw_namespace(hub: Hub) -> Iterator[str]:
    """An empty namespace for the raw POSTs (dry run: nothing is stored)."""
    with new_namespace(hub, "raw", user="mallory", group="vision") as name:
        yield name


@pytest.fixture(scope="module")
def applied(hub: Hub, namespace: str) -> dict[str, tuple[int, str]]:
    """Every AIJob file applied once with kubectl: return code and stderr, by file name."""
    out = {}
    for path in AIJOBS:
        result = hub.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
        out[path.name] = (result.returncode, result.stderr)
    return out


def test_every_aijob_file_says_what_the_hub_does() -> None:
    """Each AIJob file has exactly one ``# hub:`` verdict of a known kind."""
    assert len(AIJOBS) >= 30
    for path in AIJOBS:
        (verdict,) = header(path, "hub")
        assert verdict[0] in {"refused", "invalid", "held"}, path.name


@pytest.mark.parametrize("path", AIJOBS, ids=lambda p: p.name)
def test_bad_aijob_is_refused_or_marked_and_never_dispatched(
    hub: Hub, namespace: str, applied: dict[str, tuple[int, str]], path: Path
) -> None:
    """Refused with the specific message, or accepted and marked (Invalid / held); no member Job."""
    ((what, text),) = header(path, "hub")
    code, stderr = applied[path.name]
    if what == "refused":
        assert code != 0 and text in stderr, stderr
        return
    assert code == 0, stderr
    name = yaml.safe_load(path.read_text(encoding="utf-8"))["metadata"]["name"]
    if what == "invalid":
        status = wait_status(hub, namespace, name, phase="Invalid", reason="InvalidSpec")
        assert text in status["message"], status["message"]
        wait_events_of(hub, namespace, name, "InvalidSpec", timeout_s=30)
    elif text == "Suspended":
        wait_status(hub, namespace, name, phase="Suspended")
    else:
        wait_status(hub, namespace, name, phase="Queued", reason=text)
    uid = hub.aijob(namespace, name)["metadata"]["uid"]
    assert member_jobs_by_uid(hub.tb)[uid] == 0


@pytest.mark.parametrize("path", [p for p in AIJOBS if header(p, "api")], ids=lambda p: p.name)
def test_api_server_itself_refuses_what_kubectl_refused_or_changed(
    hub: Hub, raw_namespace: str, path: Path
) -> None:
    """The raw YAML POSTed to the API server: refused with the message (or accepted if said)."""
    ((what, text),) = header(path, "api")
    status, message = post_raw_yaml(hub.tb, raw_namespace, path.read_bytes())
    if what == "accepted":
        assert status in {200, 201}, message
    else:
        assert status == 400 and text in message, (status, message)


def _policy_events(hub: Hub, reason: str) -> list[str]:
    events = hub.core.list_namespaced_event(
        "cpn-system", field_selector="involvedObject.name=cpn-policy"
    )
    return [e.message or "" for e in events.items if e.reason == reason]


def test_broken_policies_are_refused_and_the_last_good_one_stays(
    hub: Hub, namespace: str, applied: dict[str, tuple[int, str]]
) -> None:
    """Each broken policy gets an InvalidPolicy Event naming its problem; the quota stays."""
    before = len(_policy_events(hub, "PolicyAccepted"))
    set_policy(hub, GOOD_POLICY)
    wait_until(
        lambda: len(_policy_events(hub, "PolicyAccepted")) > before,
        timeout_s=60,
        what="the good policy accepted",
    )
    for path in POLICIES:
        text = path.read_text(encoding="utf-8")
        field, message = next(
            (f.strip(), m.strip())
            for f, _, m in (
                line.removeprefix("# expect:").partition(" | ")
                for line in text.splitlines()
                if line.startswith("# expect:")
            )
        )
        path_part = "" if field in {"", "yaml"} else f"{field}: "

        def naming(path_part: str = path_part, message: str = message) -> list[str]:
            found = _policy_events(hub, "InvalidPolicy")
            return [m for m in found if path_part in m and message in m]

        before = len(naming())
        set_policy(hub, text)
        wait_until(
            lambda naming=naming, before=before: len(naming()) > before,
            timeout_s=60,
            what=f"a new InvalidPolicy Event naming {path_part}{message!r} ({path.name})",
        )
    assert hub.proc.poll() is None, "the operator exited"
    # The good policy (GPU quota 1 for vision) is still the one in force.
    assert apply(hub, namespace, aijob("two-gpus", gpus=2)).returncode == 0
    status = wait_status(hub, namespace, "two-gpus", timeout_s=60, reason="Quota")
    assert "vision" in status["message"]


def test_operator_survives_and_a_good_aijob_still_succeeds(
    hub: Hub, namespace: str, applied: dict[str, tuple[int, str]]
) -> None:
    """After the whole corpus the operator process is alive and a good AIJob runs to the end."""
    assert hub.proc.poll() is None, "the operator exited"
    assert apply(hub, namespace, aijob("good")).returncode == 0
    status = wait_status(hub, namespace, "good", timeout_s=180, phase="Succeeded")
    assert status["actualRuntimeSeconds"] > 0
    assert "Traceback" not in hub.log.read_text()
