"""The runtime's shell around its transitions, on fake ports and a fake clock: a member
lost past its timeout, a member Job create that fails, a status write that conflicts."""

from __future__ import annotations

import asyncio

import pytest

from cpn.api import constants as k
from cpn.api.policy import parse_policy
from cpn.config import OperatorConfig
from cpn.core.health import Probe, Probes
from cpn.runtime.engine import Runtime
from cpn.runtime.ports import CallFailed
from tests.runtime.fakes import FakeClock, FakeHub, FakeLeadership, FakeMember, upsert
from tests.runtime.test_store import FixedEstimator, body


@pytest.fixture
def shell():
    """A runtime on fakes (nothing started), with AIJob ns/a dispatched to m1 at t=100."""
    clock = FakeClock(now=100.0, wall_s=100.0)
    hub = FakeHub()
    runtime = Runtime(
        OperatorConfig(member_timeout_s=60.0),
        hub,
        FixedEstimator(),
        clock=clock,
        leadership=FakeLeadership(),
    )
    record = upsert(runtime.store, body("a", "uid-a"), user="u", group="g")
    record.phase, record.attempts, record.cluster = k.PHASE_DISPATCHED, 1, "m1"
    record.member_job, record.gpu_type, record.dispatch_s = "a-1", "a100", 100.0
    yield runtime, hub, clock, record
    runtime.pool.shutdown(wait=True)
    runtime.write_pool.shutdown(wait=True)


def events(runtime: Runtime) -> list[tuple[str, str, bool]]:
    """The Events queued for the hub: (reason, message, warning)."""
    return [(reason, message, warning) for _, reason, message, warning in runtime.writes._events]


def test_jobs_of_a_member_unreachable_past_its_timeout_are_requeued(shell):
    """Unreachable since t=100: still placed at t=159, requeued at t=160, with a warning."""
    runtime, _, clock, record = shell
    runtime._not_ready_since["m1"] = clock.monotonic()
    clock.advance(59.0)
    runtime._requeue_lost()
    assert record.phase == k.PHASE_DISPATCHED and events(runtime) == []
    clock.advance(1.0)
    runtime._requeue_lost()
    assert (record.phase, record.reason, record.cluster) == (k.PHASE_QUEUED, "MemberLost", "")
    assert runtime.store.records["ns/a"] is record  # changed in place: the store holds it
    assert [e[0] for e in events(runtime)] == ["Requeued"] and events(runtime)[0][2]
    assert "not ready for 60s (operator default CPN_MEMBER_TIMEOUT_S" in record.message
    assert runtime.writes.statuses() == 1


def test_the_member_timeout_is_read_from_the_policy_in_force_at_each_cycle(shell):
    """The policy's retry.member_timeout_s overrides the operator's 60 s, and an edit of it
    applies to a member already not ready (no restart): 15 s, then 30 s."""
    runtime, _, clock, record = shell
    runtime._use_policy(parse_policy("retry: {member_timeout_s: 15}"))
    runtime._not_ready_since["m1"] = clock.monotonic()
    clock.advance(14.9)
    runtime._requeue_lost()
    assert record.phase == k.PHASE_DISPATCHED
    runtime._use_policy(parse_policy("retry: {member_timeout_s: 30}"))
    clock.advance(15.0)  # 29.9 s: past the old 15 s, short of the new 30 s
    runtime._requeue_lost()
    assert record.phase == k.PHASE_DISPATCHED and events(runtime) == []
    clock.advance(0.1)
    runtime._requeue_lost()
    assert (record.phase, record.reason) == (k.PHASE_QUEUED, "MemberLost")
    assert "not ready for 30s (policy retry.member_timeout_s)" in record.message


def test_the_loop_wakes_when_a_not_ready_members_jobs_are_due(shell):
    """Not ready since t=100 with the policy's 15 s: at t=105 the loop sleeps 10 s at most
    (not its 60 s tick, nor until the next probe); with no job there, the tick."""
    runtime, _, clock, record = shell
    runtime._use_policy(parse_policy("retry: {member_timeout_s: 15}"))
    runtime._not_ready_since["m1"] = clock.monotonic()
    clock.advance(5.0)
    assert 10.0 <= runtime._next_wake_s() <= 10.1
    record.cluster = "m2"
    assert runtime._next_wake_s() == runtime.config.interval_s


def test_a_bad_member_timeout_is_refused_and_the_last_good_policy_stays(shell):
    runtime, _, _, _ = shell
    runtime._use_policy(parse_policy("retry: {member_timeout_s: 15}"))
    cm = {
        "metadata": {"name": "cpn-policy", "namespace": "cpn-system", "resourceVersion": "7"},
        "data": {"policy.yaml": "retry: {member_timeout_s: -1}"},
    }
    error = runtime.policy_event(cm)
    assert "retry.member_timeout_s" in error and "greater than 0" in error
    assert runtime.member_timeout()[0] == 15.0


def removed(runtime: Runtime) -> None:
    asyncio.run(runtime.member_event("DELETED", {"metadata": {"name": "m1"}}))


def test_deleting_a_ready_member_deletes_its_jobs_there_and_requeues_them(shell):
    """The MemberCluster m1 is deleted while a-1 runs there: its member Job is deleted
    through m1 before the connection goes, the AIJob requeued with a warning Event."""
    runtime, _, clock, record = shell
    member = FakeMember("m1")
    runtime.members["m1"] = member
    runtime.probes["m1"] = Probes().add(Probe(True, clock.monotonic()))
    other = upsert(runtime.store, body("b", "uid-b"), user="u", group="g")
    other.phase, other.attempts, other.cluster, other.member_job = k.PHASE_RUNNING, 1, "m2", "b-1"
    removed(runtime)
    assert member.deleted == ["a-1"] and member.stopped and "m1" not in runtime.members
    assert (record.phase, record.reason, record.cluster) == (k.PHASE_QUEUED, "MemberRemoved", "")
    assert record.message == (
        "member cluster m1 was removed (its MemberCluster deleted) while the job was on it: "
        "requeued; its member Job a-1 there is being deleted"
    )
    assert events(runtime) == [("Requeued", record.message, True)]
    assert (other.phase, other.cluster) == (k.PHASE_RUNNING, "m2")  # another member's job
    # Its deletion, seen by watch afterwards, is not taken for a failed attempt.
    runtime._follow(member, "DELETED", {"metadata": {"name": "a-1", "labels": labels()}})
    assert (record.phase, record.reason, record.attempts) == (k.PHASE_QUEUED, "MemberRemoved", 1)


def labels() -> dict[str, str]:
    return {k.LABEL_UID: "uid-a", k.LABEL_ATTEMPT: "1"}


def test_a_removed_members_job_that_cannot_be_deleted_is_told(shell):
    runtime, _, clock, record = shell
    member = FakeMember("m1")
    member.fail_delete_with = CallFailed("500 Internal Server Error", status=500)
    runtime.members["m1"] = member
    runtime.probes["m1"] = Probes().add(Probe(True, clock.monotonic()))
    removed(runtime)
    assert (record.phase, record.reason) == (k.PHASE_QUEUED, "MemberRemoved")
    assert [e[0] for e in events(runtime)] == ["Requeued", "MemberJobNotDeleted"]
    assert events(runtime)[1][1] == (
        "member Job a-1 on the removed member m1 could not be deleted (500 Internal Server "
        "Error): it may still run there as well"
    )


def test_a_job_on_a_member_removed_while_the_operator_was_down_is_requeued_at_start(shell):
    """At start the hub lists m2 only: ns/a, restored on m1, is requeued as removed; ns/b
    on the listed m2 is left to be followed there."""
    runtime, hub, _, record = shell
    runtime.members["m2"] = FakeMember("m2")
    hub.member_bodies = [{"metadata": {"name": "m2"}, "spec": {}}]
    other = upsert(runtime.store, body("b", "uid-b"), user="u", group="g")
    other.phase, other.attempts, other.cluster, other.member_job = k.PHASE_RUNNING, 1, "m2", "b-1"
    asyncio.run(runtime.connect_members())
    assert (record.phase, record.reason, record.cluster) == (k.PHASE_QUEUED, "MemberRemoved", "")
    assert "cannot be deleted (cpn holds no connection to m1)" in record.message
    assert (other.phase, other.cluster) == (k.PHASE_RUNNING, "m2")


def test_deleting_a_silent_member_requeues_its_jobs_even_at_most_once_and_says_so(shell):
    """m1 stopped answering; its MemberCluster deleted: no delete is sent to it (it would
    hang), the job is requeued even under at-most-once (removal confirms the member gone),
    and its message says the old Job may still run there."""
    runtime, _, clock, record = shell
    runtime._use_policy(parse_policy("retry: {member_lost: at-most-once}"))
    member = FakeMember("m1")
    runtime.members["m1"] = member
    runtime.probes["m1"] = Probes().add(Probe(False, clock.monotonic(), "timed out"))
    clock.advance(10.0)  # past the 5 s grace
    removed(runtime)
    assert member.deleted == []
    assert (record.phase, record.reason) == (k.PHASE_QUEUED, "MemberRemoved")
    assert "cannot be deleted (m1 does not answer), so it may still run there" in record.message
    assert [e[0] for e in events(runtime)] == ["Requeued"]


@pytest.mark.parametrize(
    ("error", "phase", "reason", "attempts"),
    [
        (CallFailed("422 Invalid: bad", status=422, refused=True), k.PHASE_QUEUED, "Retrying", 1),
        (ConnectionError("refused"), k.PHASE_QUEUED, "DispatchFailed", 0),
    ],
)
def test_a_member_job_create_that_fails_puts_the_job_back(shell, error, phase, reason, attempts):
    """Refused by the member: the attempt counts and backs off (30 s). Not reached: the
    attempt does not count. Either way it holds no placement."""
    runtime, _, clock, record = shell
    member = FakeMember("m1", fail_with=error)
    manifest = {"metadata": {"name": "a-1"}}
    asyncio.run(runtime._create(record, member, manifest, 1))
    assert (record.phase, record.reason, record.attempts) == (phase, reason, attempts)
    assert record.cluster == "" and record.member_job == ""
    if reason == "Retrying":
        assert record.not_before_s == clock.wall() + 30.0
        assert record.failure == "m1 refused its Job: 422 Invalid: bad"
    assert events(runtime)[0][0] == reason and events(runtime)[0][2]


def test_a_status_write_that_conflicts_is_written_whole_next_time(shell):
    """A 409 on the patch forgets what was written, so the next write sends it all."""
    runtime, hub, _, record = shell
    record.phase, record.reason = k.PHASE_RUNNING, "Running"
    hub.fail_with = CallFailed("409 Conflict", status=409)
    asyncio.run(runtime._write_status(record))
    assert hub.patches == [] and record.written == {} and record.written_sig is None
    hub.fail_with = None
    asyncio.run(runtime._write_status(record))
    assert len(hub.patches) == 1
    assert hub.patches[0][2]["phase"] == k.PHASE_RUNNING
    assert hub.patches[0][2]["reason"] == "Running"
    assert record.written_sig is not None


def test_etas_are_stated_through_the_calibrator_and_the_job_is_followed(shell):
    """The queued job waits for the running one (predicted to end at 400): its written ETA
    is the projection calibrated by what the queue learned (waits run twice as long), with
    a range, and from then on the calibrator follows it."""
    from cpn.core.eta_calibration import WaitCalibrator
    from tests.builders import cluster, nodes

    runtime, _, _, running = shell
    running.phase, running.nodes, running.gpu_type = k.PHASE_RUNNING, ("m1-0",), "A100-80GB"
    running.start_s, running.predicted_runtime_s = 100.0, 300.0
    runtime.store.set_gpu_types(["A100-80GB"])
    queued = upsert(runtime.store, body("b", "uid-b"), user="u", group="g")
    busy = nodes("m1", 1, gpus=1, free=[0.0])
    runtime.membership.clusters_view = lambda: ([cluster("m1", busy)], {})  # type: ignore[method-assign]
    runtime.calibrator = WaitCalibrator()
    for _ in range(30):
        runtime.calibrator.observe("default", projected_wait_s=600.0, actual_wait_s=1200.0)
    asyncio.run(runtime.refresh_etas())
    assert queued.eta_start_s == pytest.approx(100.0 + 2 * 300.0)
    assert queued.eta_finish_s == pytest.approx(100.0 + 2 * 300.0 + 60.0)
    assert None not in queued.eta_range
    assert "ns/b" in runtime.calibrator
