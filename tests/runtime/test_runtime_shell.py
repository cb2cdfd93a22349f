"""The runtime's shell around its transitions, on fake ports and a fake clock: a member
lost past its timeout, a member Job create that fails, a status write that conflicts."""

from __future__ import annotations

import asyncio

import pytest

from cpn.api import constants as k
from cpn.config import OperatorConfig
from cpn.runtime.engine import Runtime
from cpn.runtime.ports import CallFailed
from tests.runtime.fakes import FakeClock, FakeHub, FakeLeadership, FakeMember
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
    record = runtime.store.upsert(body("a", "uid-a"), user="u", group="g")
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
    assert runtime.writes.statuses() == 1


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
    queued = runtime.store.upsert(body("b", "uid-b"), user="u", group="g")
    busy = nodes("m1", 1, gpus=1, free=[0.0])
    runtime.clusters_view = lambda: ([cluster("m1", busy)], {})  # type: ignore[method-assign]
    runtime.calibrator = WaitCalibrator()
    for _ in range(30):
        runtime.calibrator.observe("default", projected_wait_s=600.0, actual_wait_s=1200.0)
    asyncio.run(runtime.refresh_etas())
    assert queued.eta_start_s == pytest.approx(100.0 + 2 * 300.0)
    assert queued.eta_finish_s == pytest.approx(100.0 + 2 * 300.0 + 60.0)
    assert None not in queued.eta_range
    assert "ns/b" in runtime.calibrator
