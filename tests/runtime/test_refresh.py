"""A waiting AIJob's shown start instant is replaced before it passes, by a timer of its
own (cpn.runtime.hubwrites.HubWrites), not by the next cycle: the write that follows is
queued ahead of the others and shows "imminent"; a failed write keeps the earlier refresh."""

from __future__ import annotations

import asyncio
from typing import Any

from cpn.api.status import IMMINENT, IMMINENT_S
from cpn.config import OperatorConfig
from cpn.runtime.hubwrites import HubWrites
from cpn.runtime.ports import CallFailed
from cpn.runtime.state import RuntimeState
from cpn.runtime.store import Record
from tests.runtime.fakes import FakeClock, FakeHub, FakeLeadership, upsert
from tests.runtime.test_store import FixedEstimator, body

WALL = 1767225600.0


def hub_writes() -> tuple[HubWrites, RuntimeState, FakeHub]:
    hub = FakeHub()
    state = RuntimeState(
        OperatorConfig(),
        hub,  # type: ignore[arg-type]
        FixedEstimator(),
        clock=FakeClock(now=100.0, wall_s=WALL),
        leadership=FakeLeadership(),
    )
    return HubWrites(state), state, hub


def waiting(state: RuntimeState, name: str, start_in_s: float) -> Record:
    record = upsert(state.store, body(name, f"uid-{name}"), user="u", group="g")
    record.eta_start_s = WALL + start_in_s
    return record


async def queued(state: RuntimeState, n: int) -> None:
    while state.writes.statuses() < n:
        await asyncio.sleep(0.01)


def run(state: RuntimeState, main: Any) -> Any:
    """``main()`` on an event loop, the state's thread pools shut down after."""
    try:
        return asyncio.run(main())
    finally:
        state.pool.shutdown(wait=True)
        state.write_pool.shutdown(wait=True)


async def next_key(state: RuntimeState, timeout_s: float = 5.0) -> str:
    kind, key = await asyncio.wait_for(state.writes.get(), timeout_s)
    assert kind == "status"
    state.writes.done(key)
    return key


def test_a_shown_instant_queues_its_own_write_first_a_window_before_it_with_no_cycle() -> None:
    """The instant is shown 30.05 s ahead: 50 ms later its write is queued ahead of one
    queued before it, and that write shows "imminent" and no instant."""
    writes, state, hub = hub_writes()
    clock = state.clock
    assert isinstance(clock, FakeClock)
    near = waiting(state, "near", IMMINENT_S + 0.05)
    other = waiting(state, "other", 3600.0)

    async def main() -> tuple[str, str]:
        await writes.write_status(near)
        assert hub.patches[-1][2]["estimatedStart"]  # the instant is shown
        state.writes.add(other.key)
        clock.advance(0.05)
        await asyncio.wait_for(queued(state, 2), 5.0)  # the timer's, with no cycle
        first = await next_key(state)
        await writes.write_status(near)
        return first, await next_key(state)

    first, second = run(state, main)
    assert (first, second) == (near.key, other.key)
    shown = hub.patches[-1][2]
    assert shown["eta"] == IMMINENT and shown["estimatedStart"] is None
    assert near.refresh_by_s is None


def test_a_failed_write_keeps_the_refresh_of_what_the_hub_still_shows() -> None:
    """The hub shows an instant due for refresh at t; a later render's write (whose own
    instant is due later) fails: the record is still to be written again by t, and the
    next write, diffed against what the hub still shows, removes that instant."""
    writes, state, hub = hub_writes()
    record = waiting(state, "a", 600.0)

    async def main() -> None:
        await writes.write_status(record)
        shown_by = record.refresh_by_s
        record.eta_start_s = WALL + 1200.0
        hub.fail_with = CallFailed("etcd unavailable", status=500)
        await writes.write_status(record)
        assert record.refresh_by_s == shown_by == WALL + 600.0 - IMMINENT_S
        # The hub is back and the start is near: the write takes the shown instant away.
        hub.fail_with = None
        record.eta_start_s = WALL + 10.0
        await writes.write_status(record)
        assert hub.patches[-1][2]["estimatedStart"] is None
        assert hub.patches[-1][2]["eta"] == IMMINENT

    run(state, main)


def test_one_timer_per_aijob_armed_again_only_for_an_earlier_refresh() -> None:
    """Renders that move the instant later keep the armed timer (it fires first and arms
    itself again); one that moves it earlier replaces it; one with no instant drops it."""
    writes, state, _ = hub_writes()
    record = waiting(state, "a", 600.0)
    armed = writes._due  # per AIJob: the wall time its refresh is due

    async def main() -> list[float | None]:
        seen = []
        for start_in_s in (600.0, 900.0, 300.0, 10.0):
            record.eta_start_s = WALL + start_in_s
            writes.render_status(record)
            seen.append(armed.get(record.key))
        return seen

    seen = run(state, main)
    by = WALL - IMMINENT_S
    assert seen == [by + 600.0, by + 600.0, by + 300.0, None]


def test_refreshes_of_many_aijobs_come_due_in_order_behind_one_timer() -> None:
    """Three instants shown (two near, one an hour away): the two near ones are queued in
    the order they come due, the far one is not, and one loop timer waits for it."""
    writes, state, _ = hub_writes()
    clock = state.clock
    assert isinstance(clock, FakeClock)
    later = waiting(state, "later", IMMINENT_S + 0.10)
    sooner = waiting(state, "sooner", IMMINENT_S + 0.05)
    far = waiting(state, "far", 3600.0)

    async def main() -> list[str]:
        for record in (later, sooner, far):
            writes.render_status(record)
        clock.advance(0.10)
        await asyncio.wait_for(queued(state, 2), 5.0)
        keys = [await next_key(state), await next_key(state)]
        assert writes._wake is not None and writes._wake[0] == far.refresh_by_s
        return keys

    keys = run(state, main)
    assert keys == [sooner.key, later.key]
    assert state.writes.statuses() == 0
