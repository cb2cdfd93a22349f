"""The ETA projection in its own process (cpn.runtime.projector): same answers as in
the operator's process, and a new worker after one dies."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from cpn.core.eta import project_range
from cpn.core.presets import preset_policy
from cpn.runtime.projector import Projector
from tests.builders import cluster, job, nodes, running, snapshot

A100 = "A100-80GB"


def _snapshot():
    c = cluster("m", nodes("m", 2, gpus=8, free=[0, 4]))
    busy = [running(job("r", gpus=8, user="ann"), "m", A100, ("m-0",), start_s=0, end_s=100)]
    jobs = [
        job("a", gpus=8, runtime_s={A100: 50.0}, submitted_s=1, user="bob"),
        job("b", gpus=4, runtime_s=70, submitted_s=2, group="g"),
        job("c", gpus=8, runtime_s=30, submitted_s=3),
    ]
    return snapshot(
        jobs=jobs, clusters=[c], running_jobs=busy, now_s=10, policy=preset_policy("default")
    )


def test_the_worker_projects_what_the_operator_would():
    """Starts, ends, places and ranges from the worker equal the in-process projection
    (the snapshot's read-only maps cross the process boundary and back)."""
    snap = _snapshot()
    projector = Projector()
    try:
        out = asyncio.run(projector.project(snap))
    finally:
        projector.close()
    assert out == project_range(snap)
    assert set(out) == {"a", "b", "c"}


def test_a_dead_worker_is_replaced():
    """The worker killed between projections: that call fails, the next one gets a new
    worker and its answer."""
    snap = _snapshot()
    projector = Projector()

    async def scenario() -> None:
        await projector.project(snap)
        assert projector._pool is not None
        for pid in list(projector._pool._processes):  # the worker, as the OOM killer would
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(BrokenProcessPool):
            await projector.project(snap)
        assert await projector.project(snap) == project_range(snap)

    try:
        asyncio.run(scenario())
    finally:
        projector.close()


BUSY = """
import multiprocessing, os, sys, time
from cpn.runtime import projector

def busy(parent):
    projector._worker(parent)
    time.sleep(600)  # a projection that takes long

if __name__ == "__main__":
    child = multiprocessing.get_context("spawn").Process(target=busy, args=(os.getpid(),))
    child.start()
    print(child.pid, flush=True)
    sys.stdin.readline()  # until the test has the pid
    os.kill(os.getpid(), 9)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone
    except FileNotFoundError:
        return False


def test_a_busy_worker_exits_when_the_operator_is_gone(tmp_path):
    """An operator killed outright leaves no worker behind: a worker busy with a long
    projection (it would otherwise finish it, on a core, for nobody) sees its parent gone
    and exits within seconds."""
    script = tmp_path / "parent.py"
    script.write_text(BUSY)
    with subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as parent:
        assert parent.stdout is not None and parent.stdin is not None
        worker = int(parent.stdout.readline())
        assert _alive(worker)
        parent.stdin.write("\n")
        parent.stdin.flush()
        parent.wait(timeout=60)
    deadline = time.monotonic() + 30
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker)
