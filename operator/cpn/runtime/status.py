"""The AIJob status cpn writes, rendered from what the operator knows of the job.

Pure: the instant comes from the caller, nothing is read or written here. The
runtime renders a record's status after each transition and before each write
(:meth:`cpn.runtime.hubwrites.HubWrites.render_status`); what each field means and how
fresh it is, see docs/user-guide.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cpn.api import constants as k
from cpn.api.status import (
    clock,
    condition,
    human_duration,
    likely,
    rfc3339,
    start_fields,
    upcoming,
)
from cpn.core import reasons
from cpn.core.explain import CandidateView, Choice
from cpn.core.policy import DEFAULT_QUEUE
from cpn.runtime.gpuusage import usage_status
from cpn.runtime.store import Record, preemption_status, unpack

#: The reason and message of a queued job no cycle has ranked yet.
PENDING = "Pending"
PENDING_MESSAGE = "not ranked yet: waiting for the next scheduling cycle"


def render_status(
    record: Record, now_s: float, member_namespace: str = ""
) -> tuple[dict[str, Any], float | None]:
    """The status ``record``'s AIJob should have at ``now_s``, and when it must be
    rendered again because a start instant it shows comes near (None: no need).
    ``member_namespace`` is where its member Job lives on its cluster."""
    job = record.job
    hold = record.hold if record.phase in {k.PHASE_QUEUED, k.PHASE_SUSPENDED} else None
    gpus = job.gpus if job else None
    written = unpack(record.written)  # (packed: decoded once here)
    predicted = dict(job.estimate.runtime_s) if job else {}
    high = dict(job.estimate.high_s) if job else {}
    if record.finished:  # what was predicted stays as shown while it ran (not estimated again)
        predicted = dict(written.get("predictedRuntimeSeconds") or predicted)
        high = dict(written.get("predictedRuntimeHighSeconds") or high)
    best = record.predicted_runtime_s or (min(predicted.values()) if predicted else 0)
    prev = written.get("conditions") or []
    gen = record.generation
    waiting = record.phase in {k.PHASE_QUEUED, k.PHASE_SUSPENDED}
    # queued but not yet seen by a cycle (just submitted, or the first cycle is still due)
    unranked = record.phase == k.PHASE_QUEUED and not record.reason and not record.invalid
    status: dict[str, Any] = {
        "phase": record.phase,
        "queue": queue_of(record),
        "level": hold.level if hold else "",
        "user": record.user,
        "group": record.group,
        "position": (record.position or None) if record.phase == k.PHASE_QUEUED else None,
        "score": round(hold.score, 3) if hold else None,
        "gpus": gpus,
        "reason": record.reason or (PENDING if unranked else ""),
        "message": record.message or record.invalid or (PENDING_MESSAGE if unranked else ""),
        "predicted": human_duration(best) if best else "",
        "predictedRuntimeSeconds": {t: round(v, 1) for t, v in sorted(predicted.items())},
        "attempts": record.attempts,
        "failedAttempts": record.failed_attempts or None,
        "fence": record.fence or None,
        "cluster": record.cluster or None,
        "gpuType": record.gpu_type or None,
        "domain": record.domain or None,
        "nodes": list(record.nodes) or None,
        "runsAlone": True if record.alone and not waiting else None,
        "transferSeconds": round(record.transfer_s, 1) if record.cluster else None,
        "memberJob": (
            {
                "cluster": record.cluster,
                "name": record.member_job,
                "namespace": member_namespace,
            }
            if record.member_job
            else None
        ),
        "startTime": rfc3339(record.start_s) if record.start_s else None,
        "completionTime": rfc3339(record.finish_s) if record.finish_s else None,
        "actualRuntimeSeconds": round(record.actual_s, 1) if record.actual_s else None,
        "notBefore": rfc3339(record.not_before_s) if record.not_before_s else None,
        "fifoDue": rfc3339(record.fifo_due_s),
        "fifoDueCalibrated": rfc3339(record.fifo_calibrated_due_s),
        "fifoBasisSeconds": (
            round(record.fifo_basis_s, 1) if record.fifo_basis_s is not None else None
        ),
    }
    status.update(preemption_status(record))
    status["staging"] = staging_status(record)
    if not waiting:
        status.update(usage_status(record.gpu_usage))
    if high:
        status["predictedRuntimeHighSeconds"] = {t: round(v, 1) for t, v in sorted(high.items())}
    eta_finish = record.eta_finish_s if waiting else None
    if record.phase in {k.PHASE_STAGING, k.PHASE_DISPATCHED, k.PHASE_RUNNING}:
        began = record.start_s or record.dispatch_s
        eta_finish = began + record.transfer_s + record.predicted_runtime_s
    status["estimatedFinish"] = rfc3339(eta_finish)
    if waiting:
        shown, refresh_by = start_fields(record.eta_start_s, *record.eta_range, now_s)
        status.update(shown)
    else:
        status["eta"] = clock(eta_finish) or None
        refresh_by = None
    if record.choice is not None and record.active:
        status["placement"] = placement_view(record.choice)
    conditions = [
        condition(
            k.COND_VALID,
            not record.invalid and record.reason != "Infeasible",
            "InvalidSpec"
            if record.invalid
            else ("Infeasible" if record.reason == "Infeasible" else "Valid"),
            record.invalid or (record.message if record.reason == "Infeasible" else "accepted"),
            generation=gen,
            now_s=now_s,
            previous=prev,
        ),
        condition(
            k.COND_ADMITTED,
            record.phase not in {k.PHASE_QUEUED, k.PHASE_SUSPENDED, k.PHASE_INVALID},
            record.reason or PENDING,
            explanation(record, status, now_s),
            generation=gen,
            now_s=now_s,
            previous=prev,
        ),
    ]
    if record.job is not None and record.job.queue:
        conditions.append(
            condition(
                k.COND_QUEUE_KNOWN,
                not record.unknown_queue,
                "UnknownQueue" if record.unknown_queue else "KnownQueue",
                record.unknown_queue or f"queue {record.job.queue!r} is in the policy",
                generation=gen,
                now_s=now_s,
                previous=prev,
            )
        )
    if record.phase in {k.PHASE_RUNNING, k.PHASE_SUCCEEDED, k.PHASE_FAILED}:
        conditions.append(
            condition(
                k.COND_RUNNING,
                record.phase == k.PHASE_RUNNING,
                record.phase,
                record.message,
                generation=gen,
                now_s=now_s,
                previous=prev,
            )
        )
    if record.finished:
        conditions.append(
            condition(
                k.COND_FINISHED,
                True,
                record.reason or record.phase,
                record.message or record.invalid,
                generation=gen,
                now_s=now_s,
                previous=prev,
            )
        )
    status["conditions"] = conditions
    return {key: value for key, value in status.items() if value is not None}, refresh_by


def waiting_phase(record: Record) -> bool:
    """True while the job waits in the queue (queued or suspended)."""
    return record.phase in {k.PHASE_QUEUED, k.PHASE_SUSPENDED}


def queue_of(record: Record) -> str:
    """The queue a job's status names: spec.queue, else the policy level that took it."""
    job, hold = record.job, record.hold
    return (job.queue if job and job.queue else (hold.level if hold else "")) or DEFAULT_QUEUE


def placement_view(choice: Choice) -> dict[str, Any]:
    """status.placement: the place chosen and the runner-up, seconds from the decision."""

    def view(c: CandidateView) -> dict[str, Any]:
        return {
            "cluster": c.cluster,
            "gpuType": c.gpu_type,
            "runtimeSeconds": round(c.runtime_s, 1),
            "transferSeconds": round(c.transfer_s, 1),
            "waitSeconds": round(c.earliest_start_s or 0.0, 1),
            "completionSeconds": round(c.completion_s or 0.0, 1),
        }

    out = {"chosen": view(choice.chosen)}
    if choice.runner_up is not None:
        out["runnerUp"] = view(choice.runner_up)
    return out


def explanation(record: Record, status: Mapping[str, Any], now_s: float) -> str:
    """The Admitted condition's message: the reason's sentence, then, while waiting, the
    running job whose end makes room and the predicted start; once placed, why there and
    not at the runner-up."""
    parts = [record.message or ""]
    if record.phase == k.PHASE_QUEUED and record.frees is not None:
        frees = record.frees
        at = upcoming(frees.at_s, now_s)
        parts.append(
            f"room frees when {frees.job_key} on {frees.cluster} ({frees.gpu_type}) ends, "
            + (f"expected {clock(at)}" if at else "expected about now")
        )
    if record.phase == k.PHASE_QUEUED and status.get("eta"):
        parts.append(f"predicted start {status['eta']}{likely(status.get('estimatedStartRange'))}")
    if record.alone and not waiting_phase(record) and record.job is not None:
        parts.append(reasons.started_alone(record.job.model))
    choice = record.choice
    if record.active and choice is not None:
        chosen = choice.chosen
        text = (
            f"chosen for the soonest completion: {human_duration(chosen.completion_s) or '0s'}"
            f" (runtime {human_duration(chosen.runtime_s)}, transfer "
            f"{human_duration(chosen.transfer_s) or '0s'})"
        )
        other = choice.runner_up
        if other is not None:
            text += (
                f"; runner-up {other.cluster} ({other.gpu_type}): "
                f"{human_duration(other.completion_s)} (wait "
                f"{human_duration(other.earliest_start_s) or '0s'}, runtime "
                f"{human_duration(other.runtime_s)}, transfer "
                f"{human_duration(other.transfer_s) or '0s'})"
            )
        parts.append(text)
    return "; ".join(p for p in parts if p)


def staging_status(record: Record) -> dict[str, Any] | None:
    """``status.staging``: the inputs it waits for on its member, and its staging's
    predicted and actual seconds (runtime/staging.py); None when it staged nothing."""
    if not (record.staging or record.staging_predicted_s or record.staging_actual_s):
        return None
    return {
        "inputs": list(record.staging) or None,
        "predictedSeconds": round(record.staging_predicted_s, 1),
        "actualSeconds": round(record.staging_actual_s, 1) if record.staging_actual_s else None,
    }
