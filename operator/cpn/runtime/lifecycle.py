"""A record's transitions, as pure functions: (record, what was observed, now) -> the
record after it and what to do (:mod:`cpn.runtime.effects`).

None of them changes the record it is given, reads a clock or calls anything outside;
the runtime copies the new record's fields onto its own (the store and in-flight
creates hold it by identity) and carries out the effects in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from cpn.api import constants as k
from cpn.api.jobs import member_job_name
from cpn.api.status import human_duration
from cpn.core.explain import Choice
from cpn.core.fence import next_fence
from cpn.core.gang import Gang, Verdict
from cpn.core.model import Start
from cpn.core.policy import Retry
from cpn.runtime.effects import (
    KICK,
    WRITE,
    Count,
    CreateJob,
    DeleteJob,
    Effect,
    Event,
    Forget,
    Learn,
)
from cpn.runtime.store import Arrival, Record


@dataclass(frozen=True, slots=True)
class Step:
    """A transition's result: the record after it, and what to do, in order."""

    record: Record
    effects: tuple[Effect, ...] = ()


def arrived(arrival: Arrival) -> Step:
    """A watch event of its AIJob taken by the store (:meth:`cpn.runtime.store.Store.put`).
    Deleted, or its deletion begun (held by someone else's finalizer): its member Job is
    deleted now (one deleted while the operator was away, or while its member was
    unreachable, is removed by the sweep: no finalizer, so cancelling never waits on a
    member). ``spec.suspend`` set while it runs: :func:`suspended`. A spec or deletion
    change asks for a cycle (its status, our own write, does not)."""
    record = arrival.record
    stop: tuple[Effect, ...] = ()
    if (arrival.gone or arrival.began_deleting) and record.active and record.member_job:
        stop = (DeleteJob(record.cluster, record.member_job),)
    kick = (KICK,) if arrival.changed else ()
    if arrival.gone:
        return Step(record, (*stop, Forget(), *kick))
    told: tuple[Effect, ...] = ()
    if record.unknown_queue and not record.finished and arrival.changed:
        told = (Event("UnknownQueue", record.unknown_queue, True),)
    suspend = record.job is not None and record.job.suspended and record.active
    if suspend and not arrival.began_deleting:
        step = suspended(record)
        return Step(step.record, (*told, *step.effects, *kick))
    return Step(record, (*told, *stop, *kick))


def unplaced(record: Record, **changes: Any) -> Record:
    """The record with ``changes`` and no placement: no member, Job, nodes or start."""
    return replace(
        record,
        **{
            "cluster": "",
            "gpu_type": "",
            "domain": "",
            "member_job": "",
            "nodes": (),
            "alone": False,
            "gpu_usage": None,
            "start_s": 0.0,
            "dispatch_s": 0.0,
            "observed": False,
            "choice": None,
            **changes,
        },
    )


def requeued(
    record: Record,
    *,
    reason: str,
    message: str,
    event: str,
    phase: str = k.PHASE_QUEUED,
    warning: bool = True,
    **changes: Any,
) -> Step:
    """Back to the queue (or suspended), unplaced, with an Event and a status write."""
    new = unplaced(record, phase=phase, reason=reason, message=message, **changes)
    return Step(new, (Event(event, message, warning), WRITE))


def dispatched(
    record: Record,
    start: Start,
    choice: Choice | None,
    now_s: float,
    *,
    nonce: str,
    restart_cost_s: float,
    domain: str = "",
) -> Step:
    """A cycle's start assumed: the record holds its GPUs from now, as attempt
    ``attempts + 1`` on ``start``'s member, nodes (in ``domain``) and GPU type, and its
    member Job is to be created. Its fencing token is that attempt's (made with ``nonce``,
    or kept when a create of the same attempt went unanswered: the Job may have landed
    under its name). A preempted job resumes from its checkpoint, predicted to need
    ``restart_cost_s`` plus the rest of its work. A record with no parsed job is not
    dispatched (no change, nothing to do)."""
    if record.job is None:
        return Step(record)
    attempt = record.attempts + 1
    predicted = start.predicted_runtime_s
    resume_from = None
    if record.preemptions:  # the rest of its work, after the restart
        resume_from = record.checkpointed_s
        predicted = restart_cost_s + max(0.0, start.predicted_runtime_s - resume_from)
    message = (
        f"dispatched to {start.cluster} ({start.gpu_type}, "
        f"node {', '.join(sorted(set(start.nodes)))}{f', domain {domain}' if domain else ''}); "
        f"predicted {human_duration(predicted)}"
    )
    if resume_from is not None:
        message += (
            f"; resumes from its checkpoint at {human_duration(resume_from) or '0s'}"
            f" (attempt {attempt}, after {record.preemptions} preemption(s))"
        )
    new = replace(
        record,
        attempts=attempt,
        fence=next_fence(record.fence, attempt, nonce),
        phase=k.PHASE_DISPATCHED,
        cluster=start.cluster,
        gpu_type=start.gpu_type,
        domain=domain,
        nodes=start.nodes,
        alone=start.alone,
        predicted_runtime_s=predicted,
        transfer_s=start.transfer_s,
        dispatch_s=now_s,
        not_before_s=0.0,
        position=0,
        frees=None,
        choice=choice,
        member_job=member_job_name(record.name, record.uid, attempt),
        reason="Dispatched",
        message=message,
    )
    return Step(new, (CreateJob(start.cluster, attempt, resume_from),))


def member_lost(record: Record, member: str, timeout_s: float, source: str) -> Step:
    """Its member has been not ready for ``timeout_s`` (whose value comes from ``source``):
    requeued (its old Job is removed by the sweep once the member is back)."""
    message = (
        f"member {member} not ready for {timeout_s:.0f}s ({source}): "
        "requeued; its old member Job is removed when the member returns"
    )
    return requeued(record, reason="MemberLost", message=message, event="Requeued")


def member_removed(record: Record, member: str, cannot_delete: str) -> Step:
    """Its member's MemberCluster was deleted while the job was placed there: requeued,
    whatever ``retry.member_lost`` says (an admin's removal confirms the member gone). Its
    member Job is deleted next, or cannot be (``cannot_delete`` says why): then nothing of
    cpn's will delete it, and the message says the job may run twice."""
    gone = (
        f"member cluster {member} was removed (its MemberCluster deleted) while the job was on it"
    )
    if cannot_delete:
        message = (
            f"{gone}: requeued; its member Job {record.member_job} cannot be deleted "
            f"({cannot_delete}), so it may still run there as well"
        )
    else:
        message = f"{gone}: requeued; its member Job {record.member_job} there is being deleted"
    return requeued(record, reason="MemberRemoved", message=message, event="Requeued")


def member_job_missing(record: Record) -> Step:
    """After a restart its status says Dispatched but its member has no such Job."""
    message = (
        f"member Job {record.member_job} is not on {record.cluster} (the operator "
        "stopped before creating it, or it was deleted meanwhile): queued again"
    )
    return requeued(record, reason="MemberJobMissing", message=message, event="Requeued")


def suspended(record: Record) -> Step:
    """``spec.suspend`` set on a running job: its member Job stopped, the job kept."""
    stop: tuple[Effect, ...] = ()
    if record.active and record.member_job:
        stop = (DeleteJob(record.cluster, record.member_job),)
    message = "suspended by its owner (spec.suspend); its member Job was stopped"
    step = requeued(
        record,
        reason="Suspended",
        message=message,
        event="Suspended",
        phase=k.PHASE_SUSPENDED,
        warning=False,
    )
    return Step(step.record, stop + step.effects)


def preempted(record: Record, why: str, lost_s: float) -> Step:
    """Stopped for another job, ``why`` saying which and by which rule (its service and
    checkpoint already booked by :func:`cpn.runtime.store.preempted`): requeued, to resume
    from its checkpoint."""
    message = (
        f"{why} (preemption {record.preemptions}): it resumes from its checkpoint at "
        f"{human_duration(record.checkpointed_s) or '0s'} of compute; "
        f"{human_duration(lost_s) or '0s'} of work since its last checkpoint is lost"
    )
    return requeued(record, reason="Preempted", message=message, event="Preempted")


def attempt_failed(
    record: Record, why: str, retry: Retry, now_s: float, reason: str = "Retrying"
) -> Step:
    """Its attempt failed: its member Job deleted; retried after an exponential back-off,
    or Failed once ``retry.max_attempts`` attempts have failed. Only failures count:
    attempts ended by a preemption, a suspension or a lost member do not (as Kubernetes'
    pod failure policy can ignore disruptions), so a job cpn preempted keeps its retries."""
    effects: list[Effect] = []
    if record.member_job:
        effects.append(DeleteJob(record.cluster, record.member_job))
    failures = record.failed_attempts + 1
    if failures >= retry.max_attempts:
        message = f"attempt {record.attempts} failed ({why}); no retries left"
        new = replace(
            record,
            failed_attempts=failures,
            failure=why,
            phase=k.PHASE_FAILED,
            finish_s=now_s,
            reason="Failed",
            message=message,
        )
        effects += [Count("ended"), Event("Failed", message, True)]
    else:
        delay = retry.backoff_s * (2 ** (failures - 1))
        message = f"attempt {record.attempts} failed ({why}); retrying in {delay:.0f}s"
        new = unplaced(
            record,
            failed_attempts=failures,
            failure=why,
            phase=k.PHASE_QUEUED,
            not_before_s=now_s + delay,
            reason=reason,
            message=message,
        )
        effects += [Count("retrying"), Event(reason, message, True)]
    return Step(new, (*effects, WRITE, KICK))


def create_failed(
    record: Record, member: str, why: str, refused: bool, attempt: int, retry: Retry, now_s: float
) -> Step:
    """Its member Job could not be created. Refused as it is: the attempt counts and fails
    (it holds no GPUs or quota meanwhile). Unreachable, throttled or busy: back in the
    queue, the attempt not counted."""
    if refused:  # nothing was created
        failed = replace(record, member_job="")
        return attempt_failed(failed, f"{member} refused its Job: {why}", retry, now_s)
    return requeued(
        record,
        reason="DispatchFailed",
        message=f"could not create the Job on {member}: {why}",
        event="DispatchFailed",
        attempts=attempt - 1,
    )


def start_judged(
    record: Record, verdict: Verdict, wanted: int, running: int, retry: Retry, now_s: float
) -> Step:
    """A dispatched attempt judged by :func:`cpn.core.gang.judge_start`: Running when all
    its workers run, removed and retried past its start deadline, else its message told
    how many run."""
    if verdict.action is Gang.REMOVE:
        return attempt_failed(record, verdict.message, retry, now_s, reason="StartTimeout")
    if verdict.action is Gang.RUNNING:
        message = f"running on {record.cluster} ({record.gpu_type})"
        if wanted > 1:
            message += f", {verdict.message}"
        new = replace(
            record, phase=k.PHASE_RUNNING, start_s=now_s, reason="Running", message=message
        )
        return Step(new, (Count("started"), Event("Started", message), WRITE))
    if running and record.message != verdict.message:  # part of the gang runs
        return Step(replace(record, message=verdict.message), (WRITE,))
    return Step(record)


def succeeded(record: Record, finished_s: float) -> Step:
    """Its member Job completed at ``finished_s``: the running time of all its attempts."""
    began = record.start_s or record.dispatch_s or finished_s
    actual = record.attained_s + max(0.0, finished_s - began)
    message = (
        f"finished on {record.cluster} ({record.gpu_type}) in "
        f"{human_duration(actual)}, predicted "
        f"{human_duration(record.predicted_runtime_s)}"
    )
    new = replace(
        record,
        phase=k.PHASE_SUCCEEDED,
        finish_s=finished_s,
        actual_s=actual,
        reason="Succeeded",
        message=message,
    )
    return Step(new, (Learn(), Event("Succeeded", message), Count("ended"), WRITE, KICK))


def adopted(
    record: Record, member: str, job: Mapping[str, Any], attempt: int, now_s: float
) -> Step:
    """A member Job of its next attempt, created just before a crash whose Dispatched
    status never landed: the record takes it (its nodes from the Job's node pins)."""
    pod = ((job.get("spec") or {}).get("template")) or {}
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = (required.get("nodeSelectorTerms") or [{}])[0].get("matchExpressions") or []
    nodes = tuple(
        v for t in terms if t.get("key") == k.HOSTNAME_LABEL for v in t.get("values") or []
    )
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    gpu_type = annotations.get(k.ANNOTATION_GPU_TYPE, record.gpu_type)
    predicted = record.predicted_runtime_s
    if record.job is not None:
        predicted = record.job.estimate.runtime_s.get(gpu_type, 0.0)
    new = replace(
        record,
        attempts=attempt,
        phase=k.PHASE_DISPATCHED,
        cluster=member,
        member_job=job["metadata"]["name"],
        fence=((job.get("metadata") or {}).get("labels") or {}).get(k.LABEL_FENCE, ""),
        gpu_type=gpu_type,
        nodes=nodes,
        dispatch_s=now_s,
        predicted_runtime_s=predicted,
    )
    return Step(new, (WRITE,))
