"""The AIJob status rendered from a record (pure: cpn.runtime.status.render_status)."""

from __future__ import annotations

from typing import Any

import pytest

from cpn.api import constants as k
from cpn.api.aijob import parse_time as parse_rfc3339
from cpn.api.status import IMMINENT
from cpn.core.model import Hold, WaitReason
from cpn.core.policy import QueuePolicy
from cpn.runtime.status import PENDING_MESSAGE, queue_of, render_status
from cpn.runtime.store import Record, Store
from tests.runtime.fakes import upsert
from tests.runtime.test_store import FixedEstimator, body

NOW = 1767225600.0  # 2026-01-01T00:00:00Z


def record(spec: dict[str, Any] | None = None, **fields: Any) -> Record:
    doc = body("a", "uid-1")
    doc["spec"].update(spec or {})
    rec = upsert(Store(QueuePolicy(), FixedEstimator()), doc, user="u", group="g")
    for name, value in fields.items():
        setattr(rec, name, value)
    return rec


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def queued(**fields: Any) -> Record:
    hold = Hold(
        job_key="ns/a", reason=WaitReason.Capacity, message="needs 1 GPU", score=12.5, level="l1"
    )
    return record(
        phase=k.PHASE_QUEUED,
        hold=hold,
        position=3,
        reason="Capacity",
        message=hold.message,
        **fields,
    )


def test_a_queued_job_shows_its_position_score_level_and_why_it_waits() -> None:
    status, refresh = render_status(queued(eta_start_s=NOW + 600), NOW)
    assert status["phase"] == k.PHASE_QUEUED
    assert (status["position"], status["score"], status["level"]) == (3, 12.5, "l1")
    assert status["queue"] == "l1"  # no spec.queue: the level that took it
    admitted = conditions(status)[k.COND_ADMITTED]
    assert admitted["status"] == "False" and admitted["reason"] == "Capacity"
    assert admitted["message"].startswith("needs 1 GPU; predicted start ")
    assert parse_rfc3339(status["estimatedStart"]) == NOW + 600
    assert refresh is not None and NOW < refresh < NOW + 600  # rendered again before it


def test_a_queued_jobs_start_already_due_is_imminent_never_in_the_past() -> None:
    status, _ = render_status(queued(eta_start_s=NOW - 5), NOW)
    assert status["eta"] == IMMINENT and "estimatedStart" not in status


@pytest.mark.parametrize(
    ("low", "high", "shown"),
    [
        (NOW + 300, NOW + 1200, {"earliest", "latest"}),
        (NOW - 60, NOW + 1200, {"latest"}),  # a bound already due is left out
        (None, None, None),
    ],
)
def test_the_start_range_shows_only_bounds_still_ahead(
    low: float | None, high: float | None, shown: set[str] | None
) -> None:
    status, _ = render_status(queued(eta_start_s=NOW + 600, eta_range=(low, high)), NOW)
    got = status.get("estimatedStartRange")
    assert (set(got) if got is not None else None) == shown


def test_a_running_job_shows_where_it_runs_and_its_finish_not_a_position() -> None:
    rec = record(
        phase=k.PHASE_RUNNING,
        position=4,
        cluster="member-a",
        gpu_type="A100",
        nodes=("n1",),
        member_job="a-1",
        start_s=NOW - 100,
        transfer_s=20.0,
        predicted_runtime_s=300.0,
        reason="Running",
        message="running on member-a (A100)",
        eta_start_s=NOW + 50,
    )
    status, refresh = render_status(rec, NOW, member_namespace="cpn-jobs")
    assert "position" not in status and "estimatedStart" not in status and refresh is None
    assert status["memberJob"] == {"cluster": "member-a", "name": "a-1", "namespace": "cpn-jobs"}
    assert parse_rfc3339(status["estimatedFinish"]) == NOW - 100 + 20 + 300
    assert (status["cluster"], status["gpuType"], status["nodes"]) == ("member-a", "A100", ["n1"])
    conds = conditions(status)
    assert conds[k.COND_RUNNING]["status"] == "True"
    assert conds[k.COND_ADMITTED]["status"] == "True"


def test_a_finished_job_shows_its_actual_runtime_and_a_finished_condition() -> None:
    rec = record(
        phase=k.PHASE_SUCCEEDED,
        start_s=NOW - 100,
        finish_s=NOW,
        actual_s=100.0,
        reason="Succeeded",
        message="ran 1m40s",
    )
    status, _ = render_status(rec, NOW)
    assert status["actualRuntimeSeconds"] == 100.0
    assert parse_rfc3339(status["completionTime"]) == NOW
    conds = conditions(status)
    assert conds[k.COND_FINISHED]["status"] == "True"
    assert conds[k.COND_RUNNING]["status"] == "False"


def test_an_invalid_spec_says_what_is_wrong_in_the_valid_condition() -> None:
    rec = record(phase=k.PHASE_INVALID, invalid="spec.resources.gpus: must be > 0")
    status, _ = render_status(rec, NOW)
    valid = conditions(status)[k.COND_VALID]
    assert (valid["status"], valid["reason"]) == ("False", "InvalidSpec")
    assert valid["message"] == status["message"] == "spec.resources.gpus: must be > 0"


def test_an_unknown_queue_is_a_false_queue_known_condition() -> None:
    rec = record({"queue": "nope"}, unknown_queue="queue 'nope' is not in the policy")
    status, _ = render_status(rec, NOW)
    known = conditions(status)[k.COND_QUEUE_KNOWN]
    assert (known["status"], known["reason"]) == ("False", "UnknownQueue")
    assert queue_of(rec) == status["queue"] == "nope"


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    rec = queued(eta_start_s=NOW + 600)
    first, _ = render_status(rec, NOW)
    rec.written = first
    later, _ = render_status(rec, NOW + 120)
    before = conditions(first)[k.COND_ADMITTED]["lastTransitionTime"]
    assert conditions(later)[k.COND_ADMITTED]["lastTransitionTime"] == before


def test_a_job_no_cycle_has_ranked_yet_says_so() -> None:
    """Just submitted: Queued, no position, and a reason a researcher can read (never blank)."""
    status, _ = render_status(record(phase=k.PHASE_QUEUED), NOW)
    assert "position" not in status
    assert (status["reason"], status["message"]) == ("Pending", PENDING_MESSAGE)
    assert conditions(status)[k.COND_ADMITTED]["reason"] == "Pending"
