"""The runtime's side of a benchmark's preemption, on fake ports: the member Job deleted,
the GPUBenchmark Pending with PreemptedByUserJob and an Event, its old Job neither adopted
nor made again while it is still seen, and a new run once it is gone and nothing waits."""

from __future__ import annotations

import asyncio
from typing import Any

from cpn.config import OperatorConfig
from cpn.core.model import CyclePlan, Hold, WaitReason
from cpn.runtime.benchmarks import UNSEEN_GRACE_S
from cpn.runtime.engine import Runtime
from tests.builders import cluster, job, nodes, snapshot
from tests.runtime.fakes import FakeClock, FakeHub, FakeLeadership, FakeMember
from tests.runtime.test_store import FixedEstimator

H100 = "H100-80GB"
JOB = "cpn-bench-bm"


def running_benchmark() -> dict[str, Any]:
    return {
        "metadata": {"name": "bm", "uid": "u-bm"},
        "spec": {"cluster": "m1", "node": "m1-0", "models": ["resnet50"]},
        "status": {"phase": "Running", "gpuType": H100, "memberJob": JOB},
    }


async def after_cycle(runtime: Runtime, free: float, waiting: bool) -> None:
    """One cycle's benchmark step: node m1-0 (8 H100s) with ``free`` GPUs after the
    cycle, and the AIJob ns/big (8 GPUs) held for capacity when ``waiting``."""
    big = job("ns/big", gpus=8, gpu_types=frozenset({H100}))
    snap = snapshot(
        jobs=[big] if waiting else [],
        clusters=[cluster("m1", nodes("m1", 1, gpu_type=H100, free=[free]))],
    )
    holds = (Hold(job_key="ns/big", reason=WaitReason.Capacity, message="", position=1),)
    runtime.benchmarks_after_cycle(snap, CyclePlan(holds=holds if waiting else ()))
    while runtime._bench_busy:  # the calls it launched
        await asyncio.sleep(0.01)


def test_a_benchmark_is_preempted_then_runs_again_once_its_old_job_is_gone() -> None:
    hub = FakeHub()
    runtime = Runtime(
        OperatorConfig(), hub, FixedEstimator(), clock=FakeClock(), leadership=FakeLeadership()
    )
    member = FakeMember("m1")
    member.jobs[JOB] = {"metadata": {"name": JOB}, "status": {}}
    runtime.members["m1"] = member
    runtime.member_status["m1"] = (True, "")
    runtime.benchmarks["bm"] = running_benchmark()
    runtime.benchmarks_listed = True

    async def scenario() -> None:
        runtime.loop = asyncio.get_running_loop()
        await after_cycle(runtime, free=6.0, waiting=True)  # 8 needed, 7 with it: runs on
        assert member.deleted == [] and hub.patches == []
        await after_cycle(runtime, free=7.0, waiting=True)  # its GPU is what ns/big lacks
        assert member.deleted == [JOB]
        (_, name, status), *_ = hub.patches
        assert name == "bm" and status["phase"] == "Pending"
        assert (status["reason"], status["preemptions"]) == ("PreemptedByUserJob", 1)
        assert status["memberJob"] is None and "AIJob ns/big" in status["message"]
        reasons = [reason for _, reason, _, _ in runtime.writes._events]
        assert reasons == ["PreemptedByUserJob"]
        # its Job is still in the member's mirror (the deletion not seen yet), nothing
        # waits: neither adopted nor created again, and the reason stays
        hub.patches.clear()
        await after_cycle(runtime, free=8.0, waiting=False)
        assert member.created == [] and hub.patches == []
        assert runtime.benchmarks["bm"]["status"]["reason"] == "PreemptedByUserJob"
        # gone: it starts again under the start rule
        del member.jobs[JOB]
        await after_cycle(runtime, free=8.0, waiting=True)  # a user job waits: not yet
        assert member.created == [] and hub.patches == []
        await after_cycle(runtime, free=8.0, waiting=False)
        assert member.created == [JOB]
        assert [(s["phase"], s["reason"]) for _, _, s in hub.patches] == [("Running", "Started")]

    try:
        asyncio.run(scenario())
    finally:
        runtime.pool.shutdown(wait=True)
        runtime.write_pool.shutdown(wait=True)


def test_a_job_just_created_is_not_gone_before_its_informer_shows_it() -> None:
    """The member's informer lags the create: a Running benchmark whose new Job is not in
    the mirror yet stays Running (the e2e run on a loaded machine once failed it "its
    member Job is gone"); a Job seen and then gone, or never seen within the grace, is."""
    hub = FakeHub()
    clock = FakeClock()
    runtime = Runtime(
        OperatorConfig(), hub, FixedEstimator(), clock=clock, leadership=FakeLeadership()
    )
    member = FakeMember("m1")
    runtime.members["m1"] = member
    runtime.member_status["m1"] = (True, "")
    pending = running_benchmark()
    pending["status"] = {"phase": "Pending"}
    runtime.benchmarks["bm"] = pending
    runtime.benchmarks_listed = True

    def phases() -> list[tuple[str, str]]:
        return [(s["phase"], s["reason"]) for _, _, s in hub.patches]

    async def scenario() -> None:
        runtime.loop = asyncio.get_running_loop()
        await after_cycle(runtime, free=8.0, waiting=False)
        assert member.created == [JOB] and phases() == [("Running", "Started")]
        clock.advance(30)
        await after_cycle(runtime, free=7.0, waiting=False)  # not in the mirror yet
        assert phases() == [("Running", "Started")]
        member.jobs[JOB] = {"metadata": {"name": JOB}, "status": {}}  # the informer shows it
        await after_cycle(runtime, free=7.0, waiting=False)
        assert phases() == [("Running", "Started")]
        del member.jobs[JOB]  # seen, then gone: told at once
        await after_cycle(runtime, free=8.0, waiting=False)
        assert phases() == [("Running", "Started"), ("Failed", "JobGone")]

        hub.patches.clear()  # never seen at all: told once the grace is over
        runtime.benchmarks["bm"] = {**pending, "status": {"phase": "Pending"}}
        await after_cycle(runtime, free=8.0, waiting=False)
        assert phases() == [("Running", "Started")]
        clock.advance(UNSEEN_GRACE_S - 1)
        await after_cycle(runtime, free=7.0, waiting=False)
        assert phases() == [("Running", "Started")]
        clock.advance(2)
        await after_cycle(runtime, free=7.0, waiting=False)
        assert phases() == [("Running", "Started"), ("Failed", "JobGone")]

    try:
        asyncio.run(scenario())
    finally:
        runtime.pool.shutdown(wait=True)
        runtime.write_pool.shutdown(wait=True)
