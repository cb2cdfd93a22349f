"""The dispatcher on its own (cpn.runtime.dispatch.Dispatching), built from the shared state
and the two collaborators it calls, on fake ports and a fake clock: a plan's start carried
out, the member Job created under the name the transition gave the record."""

from __future__ import annotations

import asyncio

import pytest

from cpn.api import constants as k
from cpn.config import OperatorConfig
from cpn.core.model import CyclePlan, Start
from cpn.runtime.dispatch import Dispatching
from cpn.runtime.following import Following
from cpn.runtime.hubwrites import HubWrites
from cpn.runtime.state import RuntimeState
from cpn.runtime.store import Record
from tests.builders import snapshot
from tests.runtime.fakes import FakeClock, FakeHub, FakeLeadership, FakeMember, upsert
from tests.runtime.test_store import FixedEstimator, body

START = Start(job_key="ns/a", cluster="m1", gpu_type="a100", nodes=("n1",), predicted_runtime_s=60)


def dispatcher(config: OperatorConfig) -> tuple[Dispatching, RuntimeState, Record]:
    """A dispatcher on a fresh state at wall t=100, with queued AIJob ns/a."""
    state = RuntimeState(
        config,
        FakeHub(),  # type: ignore[arg-type]
        FixedEstimator(),
        clock=FakeClock(now=100.0, wall_s=100.0),
        leadership=FakeLeadership(),
    )
    following = Following(state)
    record = upsert(state.store, body("a", "uid-a"), user="u", group="g")
    return Dispatching(state, HubWrites(state), following), state, record


@pytest.mark.parametrize("dry_run", [False, True], ids=["live", "dry run"])
def test_a_start_is_assumed_then_its_member_job_created_under_the_records_name(dry_run):
    """Live: the record is Dispatched at once and its Job, named as the transition named
    it, is created on the member, then told (Event) and written. Dry run: assumed, but
    nothing is created or told."""
    dispatching, state, record = dispatcher(OperatorConfig(dry_run=dry_run))
    member = FakeMember("m1")
    state.members["m1"] = member  # type: ignore[assignment]

    async def carry_out() -> None:
        await dispatching.apply(CyclePlan(starts=(START,)), snapshot())
        await asyncio.gather(*state.inflight.values())

    try:
        asyncio.run(carry_out())
    finally:
        state.pool.shutdown(wait=True)
        state.write_pool.shutdown(wait=True)
    assert (record.phase, record.attempts, record.cluster) == (k.PHASE_DISPATCHED, 1, "m1")
    assert (record.dispatch_s, record.nodes) == (100.0, ("n1",))
    assert record.member_job.startswith("a-") and record.member_job.endswith("-1")
    reasons = [reason for _, reason, _, _ in state.writes._events]
    if dry_run:
        assert member.created == [] and "Dispatched" not in reasons
    else:
        assert member.created == [record.member_job]
        assert "Dispatched" in reasons
        assert state.inflight == {}


def test_a_start_on_a_member_not_connected_leaves_the_record_queued():
    """The plan names a member the runtime holds no connection to: nothing is assumed."""
    dispatching, state, record = dispatcher(OperatorConfig())
    try:
        asyncio.run(dispatching.apply(CyclePlan(starts=(START,)), snapshot()))
    finally:
        state.pool.shutdown(wait=True)
        state.write_pool.shutdown(wait=True)
    assert (record.phase, record.attempts, record.member_job) == (k.PHASE_QUEUED, 0, "")
    assert state.inflight == {}


def test_a_reserved_hold_shows_its_start_and_finish_before_any_projection():
    """A job held by a reservation shows the reservation's start and finish at once (the
    background projection replaces them later): never a start without its finish."""
    from cpn.core.model import Hold, WaitReason
    from cpn.runtime.status import render_status

    dispatching, state, record = dispatcher(OperatorConfig())
    hold = Hold(
        job_key="ns/a",
        reason=WaitReason.Capacity,
        message="reserved",
        position=1,
        reserved_start_s=1000.0,
        reserved_end_s=4600.0,
    )
    try:
        asyncio.run(dispatching.apply(CyclePlan(holds=(hold,)), snapshot()))
    finally:
        state.pool.shutdown(wait=True)
        state.write_pool.shutdown(wait=True)
    assert (record.eta_start_s, record.eta_finish_s) == (1000.0, 4600.0)
    status, _ = render_status(record, now_s=100.0)
    assert status["estimatedStart"] == "1970-01-01T00:16:40Z"
    assert status["estimatedFinish"] == "1970-01-01T01:16:40Z"
