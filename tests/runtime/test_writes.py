"""Hub writes: the pace (a token bucket; fake clock, sleeping advances it) and the
write queue (each key once, never handed out twice at once; Events bounded)."""

from __future__ import annotations

import asyncio

import pytest

from cpn.runtime.writes import Pace, WriteQueue


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def pace(self, qps: float, burst: int, **kw: float) -> Pace:
        """A Pace on this fake clock."""
        return Pace(qps, burst, clock=self.clock, sleep=self.sleep, **kw)


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


async def take(bucket: Pace, times: int) -> None:
    """``times`` takes from ``bucket``, one after the other."""
    for _ in range(times):
        await bucket.take()


def test_burst_passes_then_takes_are_spaced_by_one_over_qps(fake: FakeTime) -> None:
    """5 takes pass at once; the next 20 wait 1/qps each, so 25 takes last 20/qps."""
    asyncio.run(take(fake.pace(100.0, 5), 25))
    assert len(fake.slept) == 20
    assert fake.now - 1000.0 == pytest.approx(0.2)


def test_quiet_time_refills_up_to_the_burst_only(fake: FakeTime) -> None:
    """After a long quiet spell, no more than ``burst`` takes pass without waiting."""
    bucket = fake.pace(10.0, 3)

    async def main() -> None:
        await take(bucket, 3)
        fake.now += 3600.0
        await take(bucket, 4)

    asyncio.run(main())
    assert fake.slept == [pytest.approx(0.1)]


def test_yielding_takes_at_the_slow_rate_then_the_full_one(fake: FakeTime) -> None:
    """While yielding to a burst the bucket spends none of its saved burst and runs at
    qps * slow; once the time is up the full rate and burst come back."""
    bucket = fake.pace(100.0, 50, slow=0.1)
    bucket.yield_to(fake.now + 5.0)
    asyncio.run(take(bucket, 6))
    assert fake.slept == [pytest.approx(0.1)] * 5  # 10 per second, not 100
    fake.now += 10.0
    fake.slept.clear()
    asyncio.run(take(bucket, 50))
    assert fake.slept == []


def test_zero_qps_never_waits(fake: FakeTime) -> None:
    """qps 0 turns pacing off."""
    asyncio.run(take(fake.pace(0.0, 1), 1000))
    assert fake.slept == []


def test_concurrent_waiters_are_served_in_order(fake: FakeTime) -> None:
    """Takes from many tasks at once come out one by one, first come first served."""
    bucket = fake.pace(50.0, 1)
    served: list[int] = []

    async def one(i: int) -> None:
        await bucket.take()
        served.append(i)

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(10)))

    asyncio.run(main())
    assert served == list(range(10))
    assert fake.now - 1000.0 == pytest.approx(9 / 50.0)


def test_a_key_added_many_times_is_handed_out_once() -> None:
    """Keys come out once each, in the order first added; Events after the keys."""
    queue = WriteQueue()

    async def main() -> list[tuple[str, object]]:
        for key in ["a", "b", "a", "c", "b"]:
            queue.add(key)
        queue.add_event("e1")
        out = []
        while len(queue):
            kind, item = await queue.get()
            out.append((kind, item))
            if kind == "status":
                queue.done(item)
        return out

    assert asyncio.run(main()) == [
        ("status", "a"),
        ("status", "b"),
        ("status", "c"),
        ("event", "e1"),
    ]


def test_a_key_added_while_written_comes_back_only_after_done() -> None:
    """Never two writes of one AIJob at once: re-added during its write, it waits for done."""
    queue = WriteQueue()

    async def main() -> None:
        queue.add("a")
        assert await queue.get() == ("status", "a")
        queue.add("a")  # changed while being written
        queue.add("b")
        assert await queue.get() == ("status", "b")  # not "a" again yet
        assert len(queue) == 0
        queue.done("a")
        assert await queue.get() == ("status", "a")

    asyncio.run(main())


def test_a_key_added_first_goes_ahead_once_even_when_queued_or_being_written() -> None:
    """``first`` moves a queued key to the front (not twice), and a key being written comes
    back at the front after done; a plain add afterwards keeps it there."""
    queue = WriteQueue()

    async def main() -> list[str]:
        for key in ["a", "b", "c", "w"]:
            queue.add(key)
        assert await queue.get() == ("status", "a")  # "a" is being written
        queue.add("c", first=True)
        queue.add("c")
        queue.add("a", first=True)
        assert await queue.get() == ("status", "c")
        queue.done("a")  # its first-marked re-add goes ahead of b and w
        queue.done("c")
        out = []
        while len(queue):
            _, key = await queue.get()
            out.append(key)
            queue.done(key)
        return out

    assert asyncio.run(main()) == ["a", "b", "w"]


def test_a_waiting_worker_wakes_when_work_arrives() -> None:
    """get() blocks on an empty queue until something is added."""
    queue = WriteQueue()

    async def main() -> tuple[str, object]:
        waiter = asyncio.ensure_future(queue.get())
        await asyncio.sleep(0)
        assert not waiter.done()
        queue.add_event("hello")
        return await asyncio.wait_for(waiter, timeout=5)

    assert asyncio.run(main()) == ("event", "hello")


def test_events_beyond_the_bound_drop_the_oldest() -> None:
    """Only the newest max_events Events are kept; the drops are counted."""
    queue = WriteQueue(max_events=3)
    for i in range(5):
        queue.add_event(i)

    async def main() -> list[object]:
        return [(await queue.get())[1] for _ in range(3)]

    assert asyncio.run(main()) == [2, 3, 4]
    assert queue.dropped_events == 2
