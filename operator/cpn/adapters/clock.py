"""The system clock, as the runtime's :class:`~cpn.runtime.ports.Clock` port."""

from __future__ import annotations

import time


class SystemClock:
    """``time.monotonic`` and ``time.time``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()
