"""What a record's transition asks the runtime to do (:mod:`cpn.runtime.lifecycle`).

Values only: the runtime's shell carries them out on the record the transition was about
(:meth:`cpn.runtime.following.Following.carry_out`), in the order given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Event:
    """Post a Kubernetes Event about the AIJob."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True, slots=True)
class WriteStatus:
    """Write the AIJob's status (queued, merged with other writes of it)."""


@dataclass(frozen=True, slots=True)
class DeleteJob:
    """Delete a member Job (best effort; the sweep retries)."""

    cluster: str
    name: str


@dataclass(frozen=True, slots=True)
class CreateJob:
    """Create the member Job of the record's attempt ``attempt`` on ``cluster`` (in the
    background; the dispatcher renders it, resuming from ``resume_from_s`` when set)."""

    cluster: str
    attempt: int
    resume_from_s: float | None = None


@dataclass(frozen=True, slots=True)
class Kick:
    """Ask for a scheduling cycle soon."""


@dataclass(frozen=True, slots=True)
class Count:
    """Count it in the operator's metrics: an attempt started, a job ended, a retry."""

    what: Literal["started", "ended", "retrying"]


@dataclass(frozen=True, slots=True)
class Learn:
    """Feed the estimator the finished job's real runtime (queued: it learns before the
    next cycle's snapshot)."""


@dataclass(frozen=True, slots=True)
class Forget:
    """Forget the job's waits (the AIJob is gone): the wait calibration drops it."""


Effect = Event | WriteStatus | DeleteJob | CreateJob | Kick | Count | Learn | Forget

WRITE = WriteStatus()
KICK = Kick()
