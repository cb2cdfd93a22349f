"""Delegated quotas and group-level actions on the real API server (issue #21 items 1-2), as
impersonated users (``kubectl --as``, ``cpn ... --as``): the roles of manifests/common
(group-roles.yaml, user-roles.yaml) and the ValidatingAdmissionPolicy of
groupquota-admission.yaml, whose params the running operator writes.

vera is the admin of group vision (cpn-group-admin bound in its namespace), alice a user of it
(cpn-aijob-editor and cpn-groupquota-viewer there); bob's namespace is group nlp's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import Hub, aijob, apply, new_namespace, running_hub, set_policy, wait_status

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
COMMON = ROOT / "manifests" / "common"
POLICY = """
retry: {max_attempts: 2, backoff_s: 1}
quotas:
  groups:
    vision: {gpus: 4}
    nlp: {gpus: 4}
"""
LONG = {"A100-80GB": "600s", "V100-32GB": "600s"}


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(testbed, tmp_path_factory.mktemp("gquota"), policy=POLICY) as h:
        for name in ("user-roles.yaml", "group-roles.yaml", "groupquota-admission.yaml"):
            done = h.kubectl("apply", "-f", str(COMMON / name), check=False)
            assert done.returncode == 0, done.stderr
        yield h


def bind(hub: Hub, namespace: str, user: str, *roles: str) -> None:
    for role in roles:
        done = hub.kubectl(
            "-n", namespace, "create", "rolebinding", f"{user}-{role}",
            f"--clusterrole={role}", f"--user={user}", check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr


def as_user(hub: Hub, user: str, *args: str, input_: str | None = None) -> Any:
    return hub.kubectl(f"--as={user}", *args, input_=input_, check=False)


def groupquota(**users: dict[str, Any]) -> str:
    doc = {
        "apiVersion": "cpn.io/v1alpha1",
        "kind": "GroupQuota",
        "metadata": {"name": "split"},
        "spec": {"users": users},
    }
    return json.dumps(doc)


def cpn(hub: Hub, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpn", *args, "--kubeconfig", str(hub.kubeconfig)],
        text=True,
        capture_output=True,
        check=False,
        timeout=120,
    )


def bounds(hub: Hub) -> dict[str, str]:
    found = hub.kubectl(
        "-n", "cpn-system", "get", "configmap", "cpn-group-bounds", "-o", "json", check=False
    )
    return json.loads(found.stdout).get("data") or {} if found.returncode == 0 else {}


def condition(hub: Hub, namespace: str, reason: str) -> dict[str, Any] | None:
    """The GroupQuota ``split``'s WithinBound condition when its reason is ``reason``."""
    found = hub.kubectl("-n", namespace, "get", "gq", "split", "-o", "json", check=False)
    if found.returncode != 0:
        return None
    for cond in (json.loads(found.stdout).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "WithinBound" and cond.get("reason") == reason:
            return dict(cond)
    return None


@pytest.fixture
def teams(hub: Hub) -> Iterator[tuple[str, str, str]]:
    """(vision's namespace, nlp's namespace, a namespace bound to no group)."""
    with (
        new_namespace(hub, "gq-vision", user="alice", group="vision") as vision,
        new_namespace(hub, "gq-nlp", user="bob", group="nlp") as nlp,
        new_namespace(hub, "gq-none") as unbound,
    ):
        bind(hub, vision, "vera", "cpn-group-admin")
        bind(hub, vision, "alice", "cpn-aijob-editor", "cpn-groupquota-viewer")
        bind(hub, nlp, "bob", "cpn-aijob-editor")
        wait_until(
            lambda: (
                bounds(hub).get(f"{vision}.group") == "vision"
                and bounds(hub).get(f"{nlp}.gpus") == "4"
            ),
            timeout_s=60,
            what="the operator writing both groups' bounds into cpn-group-bounds",
        )
        yield vision, nlp, unbound


def test_group_admin_divides_the_groups_quota_within_its_bound(
    hub: Hub, teams: tuple[str, str, str]
) -> None:
    vision, _, unbound = teams
    # created, then raised within the bound (4): accepted; above it: refused at once, naming
    # the field and both figures
    for gpus in (0, 1):
        done = as_user(
            hub, "vera", "-n", vision, "apply", "-f", "-", input_=groupquota(alice={"gpus": gpus})
        )
        assert done.returncode == 0, done.stderr
    assert '"gpus":1' in hub.kubectl(
        "-n", vision, "get", "gq", "split", "-o", "json"
    ).stdout.replace(" ", "")
    done = as_user(
        hub, "vera", "-n", vision, "apply", "-f", "-", input_=groupquota(alice={"gpus": 6})
    )
    assert done.returncode != 0
    assert "spec.users.alice.gpus: 6 exceeds the bound of group vision, 4" in done.stderr
    # a user reads the GroupQuota but cannot change it
    assert as_user(hub, "alice", "-n", vision, "get", "gq", "split").returncode == 0
    done = as_user(
        hub, "alice", "-n", vision, "patch", "gq", "split", "--type=merge",
        "-p", '{"spec": {"users": {"alice": {"gpus": 4}}}}',
    )  # fmt: skip
    assert done.returncode != 0 and "forbidden" in done.stderr.lower(), done.stderr
    # a namespace bound to no group cannot hold one (not even the cluster admin's)
    done = hub.kubectl("-n", unbound, "apply", "-f", "-", input_=groupquota(), check=False)
    assert done.returncode != 0
    assert f"namespace {unbound} is not bound to a group" in done.stderr
    # cpn's status: the group, the users, within the bound
    wait_until(
        lambda: condition(hub, vision, "WithinBound"),
        timeout_s=60,
        what="cpn writing WithinBound=True on the GroupQuota",
    )
    table = hub.kubectl("-n", vision, "get", "gq", "split").stdout
    assert "vision" in table and "alice" in table and "True" in table, table

    # at run time the user's limit holds her jobs back: 1 GPU runs, the next waits on her quota
    assert (
        apply(hub, vision, aijob("a1", durations=LONG), aijob("a2", durations=LONG)).returncode == 0
    )
    wait_status(hub, vision, "a1", phase="Running", timeout_s=90)
    waiting = wait_until(
        lambda: (
            (s := hub.status(vision, "a2")).get("phase") == "Queued"
            and "user alice in vision" in s.get("message", "")
            and s
        ),
        timeout_s=60,
        what="a2 waiting on alice's quota",
    )
    assert "quota of user alice in vision: 1 of 1 GPUs in use" in waiting["message"], waiting

    # the cluster admin lowers the group's bound below the GroupQuota: the bound wins, and the
    # GroupQuota says so
    set_policy(hub, POLICY.replace("vision: {gpus: 4}", "vision: {gpus: 0.5}"))
    cond = wait_until(
        lambda: condition(hub, vision, "AboveGroupBound"),
        timeout_s=60,
        what="the GroupQuota told its figure is above the group's bound",
    )
    assert "spec.users.alice.gpus: 1 exceeds the group's bound 0.5" in cond["message"], cond
    set_policy(hub, POLICY)


def test_group_admin_acts_on_the_groups_jobs_and_is_denied_elsewhere(
    hub: Hub, teams: tuple[str, str, str]
) -> None:
    vision, nlp, _ = teams
    assert (
        apply(hub, vision, aijob("v1", durations=LONG), aijob("v2", durations=LONG)).returncode == 0
    )
    assert apply(hub, nlp, aijob("n1", durations=LONG)).returncode == 0
    wait_status(hub, vision, "v1", phase="Running", timeout_s=90)

    done = cpn(hub, "suspend", "v1", "-n", vision, "--as", "vera")
    assert done.returncode == 0, done.stderr
    assert hub.aijob(vision, "v1")["spec"]["suspend"] is True
    wait_status(hub, vision, "v1", phase="Suspended", timeout_s=60)
    done = cpn(hub, "resume", "v1", "-n", vision, "--as", "vera")
    assert done.returncode == 0 and hub.aijob(vision, "v1")["spec"]["suspend"] is False

    done = cpn(hub, "rerun", "v2", "-n", vision, "--as", "vera")
    assert done.returncode == 0, done.stderr
    copies = [
        a
        for a in hub.aijobs(vision)
        if a["metadata"].get("annotations", {}).get("cpn.io/rerun-of") == "v2"
    ]
    assert len(copies) == 1 and copies[0]["metadata"]["name"] in done.stdout

    done = cpn(hub, "cancel", "v2", "-n", vision, "--as", "vera")
    assert done.returncode == 0, done.stderr
    assert "v2" not in {a["metadata"]["name"] for a in hub.aijobs(vision)}

    # another group's job: the API server's own 403, shown as it is
    done = cpn(hub, "cancel", "n1", "-n", nlp, "--as", "vera")
    assert done.returncode == 1
    assert 'User "vera" cannot delete resource "aijobs"' in done.stderr, done.stderr
    assert f'in the namespace "{nlp}"' in done.stderr and "HTTP 403" in done.stderr
    denied = as_user(
        hub,
        "vera",
        "-n",
        nlp,
        "patch",
        "aijob",
        "n1",
        "--type=merge",
        "-p",
        '{"spec": {"suspend": true}}',
    )
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()
    assert hub.aijob(nlp, "n1")["spec"].get("suspend") is False


def test_a_users_concurrent_job_limit_lets_one_job_run_at_a_time(
    hub: Hub, teams: tuple[str, str, str]
) -> None:
    """The group's job bound (2) is checked by the API server; vera gives alice 1 job at a time
    by a GroupQuota; of alice's two 1-GPU AIJobs, with GPUs free for both, one runs and the
    other waits naming the limit, then starts once the first has finished."""
    vision, _, _ = teams
    set_policy(hub, POLICY.replace("vision: {gpus: 4}", "vision: {gpus: 4, jobs: 2}"))
    try:
        wait_until(
            lambda: bounds(hub).get(f"{vision}.jobs") == "2",
            timeout_s=60,
            what="the operator writing vision's job bound into cpn-group-bounds",
        )
        done = as_user(
            hub, "vera", "-n", vision, "apply", "-f", "-", input_=groupquota(alice={"jobs": 3})
        )
        assert done.returncode != 0
        assert (
            "spec.users.alice.jobs: 3 concurrent jobs exceeds the bound of group vision, 2"
            in done.stderr
        ), done.stderr
        everyone = json.loads(groupquota())
        everyone["spec"]["defaultUser"] = {"jobs": 4}
        done = as_user(hub, "vera", "-n", vision, "apply", "-f", "-", input_=json.dumps(everyone))
        assert done.returncode != 0
        assert (
            "spec.defaultUser.jobs: 4 concurrent jobs exceeds the bound of group vision, 2"
            in done.stderr
        ), done.stderr
        done = as_user(
            hub, "vera", "-n", vision, "apply", "-f", "-", input_=groupquota(alice={"jobs": 1})
        )
        assert done.returncode == 0, done.stderr
        wait_until(
            lambda: condition(hub, vision, "WithinBound"),
            timeout_s=60,
            what="cpn applying the GroupQuota (WithinBound=True)",
        )
        short = {"A100-80GB": "15s", "V100-32GB": "15s"}
        jobs = aijob("j1", durations=short), aijob("j2", durations=short)
        assert apply(hub, vision, *jobs).returncode == 0

        def split() -> tuple[str, dict[str, Any]] | None:
            found = {name: hub.status(vision, name) for name in ("j1", "j2")}
            running = [n for n, s in found.items() if s.get("phase") in ("Dispatched", "Running")]
            waiting = [
                s
                for s in found.values()
                if s.get("phase") == "Queued" and "concurrent-job limit" in s.get("message", "")
            ]
            return (running[0], waiting[0]) if len(running) == 1 and waiting else None

        first, waiting = wait_until(split, timeout_s=90, what="one job running, one held")
        assert (
            "user alice in vision: concurrent-job limit 1 reached (1 running)" in waiting["message"]
        ), waiting
        second = "j2" if first == "j1" else "j1"
        done_first = wait_status(hub, vision, first, phase="Succeeded", timeout_s=120)
        started = wait_status(hub, vision, second, phase="Succeeded", timeout_s=120)
        assert started["startTime"] >= done_first["completionTime"], (done_first, started)
    finally:
        set_policy(hub, POLICY)
