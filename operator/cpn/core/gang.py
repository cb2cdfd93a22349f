"""All or nothing for the workers of one attempt (a gang).

A multi-worker job computes only when every worker runs: a worker that waits for a place
keeps the others idle while they hold their GPUs. An attempt is therefore *running* only
once all its workers run, and an attempt whose workers are not all running
``timeout_s`` after it was dispatched is removed (its member Job deleted) and its job
requeued. The published anchor for this behaviour is Kueue's ``waitForPodsReady``
(a workload whose pods are not all ready within a timeout is evicted and requeued).

:func:`judge_start` is the decision; the runtime counts the running workers and acts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Gang(Enum):
    """What to do with an attempt that is not yet running."""

    WAIT = "wait"  # not all workers run yet; the deadline has not passed
    RUNNING = "running"  # every worker runs: the attempt is running
    REMOVE = "remove"  # the deadline passed: remove the attempt, requeue the job


@dataclass(frozen=True, slots=True)
class Verdict:
    """:func:`judge_start`'s answer: the action, a sentence for the status and Events, and
    the instant a waiting attempt is removed at."""

    action: Gang
    message: str
    deadline_s: float


def judge_start(
    wanted: int, running: int, started_s: float, now_s: float, timeout_s: float
) -> Verdict:
    """An attempt of ``wanted`` workers, ``running`` of which run, dispatched at
    ``started_s``: running when all run, removed once ``timeout_s`` has passed without
    that, waiting otherwise. A job of one worker is a gang of one."""
    wanted = max(wanted, 1)
    deadline = started_s + timeout_s
    if running >= wanted:
        return Verdict(Gang.RUNNING, f"all {wanted} workers running", deadline)
    counted = f"{max(running, 0)} of {wanted} workers running"
    if now_s >= deadline:
        return Verdict(
            Gang.REMOVE,
            f"{counted} after {timeout_s:.0f} s: attempt removed, requeued",
            deadline,
        )
    return Verdict(
        Gang.WAIT,
        f"{counted}; all must run within {timeout_s:.0f} s of the dispatch, else the "
        "attempt is removed and the job requeued",
        deadline,
    )
