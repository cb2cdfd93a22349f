"""What waiting AIJobs' status says on a live queue is true when it is read, and a namespace
user reads the explanation with only the user role.

A queue that moves (36 AIJobs in two queues, four run at a time on the bed's A100s) is
listed again and again: every start instant shown is after the moment the list was
asked for, and in every listing taken while the operator had no status write pending
(``cpn_status_writes_pending`` 0 and ``cpn_status_writes_total`` unchanged across it),
the Queued jobs of each queue hold positions exactly 1..n.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cpn.api.aijob import parse_time
from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import (
    Hub,
    aijob,
    apply,
    free_port,
    get,
    new_namespace,
    running_hub,
    wait_status,
)
from tests.e2e.test_security import token_kubeconfig

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

QUEUES = ("train", "tune")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    folder = tmp_path_factory.mktemp("queue-truth")
    with running_hub(testbed, folder, metrics_port=free_port(), eta_interval_s=2) as hub:
        url = f"http://127.0.0.1:{hub.settings['metrics_port']}/metrics"
        wait_until(lambda: get(url)[0] == 200, timeout_s=60, what="the operator's /metrics")
        yield hub


def writes(hub: Hub) -> tuple[float, float]:
    """(status writes pending, status writes sent) as the operator reports them."""
    code, text = get(f"http://127.0.0.1:{hub.settings['metrics_port']}/metrics")
    assert code == 200, text
    values = {}
    for name in ("cpn_status_writes_pending", "cpn_status_writes_total"):
        found = re.search(rf"^{name} (\S+)$", text, re.M)
        assert found, f"{name} missing from /metrics"
        values[name] = float(found.group(1))
    return values["cpn_status_writes_pending"], values["cpn_status_writes_total"]


def explain(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``cpn explain ARGS`` with the user's kubeconfig."""
    command = [sys.executable, "-m", "cpn", "explain", *args, "--kubeconfig", str(config)]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)


def status_written_s(item: dict[str, Any]) -> float:
    """When the AIJob's status was last written (its managed fields' time, whole seconds)."""
    times = [
        parse_time(entry.get("time"))
        for entry in item["metadata"].get("managedFields") or ()
        if entry.get("subresource") == "status"
    ]
    return max((t for t in times if t is not None), default=float("nan"))


def instants(status: dict[str, Any]) -> list[float]:
    shown = [status.get("estimatedStart"), *(status.get("estimatedStartRange") or {}).values()]
    return [t for t in (parse_time(s) for s in shown if s) if t is not None]


def test_positions_are_one_to_n_and_no_eta_is_past_while_the_queue_moves(hub: Hub) -> None:
    durations = {"A100-80GB": "5s", "V100-32GB": "5s"}
    with new_namespace(hub, "truth", user="carol", group="vision") as namespace:
        docs = [
            aijob(f"j{i:02d}", gpus=8, durations=durations, queue=QUEUES[i % 2], priority=i % 3)
            for i in range(36)
        ]
        assert apply(hub, namespace, *docs).returncode == 0
        settled, unsettled, torn, seen_waiting = 0, 0, 0, set()
        shown: Counter[str] = Counter()
        biggest, past = 0, []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            pending_before, sent_before = writes(hub)
            asked = time.time()
            items = hub.aijobs(namespace)
            pending_after, sent_after = writes(hub)
            waiting = [i for i in items if (i.get("status") or {}).get("phase") == "Queued"]
            phases = [(i.get("status") or {}).get("phase") for i in items]
            for item in waiting:
                status = item["status"]
                past += [
                    (item["metadata"]["name"], t - asked, status_written_s(item) - t)
                    for t in instants(status)
                    if t < asked
                ]
                span = status.get("estimatedStartRange")
                if span is not None:  # well formed when present
                    assert "latest" in span, span
                    assert span.get("earliest", span["latest"]) <= span["latest"], span
                shown.update(f for f in ("estimatedStart", "estimatedStartRange") if f in status)
                shown["imminent"] += status.get("eta") == "imminent"
                if status.get("eta") == "imminent":
                    assert "estimatedStart" not in status, status
            places = defaultdict(list)
            for item in waiting:
                if item["status"].get("position") is not None:
                    places[item["status"]["queue"]].append(item["status"]["position"])
                    seen_waiting.add(item["metadata"]["name"])
                else:  # not ranked: said why
                    assert item["status"].get("reason") in {
                        "Pending",
                        "Starting",
                        "Backoff",
                        "Retrying",
                    }, item
            exact = all(sorted(p) == list(range(1, len(p) + 1)) for p in places.values())
            if pending_before == pending_after == 0 and sent_before == sent_after:
                settled += 1
                biggest = max(biggest, len(waiting))
                assert exact, (dict(places), "read while no status write was pending")
            else:
                unsettled += 1
                torn += not exact
            if phases.count("Succeeded") == len(docs):
                break
            time.sleep(0.5)
        # (AIJob, instant - read, last status write - instant): how long before the
        # instant the write that showed it landed
        assert not past, f"start instants before the read: {past[:10]}"
        assert phases.count("Succeeded") == len(docs), phases
        assert settled >= 5 and biggest >= 10, (settled, biggest)
        assert len(seen_waiting) >= 20  # the queue moved: most jobs were seen waiting, ranked
        print(f"listings: {settled} settled, {unsettled} during writes ({torn} of them torn)")
        print(f"waiting statuses read with: {dict(shown)}")
        # the ranges' adaptive factors and their judgements, on the operator's /metrics
        code, text = get(f"http://127.0.0.1:{hub.settings['metrics_port']}/metrics")
        assert code == 200, text
        for side in ("low", "high"):
            found = re.search(rf'^cpn_eta_range_factor{{side="{side}"}} (\S+)$', text, re.M)
            assert found and float(found.group(1)) > 0, f"no {side} factor in /metrics"
        judged = re.findall(r'^cpn_eta_range_judged_total{.*side="low".*} (\S+)$', text, re.M)
        if shown["estimatedStartRange"]:  # ranges were stated, and jobs started after
            assert sum(float(v) for v in judged) >= 1, text


def test_a_namespace_user_reads_the_explanation_of_a_waiting_job(hub: Hub, tmp_path: Path) -> None:
    """With only the user role from manifests/ (a ServiceAccount token, no other access),
    ``cpn explain NAME`` prints the waiting job's reason from the live cluster, and
    ``kubectl describe`` as that user shows the same condition."""
    roles = ROOT / "manifests" / "common" / "user-roles.yaml"
    assert hub.kubectl("apply", "-f", str(roles)).returncode == 0
    long = {"A100-80GB": "90s", "V100-32GB": "90s"}
    with new_namespace(hub, "explain", user="dave", group="nlp") as namespace:
        hub.kubectl("-n", namespace, "create", "serviceaccount", "dave")
        hub.kubectl(
            *("-n", namespace, "create", "rolebinding", "dave-aijobs"),
            *("--clusterrole=cpn-aijob-editor", f"--serviceaccount={namespace}:dave"),
        )
        config = token_kubeconfig(hub.tb, "hub", namespace, "dave", tmp_path / "dave.kc")
        doc = yaml.safe_load(config.read_text())
        doc["contexts"][0]["context"]["namespace"] = namespace  # as kubectl config set-context
        config.write_text(yaml.safe_dump(doc))
        fill = [
            aijob(f"fill-{i}", gpus=8, durations=long, gpu_types=["A100-80GB"]) for i in range(4)
        ]
        wait = aijob("waits", gpus=8, durations=long, gpu_types=["A100-80GB"])
        assert apply(hub, namespace, *fill).returncode == 0
        for i in range(4):
            wait_status(hub, namespace, f"fill-{i}", timeout_s=90, phase="Running")
        assert apply(hub, namespace, wait).returncode == 0
        status = wait_status(hub, namespace, "waits", timeout_s=60, phase="Queued", position=1)

        def explained() -> dict[str, Any] | None:
            done = explain(config, "waits", "--json")
            assert done.returncode == 0, done.stderr
            view: dict[str, Any] = json.loads(done.stdout)  # stdout is one JSON document
            text = view.get("explanation", "")
            return view if "room frees when" in text and "predicted start" in text else None

        try:
            view = wait_until(explained, timeout_s=60, what="an explanation: room and start")
        except TimeoutError:
            raise AssertionError(json.dumps(hub.status(namespace, "waits"), indent=1)) from None
        assert view["aijob"] == f"{namespace}/waits" and view["reason"] == status["reason"]
        assert view["position"] == 1 and view["phase"] == "Queued"
        named = re.search(
            r"room frees when (\S+)/(fill-\d) on (\S+) \(A100-80GB\)", view["explanation"]
        )
        assert named and named.group(1) == namespace, view["explanation"]
        shown = explain(config, "waits")
        assert shown.returncode == 0, shown.stderr
        text = shown.stdout
        assert text.splitlines()[0].startswith(
            f"{namespace}/waits: Queued ({view['reason']}), position 1"
        )

        def described() -> str | None:
            done = subprocess.run(
                [str(hub.tb.kubectl), "--kubeconfig", str(config), "describe", "aijob", "waits"],
                capture_output=True,
                text=True,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            flat = " ".join(done.stdout.split())
            # The four fill jobs end together: which one the status names as first to free
            # may change between two reads, so any of them (of this namespace) will do.
            frees = re.search(rf"room frees when {re.escape(namespace)}/fill-\d on ", flat)
            return flat if frees else None

        flat = wait_until(described, timeout_s=30, what="kubectl describe: the explanation")
        assert "Type: Admitted" in flat and f"Reason: {view['reason']}" in flat
        # A running job explains its place: chosen, and the runner-up when there was one.
        running = json.loads(explain(config, "fill-0", "--json").stdout)
        chosen = running["placement"]["chosen"]
        assert (chosen["cluster"], chosen["gpuType"]) == (running["cluster"], "A100-80GB")
        assert chosen["completionSeconds"] >= chosen["runtimeSeconds"] > 0
        assert "chosen for the soonest completion" in running["explanation"]
        # The user may read, not list other namespaces.
        other = explain(config, "x", "-n", "cpn-system")
        assert (
            other.returncode == 1 and "may not read AIJobs in namespace cpn-system" in other.stderr
        )
