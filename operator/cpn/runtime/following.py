"""Following member Jobs: each Job event moves its record (:mod:`cpn.runtime.lifecycle`),
attempts that do not start in time go; and which Jobs the sweep deletes (no live attempt
owns them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import fields
from typing import Any

from cpn.api import constants as k
from cpn.api.aijob import parse_time
from cpn.api.jobs import finished_at, workers_running
from cpn.core.fence import job_result, judge_report
from cpn.core.gang import Gang, judge_start
from cpn.runtime import effects, lifecycle
from cpn.runtime.ports import Member
from cpn.runtime.state import RuntimeState, quiet
from cpn.runtime.store import Record

log = logging.getLogger(__name__)


class Following:
    """Member Jobs followed (:meth:`follow`, each event of one), their start deadlines
    judged, and every record transition carried out (:meth:`carry_out`), on the runtime's
    shared ``state``."""

    def __init__(self, state: RuntimeState) -> None:
        self.state = state
        self._stale_told: set[tuple[str, str]] = set()  # stale Jobs whose result was told
        # set by the engine: a staging Job's event goes to runtime/staging.py
        self.staging_seen: Callable[[Member, str, Mapping[str, Any]], None] | None = None

    def carry_out(self, record: Record, step: lifecycle.Step) -> None:
        """Take a transition's record (onto ``record`` itself: the store and in-flight
        creates hold it) and do what it asks, in order."""
        forgotten = any(isinstance(e, effects.Forget) for e in step.effects)
        if step.record is not record or forgotten:  # a run it ends is accounted
            now = self.state.clock.wall()
            self.state.usage.saw(record, step.record, forgotten=forgotten, now_s=now)
        if step.record is not record:
            for name in _RECORD_FIELDS:
                setattr(record, name, getattr(step.record, name))
        for effect in step.effects:
            if isinstance(effect, effects.Event):
                self.state.event(record, effect.reason, effect.message, warning=effect.warning)
            elif isinstance(effect, effects.WriteStatus):
                self.state.write_soon(record)
            elif isinstance(effect, effects.Kick):
                self.state.kick()
            elif isinstance(effect, effects.DeleteJob):
                member = self.state.members.get(effect.cluster)
                if member is not None:
                    self.state.pool.submit(quiet, member.delete_job, effect.name)
            elif isinstance(effect, effects.Count):
                if effect.what == "started":
                    self.state.observer.started(record)
                elif effect.what == "ended":
                    self.state.observer.ended(record)
                else:
                    self.state.observer.retrying()
            elif isinstance(effect, effects.Learn):
                self.state.learn_soon(record)
            elif isinstance(effect, effects.Forget):
                self.state.calibrator.forget(record.key)

    def learn(self) -> int:
        """The estimator sees the finished jobs' real runtimes queued since the last cycle
        (:meth:`~cpn.runtime.state.RuntimeState.learn_soon`), and the waiting jobs whose
        estimate that changes are estimated again (:meth:`~cpn.runtime.store.Store.learned`);
        returns how many."""
        queued, self.state.to_learn = self.state.to_learn, []
        for job, gpu_type, actual_s, key in queued:
            try:
                self.state.estimator.observe(job, gpu_type, actual_s)
                self.state.store.learned(job)
            except Exception:  # the predictor must never take the operator down
                log.exception("predictor failed to learn from %s", key)
        return len(queued)

    def _succeeded(self, record: Record, finished_s: float) -> None:
        self.carry_out(record, lifecycle.succeeded(record, finished_s))

    def _attempt_failed(self, record: Record, why: str, reason: str = "Retrying") -> None:
        retry = self.state.store.policy.retry
        now = self.state.clock.wall()
        self.carry_out(record, lifecycle.attempt_failed(record, why, retry, now, reason))

    def follow(self, member: Member, event: str, job: Mapping[str, Any]) -> None:
        labels = (job.get("metadata") or {}).get("labels") or {}
        if k.LABEL_BENCHMARK in labels:  # a GPUBenchmark's Job (runtime/benchmarks.py)
            self.state.kick()
            return
        if k.LABEL_PREPULL in labels:  # an image pre-pull Job: nothing to follow
            return
        if k.LABEL_STAGING in labels:  # a staging Job (runtime/staging.py)
            if self.staging_seen is not None:
                self.staging_seen(member, event, job)
            return
        uid = labels.get(k.LABEL_UID, "")
        attempt = int(labels.get(k.LABEL_ATTEMPT, "0") or 0)
        name = job["metadata"]["name"]
        if event == "DELETED":
            self._stale_told.discard((member.name, name))  # told once; the Job is gone now
        record = self.state.store.by_uid(uid)
        if record is None:
            return  # an orphan: the sweep deletes it once AIJobs are listed
        if record.finished or record.phase == k.PHASE_INVALID:
            return
        if record.draining is not None and event == "DELETED":
            self.state.kick()  # its preempted attempt is gone: the next may start
        elif record.preemptions and not record.active and attempt <= record.attempts:
            record.draining = record.draining or (member.name, name)  # seen after a restart
        status, fence = job.get("status") or {}, labels.get(k.LABEL_FENCE, "")
        where = f"{name} on {member.name}"
        told = judge_report(
            record.attempts, record.fence, attempt, fence, job_result(status), where
        )
        if not told.current or (record.active and record.cluster and record.cluster != member.name):
            if told.stale_result and (member.name, name) not in self._stale_told:
                self._stale_told.add((member.name, name))
                self.state.event(record, "StaleAttempt", told.message, warning=True)
            if attempt == record.attempts + 1 and not record.active and event != "DELETED":
                # created just before a crash
                step = lifecycle.adopted(record, member.name, job, attempt, self.state.clock.wall())
                step.record.domain = self.state.domain_at(member.name, step.record.nodes)
                self.carry_out(record, step)
            else:
                return  # a stale attempt: the sweep removes it
        if not record.active or record.member_job != name:
            return
        if event == "DELETED":
            self._attempt_failed(record, "its member Job was deleted")
            return
        record.observed = True
        conditions = {
            c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"
        }
        now = self.state.clock.wall()
        if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
            began = record.start_s or record.dispatch_s or now
            self._succeeded(record, finished_at(status, began, now))
        elif "Failed" in conditions or "FailureTarget" in conditions:
            message = (conditions.get("Failed") or conditions.get("FailureTarget") or {}).get(
                "message"
            ) or "a worker failed"
            self._attempt_failed(record, message)
        else:
            self._judge_start(record, job)

    def _judge_start(self, record: Record, job: Mapping[str, Any] | None) -> None:
        """A dispatched attempt whose workers all run is Running; one whose workers do not
        all run within ``retry.start_timeout_s`` of its dispatch is removed and requeued,
        never left half-started holding GPUs (:func:`cpn.core.gang.judge_start`). ``job``
        is its member Job as last seen (None: not seen yet)."""
        if record.phase != k.PHASE_DISPATCHED:
            return
        if not record.dispatch_s and job is not None:  # restored after a restart
            created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
            record.dispatch_s = created or self.state.clock.wall()
        wanted = record.job.workers if record.job is not None else 1
        running = workers_running((job or {}).get("status") or {})
        timeout_s = self.state.store.policy.retry.start_timeout_s
        now = self.state.clock.wall()
        verdict = judge_start(wanted, running, record.dispatch_s, now, timeout_s)
        if verdict.action is Gang.REMOVE:
            log.warning("%s on %s: %s", record.key, record.cluster, verdict.message)
        retry = self.state.store.policy.retry
        self.carry_out(record, lifecycle.start_judged(record, verdict, wanted, running, retry, now))

    def start_deadlines(self) -> None:
        """Attempts of reachable members whose workers have not all started in time go."""
        for record in self.state.store.active():
            if record.phase != k.PHASE_DISPATCHED or not record.dispatch_s:
                continue  # running ones were judged when their workers started
            member = self.state.members.get(record.cluster)
            reachable = self.state.member_status.get(record.cluster, (False, ""))[0]
            if member is not None and reachable:
                self._judge_start(record, member.jobs.get(record.member_job))


def why_stale(record: Record | None, cluster: str, name: str, attempt: int) -> str | None:
    """Why the sweep should delete a member Job, or None to keep it."""
    if record is None:
        return "its AIJob is gone"
    if record.member_job == name and (
        record.finished or (record.active and record.cluster == cluster)
    ):
        return None  # the live attempt, or the one that finished
    if record.phase == k.PHASE_QUEUED and attempt > record.attempts:
        return None  # dispatched but not yet recorded: adopted, or found again by its name
    return f"attempt {attempt} is stale ({record.key} is {record.phase}, attempt {record.attempts})"


def uncreated(records: Iterable[Record], mirrors: Mapping[str, Container[str]]) -> list[Record]:
    """The active records whose member Job is missing from their member's mirror (members
    not in ``mirrors``, not synced, are not judged)."""
    return [
        r
        for r in records
        if r.active and r.cluster in mirrors and r.member_job not in mirrors[r.cluster]
    ]


_RECORD_FIELDS = tuple(f.name for f in fields(Record))
