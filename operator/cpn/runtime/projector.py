"""The ETA projection in a worker process of its own.

A projection replays ``plan_cycle`` for every predicted end ahead, three times for the
range: with 10,000 waiting jobs, tens of seconds of CPU. On a thread of the operator it
held the interpreter against the live cycle, which then took two to three times as long
(bench_memory with 10,000 waiting: plan_cycle p50 1.55 s live against 0.53 s alone). In
a process of its own it runs beside the live cycle, on another core when there is one;
the operator pays only for sending the snapshot (about 0.4 s at 10,000 jobs) and reading
the result back (0.05 s), and the worker runs at a lower CPU priority (:data:`NICE`).
The worker is started on first use (``spawn``: a fresh
interpreter, nothing inherited from the operator's threads) and again after it dies.
"""

from __future__ import annotations

import asyncio
import copyreg
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from types import MappingProxyType
from typing import Any

from cpn.core.eta import Projection, project_range
from cpn.core.model import Snapshot, frozen_map

#: The worker's niceness: background work, it yields the CPU to the live cycle, the
#: dispatches and (on a shared machine) the API servers.
NICE = 10


def _reduce_map(values: MappingProxyType[str, Any]) -> tuple[Any, tuple[dict[str, Any]]]:
    return frozen_map, (dict(values),)


# The model's read-only maps (frozen_map) are mapping proxies, which pickle cannot send.
copyreg.pickle(MappingProxyType, _reduce_map)


def _worker(parent: int) -> None:
    """The worker's start: a lower CPU priority, and an exit as soon as the operator is gone
    (a worker outlives a killed parent, busy with its projection, otherwise)."""
    os.nice(NICE)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _project(snapshot: Snapshot) -> dict[str, Projection]:
    """In the worker: :func:`~cpn.core.eta.project_range` (this module, imported there to
    unpickle the call, registers the maps' pickling for the result's way back too)."""
    return project_range(snapshot)


class Projector:
    """Runs :func:`~cpn.core.eta.project_range` in one worker process, one call at a time."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    async def project(self, snapshot: Snapshot) -> dict[str, Projection]:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                max_workers=1, mp_context=context, initializer=_worker, initargs=(os.getpid(),)
            )
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, _project, snapshot)
        except BrokenProcessPool:
            self._pool = None  # the worker died (killed, out of memory): a new one next time
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
