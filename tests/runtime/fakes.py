"""Fakes of the runtime's ports for unit tests of its pure parts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FakeClock:
    """A :class:`~cpn.runtime.ports.Clock` the test moves: ``now`` monotonic seconds and
    ``wall_s`` wall seconds, both advanced by :meth:`advance`."""

    now: float = 0.0
    wall_s: float = 1_700_000_000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_s

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall_s += seconds
