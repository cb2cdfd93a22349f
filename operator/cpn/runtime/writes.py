"""The operator's writes to the hub: a work queue of AIJobs whose status is due, and a
pace for all of them.

:class:`WriteQueue` holds each AIJob's key once however often it changes (the semantics
of client-go's workqueue: a key added while it is being written is queued again when
that write is done, so one AIJob is never written twice at once), plus Events, of which
it keeps the newest ``max_events`` (client-go's event broadcaster also drops beyond a
queue of 1,000). A burst of 10,000 AIJobs is then 10,000 keys, not 10,000 tasks.

:class:`Pace` limits the writes the way Kubernetes controllers limit their own requests
(client-go's QPS and burst; Kueue's ``clientConnection`` defaults to 50 and 100): a burst
of submissions must not become as many status patches and Events at once on the hub's
API server, which also serves the users submitting them. What is written is rendered
when the write's turn comes, so changes made while waiting merge into one patch. While
the operator dispatches a burst it slows its writes further (:meth:`Pace.yield_to`): on a
shared API server every status patch competes with the submissions themselves.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any


class Pace:
    """At most ``qps`` takes per second on average, ``burst`` at once; ``qps <= 0`` never
    waits. Waiters are served in arrival order. While yielding (:meth:`yield_to`) the
    rate is ``qps * slow`` and nothing saved up is spent at once."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        slow: float = 0.1,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.slow = slow
        self._slow_until = 0.0
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._at = clock()
        self._lock: asyncio.Lock | None = None  # made on the loop that first waits

    async def take(self) -> None:
        if self.qps <= 0:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # FIFO: one waiter refills and sleeps at a time
            now = self._clock()
            slowed = now < self._slow_until
            rate = self.qps * self.slow if slowed else self.qps
            cap = 1.0 if slowed else self.burst
            self._tokens = min(cap, self._tokens + (now - self._at) * rate)
            self._at = now
            if self._tokens < 1.0:
                await self._sleep((1.0 - self._tokens) / rate)
                self._tokens = 1.0
                self._at = self._clock()
            self._tokens -= 1.0

    def yield_to(self, until: float) -> None:
        """Take at the slow rate until the clock reads ``until`` (extended, never cut)."""
        self._slow_until = max(self._slow_until, until)


class WriteQueue:
    """AIJob keys whose status is due (each once, in order, those added ``first`` ahead)
    and Events to post."""

    def __init__(self, max_events: int = 1000) -> None:
        self._keys: deque[str] = deque()
        self._dirty: set[str] = set()  # added and not yet handed out
        self._processing: set[str] = set()  # handed out, not yet done
        self._first: set[str] = set()  # due before the others (a start instant shown nears)
        self._events: deque[Any] = deque()
        self._max_events = max_events
        self._ready: asyncio.Event | None = None
        self.dropped_events = 0

    def __len__(self) -> int:
        return len(self._keys) + len(self._events)

    def add(self, key: str, *, first: bool = False) -> None:
        """Queue ``key`` (once); ``first`` puts it before every key not so marked."""
        if first and key not in self._first:
            self._first.add(key)
            if key in self._dirty and key not in self._processing:
                self._keys.remove(key)
                self._dirty.discard(key)
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._enqueue(key)

    def _enqueue(self, key: str) -> None:
        if key in self._first:
            self._keys.appendleft(key)
        else:
            self._keys.append(key)
        self._wake()

    def statuses(self) -> int:
        """AIJob statuses queued or being written."""
        return len(self._keys) + len(self._processing)

    def add_event(self, event: Any) -> None:
        if len(self._events) >= self._max_events:
            self._events.popleft()
            self.dropped_events += 1
        self._events.append(event)
        self._wake()

    async def get(self) -> tuple[str, Any]:
        """("status", key) while keys wait, else ("event", event); call :meth:`done` with
        the key once its write is over."""
        while not self._keys and not self._events:
            if self._ready is None:
                self._ready = asyncio.Event()
            self._ready.clear()
            await self._ready.wait()
        if self._keys:
            key = self._keys.popleft()
            self._dirty.discard(key)
            self._first.discard(key)
            self._processing.add(key)
            return "status", key
        return "event", self._events.popleft()

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:  # changed while it was written: its turn comes again
            self._enqueue(key)

    def _wake(self) -> None:
        if self._ready is not None:
            self._ready.set()
