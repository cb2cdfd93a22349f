"""``cpn explain NAME`` renders the explanation the operator keeps in an AIJob's status."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cpn.api.kubeconfig import context_namespace
from cpn.cli.explain import _target, live_view, render_live

WAITING = {
    "metadata": {"namespace": "team-a", "name": "llama-5"},
    "status": {
        "phase": "Queued",
        "reason": "Capacity",
        "message": "needs 2 x 8 GPU(s)",
        "queue": "default",
        "position": 3,
        "eta": "19:44:02Z",
        "estimatedStart": "2026-11-22T19:44:02Z",
        "fifoDue": "2026-11-22T18:00:00Z",
        "fifoDueCalibrated": "2026-11-23T02:00:00Z",
        "estimatedStartRange": {
            "earliest": "2026-11-22T19:30:00Z",
            "latest": "2026-11-22T20:10:00Z",
        },
        "conditions": [
            {"type": "Valid", "status": "True", "reason": "Valid", "message": "accepted"},
            {
                "type": "Admitted",
                "status": "False",
                "reason": "Capacity",
                "message": "needs 2 x 8 GPU(s); room frees when team-b/big on member-a "
                "(A100-80GB) ends, expected 19:44:00Z; predicted start 19:44:02Z",
                "lastTransitionTime": "2026-11-22T13:40:00Z",
            },
        ],
    },
}

RUNNING = {
    "metadata": {"namespace": "team-a", "name": "yolo"},
    "status": {
        "phase": "Running",
        "reason": "Running",
        "cluster": "member-b",
        "gpuType": "V100-32GB",
        "nodes": ["member-b-3"],
        "eta": "16:26:25Z",
        "fifoDue": "2026-11-22T12:00:00Z",
        "placement": {
            "chosen": {
                "cluster": "member-b",
                "gpuType": "V100-32GB",
                "runtimeSeconds": 9960.0,
                "transferSeconds": 0.0,
                "waitSeconds": 0.0,
                "completionSeconds": 9960.0,
            },
            "runnerUp": {
                "cluster": "member-a",
                "gpuType": "A100-80GB",
                "runtimeSeconds": 3660.0,
                "transferSeconds": 26.0,
                "waitSeconds": 21840.0,
                "completionSeconds": 25526.0,
            },
        },
        "conditions": [{"type": "Admitted", "status": "True", "reason": "Running", "message": "m"}],
    },
}


def test_a_waiting_job_shows_its_condition_place_and_start_range():
    view = live_view(WAITING)
    assert view["reason"] == "Capacity" and view["position"] == 3
    assert view["explanation"].startswith("needs 2 x 8 GPU(s); room frees when team-b/big")
    text = render_live(view)
    assert text.splitlines()[0] == "team-a/llama-5: Queued (Capacity), position 3 in queue default"
    assert "  why: needs 2 x 8 GPU(s); room frees when team-b/big" in text
    assert "  start: 19:44:02Z (likely 19:30:00Z to 20:10:00Z)" in text
    assert "  FIFO due: 2026-11-22T18:00:00Z (strict FIFO's estimated start)" in text
    assert "  FIFO due: 2026-11-23T02:00:00Z (calibrated: runtimes as long as jobs ran)" in text
    assert text.splitlines()[-1] == "  (waiting since 2026-11-22T13:40:00Z)"


def test_a_running_job_shows_the_place_chosen_and_the_runner_up_with_their_costs():
    text = render_live(live_view(RUNNING))
    chosen, runner = (line for line in text.splitlines() if "completion" in line)
    assert chosen.split()[:3] == ["chosen:", "member-b", "V100-32GB"]
    assert runner.split()[:3] == ["runner-up:", "member-a", "A100-80GB"]
    assert "wait    6h04m" in runner and "completion    7h05m" in runner
    assert "  finish: 16:26:25Z" in text and "start:" not in text and "FIFO due" not in text


def test_a_job_the_operator_has_not_seen_says_so():
    text = render_live(live_view({"metadata": {"namespace": "n", "name": "x"}}))
    assert text == "n/x: not yet seen by the operator"


def kubeconfig(tmp_path: Path, namespace: str | None) -> Path:
    context: dict[str, str] = {"cluster": "hub", "user": "me"}
    if namespace:
        context["namespace"] = namespace
    doc = {
        "contexts": [
            {"name": "other", "context": {"namespace": "nope"}},
            {"name": "hub", "context": context},
        ],
        "current-context": "hub",
    }
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(("namespace", "expected"), [("team-a", "team-a"), (None, "default")])
def test_the_namespace_comes_from_the_current_context(tmp_path, namespace, expected):
    path = kubeconfig(tmp_path, namespace)
    assert context_namespace(path.read_text()) == expected
    assert context_namespace(path.read_text(), "other") == "nope"
    assert _target("job", None, str(path)) == (expected, "job")
    assert _target("job", "given", str(path)) == ("given", "job")
    assert _target("ns/job", None, str(path)) == ("ns", "job")


@pytest.mark.parametrize("text", ["", ":", "- a list", "contexts: 3\ncurrent-context: x"])
def test_a_kubeconfig_without_a_usable_context_means_default(text):
    assert context_namespace(text) == "default"
