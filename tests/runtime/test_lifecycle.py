"""A record's transitions (cpn.runtime.lifecycle), table by table: the record after each,
the effects in order, and the record given left as it was."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cpn.api import constants as k
from cpn.api.status import human_duration
from cpn.core.gang import judge_start
from cpn.core.model import Start
from cpn.core.policy import Retry
from cpn.runtime import lifecycle
from cpn.runtime.effects import KICK, WRITE, Count, CreateJob, DeleteJob, Event, Forget, Learn
from cpn.runtime.store import Arrival, Record
from tests.runtime.fakes import FakeClock
from tests.runtime.test_status_render import record

RETRY = Retry(max_attempts=3, backoff_s=30.0, start_timeout_s=300.0)


def dispatched(**changes) -> Record:
    """AIJob ns/a whose attempt 1 was dispatched to m1 (Job a-1 on node n1) at t=100."""
    return record(
        **{
            "phase": k.PHASE_DISPATCHED,
            "attempts": 1,
            "cluster": "m1",
            "gpu_type": "a100",
            "nodes": ("n1",),
            "member_job": "a-1",
            "dispatch_s": 100.0,
            "observed": True,
            **changes,
        }
    )


def assert_unplaced(record: Record) -> None:
    assert (record.cluster, record.gpu_type, record.member_job, record.nodes) == ("", "", "", ())
    assert (record.start_s, record.dispatch_s, record.observed, record.choice) == (
        0.0,
        0.0,
        False,
        None,
    )


def test_a_transition_leaves_the_record_it_was_given_alone():
    """Pure: the old record keeps every field; the step carries a new one."""
    record = dispatched()
    before = replace(record)
    step = lifecycle.member_lost(record, "m1", 60.0, "policy retry.member_timeout_s")
    assert record == before
    assert step.record is not record and step.record.phase == k.PHASE_QUEUED


@pytest.mark.parametrize(
    ("transition", "reason", "event", "message"),
    [
        (
            lambda r: lifecycle.member_lost(r, "m1", 60.0, "policy retry.member_timeout_s"),
            "MemberLost",
            "Requeued",
            "member m1 not ready for 60s (policy retry.member_timeout_s): requeued; its old "
            "member Job is removed when the member returns",
        ),
        (
            lambda r: lifecycle.member_removed(r, "m1", ""),
            "MemberRemoved",
            "Requeued",
            "member cluster m1 was removed (its MemberCluster deleted) while the job was on "
            "it: requeued; its member Job a-1 there is being deleted",
        ),
        (
            lambda r: lifecycle.member_removed(r, "m1", "m1 does not answer"),
            "MemberRemoved",
            "Requeued",
            "member cluster m1 was removed (its MemberCluster deleted) while the job was on "
            "it: requeued; its member Job a-1 cannot be deleted (m1 does not answer), so it "
            "may still run there as well",
        ),
        (
            lifecycle.member_job_missing,
            "MemberJobMissing",
            "Requeued",
            "member Job a-1 is not on m1 (the operator stopped before creating it, or it was "
            "deleted meanwhile): queued again",
        ),
        (
            lambda r: lifecycle.create_failed(r, "m1", "Timeout", False, 1, RETRY, 500.0),
            "DispatchFailed",
            "DispatchFailed",
            "could not create the Job on m1: Timeout",
        ),
        (
            lambda r: lifecycle.preempted(replace(r, preemptions=2, checkpointed_s=600.0), "x", 90),
            "Preempted",
            "Preempted",
            "x (preemption 2): it resumes from its checkpoint at 10m00s of compute; 1m30s of "
            "work since its last checkpoint is lost",
        ),
    ],
)
def test_requeues_unplace_warn_and_write(transition, reason, event, message):
    """Member lost, Job missing, create failed (unreachable), preempted: back in the queue
    with no placement, a warning Event, a status write; the Job is not deleted here."""
    step = transition(dispatched())
    assert step.record.phase == k.PHASE_QUEUED
    assert step.record.reason == reason and step.record.message == message
    assert_unplaced(step.record)
    assert step.effects == (Event(event, message, True), WRITE)


def test_a_create_that_did_not_reach_the_member_does_not_count_as_an_attempt():
    """Unreachable, throttled or busy: attempts back to before the dispatch."""
    step = lifecycle.create_failed(dispatched(attempts=2), "m1", "503", False, 2, RETRY, 0.0)
    assert step.record.attempts == 1
    assert step.record.not_before_s == 0.0


@pytest.mark.parametrize(
    ("attempts", "phase", "reason", "not_before_s", "count"),
    [
        (1, k.PHASE_QUEUED, "Retrying", 530.0, "retrying"),
        (2, k.PHASE_QUEUED, "Retrying", 560.0, "retrying"),
        (3, k.PHASE_FAILED, "Failed", 0.0, "ended"),
    ],
)
def test_a_refused_create_counts_as_a_failed_attempt(attempts, phase, reason, not_before_s, count):
    """The member refuses the Job as it is: the attempt fails, retried after 30 s, 60 s...
    (doubling), Failed once none is left; nothing was created, so nothing is deleted."""
    record = dispatched(attempts=attempts, failed_attempts=attempts - 1)  # all failed before
    step = lifecycle.create_failed(record, "m1", "422 Invalid", True, attempts, RETRY, 500.0)
    new = step.record
    assert (new.phase, new.reason, new.attempts) == (phase, reason, attempts)
    assert new.failed_attempts == attempts
    assert new.not_before_s == not_before_s
    assert new.failure == "m1 refused its Job: 422 Invalid"
    assert new.member_job == ""
    assert not any(isinstance(e, DeleteJob) for e in step.effects)
    assert Count(count) in step.effects
    assert step.effects[-2:] == (WRITE, KICK)
    if phase == k.PHASE_FAILED:
        assert new.finish_s == 500.0
        assert new.message == "attempt 3 failed (m1 refused its Job: 422 Invalid); no retries left"
    else:
        assert_unplaced(new)


def test_a_failed_attempt_deletes_its_member_job_first():
    """Its Job failed on the member: deleted, then counted, told, written, kicked."""
    step = lifecycle.attempt_failed(dispatched(), "a worker failed", RETRY, 1000.0)
    message = "attempt 1 failed (a worker failed); retrying in 30s"
    assert step.effects == (
        DeleteJob("m1", "a-1"),
        Count("retrying"),
        Event("Retrying", message, True),
        WRITE,
        KICK,
    )
    assert step.record.not_before_s == 1030.0
    assert step.record.failed_attempts == 1


@pytest.mark.parametrize("preemptions", [1, 2, 5])
def test_attempts_ended_by_preemption_do_not_use_up_its_retries(preemptions):
    """A job cpn preempted (each preemption ended an attempt) that then fails once is
    retried after the first back-off, not failed for attempts it did not fail."""
    record = replace(dispatched(attempts=preemptions + 1), preemptions=preemptions)
    step = lifecycle.attempt_failed(record, "a worker failed", RETRY, 1000.0)
    new = step.record
    assert (new.phase, new.reason, new.failed_attempts) == (k.PHASE_QUEUED, "Retrying", 1)
    assert new.not_before_s == 1030.0
    assert new.message == f"attempt {preemptions + 1} failed (a worker failed); retrying in 30s"


def test_the_last_allowed_failure_fails_the_job_whatever_its_preemptions():
    """Two failures before, then a third (with a preemption between): Failed."""
    record = replace(dispatched(attempts=4), preemptions=1, failed_attempts=2)
    new = lifecycle.attempt_failed(record, "a worker failed", RETRY, 1000.0).record
    assert (new.phase, new.failed_attempts) == (k.PHASE_FAILED, 3)
    assert new.message == "attempt 4 failed (a worker failed); no retries left"


@pytest.mark.parametrize(
    ("wanted", "running", "advance_s", "phase", "reason", "message", "effects"),
    [
        (1, 1, 5.0, k.PHASE_RUNNING, "Running", "running on m1 (a100)", "started"),
        (
            2,
            2,
            5.0,
            k.PHASE_RUNNING,
            "Running",
            "running on m1 (a100), all 2 workers running",
            "started",
        ),
        (2, 1, 5.0, k.PHASE_DISPATCHED, "Dispatched", "1 of 2 workers running", "write"),
        (2, 0, 5.0, k.PHASE_DISPATCHED, "Dispatched", "dispatched", "none"),
        (2, 1, 301.0, k.PHASE_QUEUED, "StartTimeout", None, "timeout"),
    ],
)
def test_a_dispatched_attempt_is_judged_on_its_workers_and_its_deadline(
    wanted, running, advance_s, phase, reason, message, effects
):
    """All workers run: Running at now. Some: the message says how many. Past the start
    deadline (300 s after dispatch) with not all running: removed, retried."""
    clock = FakeClock(wall_s=100.0)
    record = dispatched(reason="Dispatched", message="dispatched")
    clock.advance(advance_s)
    verdict = judge_start(wanted, running, record.dispatch_s, clock.wall(), RETRY.start_timeout_s)
    step = lifecycle.start_judged(record, verdict, wanted, running, RETRY, clock.wall())
    new = step.record
    assert (new.phase, new.reason) == (phase, reason)
    if message is not None:
        assert new.message.startswith(message)
    if effects == "started":
        assert new.start_s == clock.wall()
        assert step.effects == (Count("started"), Event("Started", new.message), WRITE)
    elif effects == "write":
        assert step.effects == (WRITE,)
    elif effects == "none":
        assert step.effects == () and new is record
    else:
        assert new.not_before_s == clock.wall() + 30.0
        assert step.effects[0] == DeleteJob("m1", "a-1")
        assert Event("StartTimeout", new.message, True) in step.effects


def test_success_books_the_running_time_of_every_attempt():
    """Finished at 1000 after starting at 400, with 300 s of earlier attempts: 900 s."""
    record = dispatched(phase=k.PHASE_RUNNING, start_s=400.0, attained_s=300.0)
    step = lifecycle.succeeded(record, 1000.0)
    new = step.record
    assert (new.phase, new.finish_s, new.actual_s) == (k.PHASE_SUCCEEDED, 1000.0, 900.0)
    assert new.cluster == "m1"  # where it ran stays shown
    assert step.effects == (Learn(), Event("Succeeded", new.message), Count("ended"), WRITE, KICK)


def test_suspending_a_running_job_stops_its_member_job_and_keeps_it():
    """spec.suspend on a running job: its Job deleted, the job Suspended (not a warning)."""
    step = lifecycle.suspended(dispatched(phase=k.PHASE_RUNNING))
    assert step.record.phase == k.PHASE_SUSPENDED and step.record.reason == "Suspended"
    assert_unplaced(step.record)
    assert step.effects[0] == DeleteJob("m1", "a-1")
    assert step.effects[1:] == (Event("Suspended", step.record.message, False), WRITE)


def test_suspending_a_queued_job_deletes_nothing():
    step = lifecycle.suspended(dispatched(phase=k.PHASE_QUEUED, member_job=""))
    assert not any(isinstance(e, DeleteJob) for e in step.effects)


def test_a_job_created_before_a_crash_is_adopted_with_its_nodes_and_gpu_type():
    """Its nodes come from the Job's node pins, its GPU type from its annotation."""
    job = {
        "metadata": {"name": "a-2"},
        "spec": {
            "template": {
                "metadata": {"annotations": {k.ANNOTATION_GPU_TYPE: "h100"}},
                "spec": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": k.HOSTNAME_LABEL, "values": ["n7", "n8"]}
                                        ]
                                    }
                                ]
                            }
                        }
                    }
                },
            }
        },
    }
    record = lifecycle.unplaced(dispatched(phase=k.PHASE_QUEUED))
    step = lifecycle.adopted(record, "m2", job, 2, 700.0)
    new = step.record
    assert (new.phase, new.attempts, new.cluster, new.member_job) == (
        k.PHASE_DISPATCHED,
        2,
        "m2",
        "a-2",
    )
    assert (new.nodes, new.gpu_type, new.dispatch_s) == (("n7", "n8"), "h100", 700.0)
    assert step.effects == (WRITE,)


START = Start(
    job_key="ns/a",
    cluster="m2",
    gpu_type="h100",
    nodes=("n2", "n1", "n2"),
    predicted_runtime_s=3600.0,
    transfer_s=12.0,
    alone=True,
)


@pytest.mark.parametrize(
    ("changes", "want_attempt", "want_fence", "want_predicted_s", "want_resume_s", "want_tail"),
    [
        pytest.param({}, 1, "1-n0nce", 3600.0, None, "", id="a first dispatch"),
        pytest.param(
            {"attempts": 1, "fence": "1-old", "failure": "OOM", "not_before_s": 900.0},
            2,
            "2-n0nce",
            3600.0,
            None,
            "",
            id="a retry after a failed attempt takes a new token and clears its back-off",
        ),
        pytest.param(
            {"attempts": 1, "fence": "2-kept"},
            2,
            "2-kept",
            3600.0,
            None,
            "",
            id="the create of the same attempt went unanswered: its token is kept",
        ),
        pytest.param(
            {"attempts": 1, "fence": "1-old", "preemptions": 2, "checkpointed_s": 600.0},
            2,
            "2-n0nce",
            120.0 + 3000.0,
            600.0,
            "; resumes from its checkpoint at 10m00s (attempt 2, after 2 preemption(s))",
            id="a preempted job resumes from its checkpoint, paying the restart cost",
        ),
        pytest.param(
            {"attempts": 1, "preemptions": 1, "checkpointed_s": 5000.0},
            2,
            "2-n0nce",
            120.0,
            5000.0,
            "; resumes from its checkpoint at 1h23m (attempt 2, after 1 preemption(s))",
            id="a checkpoint past the prediction leaves only the restart cost",
        ),
        pytest.param(
            {"preemptions": 1},
            1,
            "1-n0nce",
            120.0 + 3600.0,
            0.0,
            "; resumes from its checkpoint at 0s (attempt 1, after 1 preemption(s))",
            id="preempted before any checkpoint: all its work again",
        ),
    ],
)
def test_a_start_is_assumed_on_its_member_and_its_job_created(
    changes, want_attempt, want_fence, want_predicted_s, want_resume_s, want_tail
):
    """The record holds the start's member, nodes and GPU type from now as its next attempt
    (named from its UID and attempt), its place in the queue and back-off cleared, and one
    effect: create its Job (nothing written or told before the Job exists)."""
    queued = record(phase=k.PHASE_QUEUED, position=4, reason="Capacity", message="waits", **changes)
    before = replace(queued)
    choice = object()
    step = lifecycle.dispatched(queued, START, choice, 2000.0, nonce="n0nce", restart_cost_s=120.0)
    assert queued == before
    new = step.record
    assert (new.phase, new.reason) == (k.PHASE_DISPATCHED, "Dispatched")
    assert (new.attempts, new.fence) == (want_attempt, want_fence)
    assert (new.cluster, new.gpu_type, new.nodes, new.alone) == (
        "m2",
        "h100",
        ("n2", "n1", "n2"),
        True,
    )
    assert new.member_job == f"a-uid1-{want_attempt}"
    assert (new.dispatch_s, new.transfer_s, new.not_before_s) == (2000.0, 12.0, 0.0)
    assert (new.position, new.frees, new.choice) == (0, None, choice)
    assert new.predicted_runtime_s == want_predicted_s
    assert new.message == (
        f"dispatched to m2 (h100, node n1, n2); predicted {human_duration(want_predicted_s)}"
        + want_tail
    )
    assert step.effects == (CreateJob("m2", want_attempt, want_resume_s),)


def test_a_record_whose_spec_did_not_parse_is_not_dispatched():
    """No job to run (its spec is invalid): the record is left as it was, nothing to do."""
    invalid = record(job=None, invalid="spec.resources: required")
    step = lifecycle.dispatched(invalid, START, None, 2000.0, nonce="n", restart_cost_s=0.0)
    assert step.record is invalid and step.effects == ()


def test_an_aijob_deleted_while_it_runs_has_its_member_job_deleted_and_is_forgotten():
    """Deleted (the store let it go): its member Job deleted, its waits forgotten, a cycle;
    a queued one has no Job to delete."""
    running = dispatched(phase=k.PHASE_RUNNING)
    step = lifecycle.arrived(Arrival(running, changed=True, gone=True))
    assert step.record is running
    assert step.effects == (DeleteJob("m1", "a-1"), Forget(), KICK)
    step = lifecycle.arrived(Arrival(record(), changed=True, gone=True))
    assert step.effects == (Forget(), KICK)


@pytest.mark.parametrize(
    ("arrival", "effects"),
    [
        # its own status write echoed back: nothing to do
        (Arrival(dispatched(), changed=False), ()),
        # a new spec: a cycle
        (Arrival(dispatched(), changed=True), (KICK,)),
        # held by someone else's finalizer: its member Job stopped now
        (
            Arrival(dispatched(), changed=True, began_deleting=True),
            (DeleteJob("m1", "a-1"), KICK),
        ),
        # an unknown queue is told once per change, not on its status writes
        (
            Arrival(record(unknown_queue="no such queue"), changed=True),
            (Event("UnknownQueue", "no such queue", True), KICK),
        ),
        (Arrival(record(unknown_queue="no such queue"), changed=False), ()),
        (Arrival(record(unknown_queue="x", phase=k.PHASE_SUCCEEDED), changed=True), (KICK,)),
        # suspended while waiting: the cycle leaves it (no Job to stop)
        (Arrival(record({"suspend": True}), changed=True), (KICK,)),
    ],
)
def test_an_aijob_event_asks_for_what_its_change_needs(arrival, effects):
    step = lifecycle.arrived(arrival)
    assert step.record is arrival.record
    assert step.effects == effects


def test_spec_suspend_on_a_running_job_stops_its_member_job_and_keeps_it_suspended():
    """``spec.suspend`` set while it runs: :func:`lifecycle.suspended`, then a cycle."""
    running = dispatched(phase=k.PHASE_RUNNING)
    running.job = replace(running.job, suspended=True)
    step = lifecycle.arrived(Arrival(running, changed=True))
    assert step.record.phase == k.PHASE_SUSPENDED
    assert_unplaced(step.record)
    assert step.effects == (
        DeleteJob("m1", "a-1"),
        Event("Suspended", step.record.message),
        WRITE,
        KICK,
    )
