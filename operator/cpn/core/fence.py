"""Fencing: which member Job may speak for an AIJob, and where each attempt checkpoints.

Every attempt of an AIJob has a number (1, 2...) and a fencing token, ``<attempt>-<nonce>``
with a nonce drawn at dispatch (the caller draws it: nothing here is random). Both are in
the member Job's labels and its containers' environment, and the token is kept on the
record and in the AIJob's status, so it outlives an operator restart. Only the Job that
carries the record's current token is believed: a Job of an earlier attempt (a member that
was cut off and came back, a create that landed after its dispatch was given up) is
ignored, and its result, if it reports one, is named in an Event.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: What a member should do when it is not ready past the member timeout (policy keys
#: ``retry.member_lost`` and ``retry.member_timeout_s``): requeue every job (availability;
#: a job that does not checkpoint may then run twice, once on each side of a partition),
#: or requeue only jobs that checkpoint and hold the others until the member is confirmed
#: gone (at most once).
AVAILABILITY = "availability"
AT_MOST_ONCE = "at-most-once"
MEMBER_LOST_CHOICES = (AVAILABILITY, AT_MOST_ONCE)

#: Directory names of attempts under the AIJob's checkpoint directory.
ATTEMPT_DIR = "attempt-{}"
#: The file a job writes last into a checkpoint directory: only then is it complete.
COMPLETE_MARKER = "COMPLETE"


def fence_token(attempt: int, nonce: str) -> str:
    """The token of attempt ``attempt``: ``<attempt>-<nonce>``."""
    return f"{attempt}-{nonce}"


def next_fence(current: str, attempt: int, nonce: str) -> str:
    """The token of attempt ``attempt`` about to be dispatched: the current one when it was
    made for the same number (a dispatch whose create failed for want of an answer is not
    counted, and its number is used again: the Job may have landed under it, by the same
    name), else a new one with ``nonce``."""
    return current if fence_attempt(current) == attempt else fence_token(attempt, nonce)


def fence_attempt(token: str) -> int:
    """The attempt number a token was made for (0 for no token or a malformed one)."""
    head = token.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a member Job speaks for the record, and the Event to post when it does not
    and reports a result (``stale_result`` is then ``Succeeded`` or ``Failed``)."""

    current: bool
    stale_result: str = ""
    message: str = ""


def judge_report(
    attempt: int,
    fence: str,
    job_attempt: int,
    job_fence: str,
    result: str = "",
    where: str = "",
) -> Verdict:
    """Does the member Job ``where`` (its name and cluster, for the message; its
    ``job_attempt`` and ``job_fence``, reporting ``result``: "", ``Succeeded`` or
    ``Failed``) speak for a record whose current attempt is ``attempt``
    with token ``fence``?

    The attempt numbers must match, and so must the tokens when both are known: a record
    restored from a status written before tokens existed (``fence`` empty) or a Job
    created before them (``job_fence`` empty) is judged by the number alone.
    """
    current = job_attempt == attempt and (not fence or not job_fence or job_fence == fence)
    if current or result not in {"Succeeded", "Failed"}:
        return Verdict(current)
    token = job_fence or f"attempt {job_attempt}"
    message = (
        f"member Job {where} reported {result} for attempt {job_attempt} "
        f"(fence {token}), but the current attempt is {attempt}"
        + (f" (fence {fence})" if fence else "")
        + ": ignored, and the stale Job is deleted"
    )
    return Verdict(False, result, message)


def holds_for_member(policy_choice: str, checkpoints: bool) -> bool:
    """Should a job on an unreachable member wait for it to be confirmed gone rather than
    be requeued? Only under ``at-most-once``, and only a job that does not checkpoint (one
    that does resumes from its own attempt's directory: two attempts never share one)."""
    return policy_choice == AT_MOST_ONCE and not checkpoints


def member_timeout(policy_s: float | None, default_s: float) -> tuple[float, str]:
    """How long a member may stay not ready (counted from when it turned not ready) before
    its jobs are given up on there, and where that figure comes from, for messages: the
    policy's ``retry.member_timeout_s`` when it sets one (``policy_s``), else the
    operator's ``default_s`` (``CPN_MEMBER_TIMEOUT_S``)."""
    if policy_s is not None:
        return policy_s, "policy retry.member_timeout_s"
    return default_s, "operator default CPN_MEMBER_TIMEOUT_S; the policy sets no member_timeout_s"


def checkpoint_env(root: str, uid: str, attempt: int) -> dict[str, str]:
    """The checkpoint convention's environment for attempt ``attempt`` of the AIJob
    ``uid``: ``CPN_CHECKPOINT_DIR``, this attempt's own directory (only it writes there);
    ``CPN_CHECKPOINT_ROOT``, the AIJob's directory holding every attempt's; and
    ``CPN_RESUME_DIRS``, the earlier attempts' directories, newest first, separated by
    ``:`` (empty for the first attempt), among which the job resumes from the newest
    complete checkpoint (one whose directory holds :data:`COMPLETE_MARKER`)."""
    base = f"{root.rstrip('/') or ''}/{uid}"
    earlier = [f"{base}/{ATTEMPT_DIR.format(n)}" for n in range(attempt - 1, 0, -1)]
    return {
        "CPN_CHECKPOINT_ROOT": base,
        "CPN_CHECKPOINT_DIR": f"{base}/{ATTEMPT_DIR.format(attempt)}",
        "CPN_RESUME_DIRS": ":".join(earlier),
    }


def job_result(status: Mapping[str, Any]) -> str:
    """``Succeeded``, ``Failed`` or "" from a batch/v1 Job's status conditions."""
    true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    if true & {"Complete", "SuccessCriteriaMet"}:
        return "Succeeded"
    if true & {"Failed", "FailureTarget"}:
        return "Failed"
    return ""
