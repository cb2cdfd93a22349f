"""Staging in the runtime (cpn.runtime.staging): a start whose inputs its member lacks goes
Staging, a staging Job copies each, the member Job is created only once all are there; a
shared input is staged once; a failed staging is retried after its back-off, then fails
the AIJob; the caches, their status and the learned links. On fake ports and a fake clock;
the member Jobs' events are fed by hand as a member's informer would."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from cpn.api import constants as k
from cpn.api.staging import read_staging_job
from cpn.config import OperatorConfig
from cpn.core.model import Cached, CyclePlan, Start
from cpn.core.policy import DataPolicy
from cpn.runtime.dispatch import Dispatching
from cpn.runtime.following import Following
from cpn.runtime.hubwrites import HubWrites
from cpn.runtime.stagesteps import cache_from_status, cache_status
from cpn.runtime.staging import Staging
from cpn.runtime.state import RuntimeState
from cpn.runtime.store import Record
from tests.builders import snapshot
from tests.runtime.fakes import FakeClock, FakeHub, FakeLeadership, FakeMember, upsert
from tests.runtime.test_store import FixedEstimator, body

GB = 10**9


def inputs_body(name: str, uid: str, *inputs: tuple[str, str, int]) -> dict[str, Any]:
    """AIJob ``name`` reading ``inputs`` (name, location, bytes), version v1."""
    doc = body(name, uid)
    doc["spec"]["inputs"] = [
        {"name": n, "version": "v1", "uri": f"s3://bucket/{n}", "sizeBytes": size, "location": loc}
        for n, loc, size in inputs
    ]
    return doc


class Bed:
    """The dispatcher and the staging wired as the engine wires them, on fake members
    m1 (where jobs go) and m2 (where the data is), a 10 Gbit/s static link between them."""

    def __init__(self, data: DataPolicy | None = None) -> None:
        self.clock = FakeClock(now=100.0, wall_s=1000.0)
        self.state = RuntimeState(
            OperatorConfig(),
            FakeHub(),  # type: ignore[arg-type]
            FixedEstimator(),
            clock=self.clock,
            leadership=FakeLeadership(),
        )
        if data is not None:
            self.state.store.set_policy(replace(self.state.store.policy, data=data))
        self.following = Following(self.state)
        self.dispatching = Dispatching(self.state, HubWrites(self.state), self.following)
        self.staging = Staging(self.state, self.following, self.dispatching.launch)
        self.dispatching.staging = self.staging
        self.following.staging_seen = self.staging.seen
        self.m1, self.m2 = FakeMember("m1"), FakeMember("m2")
        self.m1.spec.bandwidth_gbps = {"m2": 10.0}
        self.state.members.update({"m1": self.m1, "m2": self.m2})  # type: ignore[dict-item]

    def add(self, name: str, *inputs: tuple[str, str, int]) -> Record:
        return upsert(
            self.state.store, inputs_body(name, f"uid-{name}", *inputs), user="u", group="g"
        )

    def run(self, step: Callable[[], Any]) -> None:
        async def go() -> None:
            out = step()
            if asyncio.iscoroutine(out):
                await out
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            await asyncio.gather(*self.state.inflight.values())
            await asyncio.sleep(0.05)  # the pool's create calls

        asyncio.run(go())

    def start(self, record: Record, transfer_s: float = 8.0, staged: tuple[str, ...] = ()) -> None:
        start = Start(
            job_key=record.key,
            cluster="m1",
            gpu_type="a100",
            nodes=("n1",),
            predicted_runtime_s=60,
            transfer_s=transfer_s,
            staged=staged,
        )
        self.run(lambda: self.dispatching.apply(CyclePlan(starts=(start,)), snapshot()))

    def staging_jobs(self) -> list[str]:
        return [name for name in self.m1.created if name.startswith("cpn-stage-")]

    def report(
        self, name: str, result: str, started: str, finished: str, event: str = "MODIFIED"
    ) -> None:
        """The member's informer reports staging Job ``name`` (as cpn created it) ended."""
        manifest = self.created[name]
        conditions = []
        if result == "Succeeded":
            conditions = [{"type": "Complete", "status": "True"}]
        elif result == "Failed":
            conditions = [{"type": "Failed", "status": "True", "message": "copy failed: 403"}]
        job = {
            **manifest,
            "status": {"startTime": started, "completionTime": finished, "conditions": conditions},
        }
        self.run(lambda: self.following.follow(self.m1, event, job))  # type: ignore[arg-type]

    @property
    def created(self) -> dict[str, dict[str, Any]]:
        return self.m1.manifests  # type: ignore[attr-defined, no-any-return]

    def close(self) -> None:
        self.state.pool.shutdown(wait=True)
        self.state.write_pool.shutdown(wait=True)

    def events(self) -> list[str]:
        return [reason for _, reason, _, _ in self.state.writes._events]


def _keep_manifests(member: FakeMember) -> None:
    member.manifests = {}  # type: ignore[attr-defined]
    create = member.create_job

    def keeping(manifest: Any) -> str:
        member.manifests[manifest["metadata"]["name"]] = manifest  # type: ignore[attr-defined]
        return create(manifest)

    member.create_job = keeping  # type: ignore[method-assign]


def bed(data: DataPolicy | None = None) -> Bed:
    made = Bed(data)
    _keep_manifests(made.m1)
    return made


def test_a_start_that_moves_an_input_stages_it_then_creates_its_job():
    """Staging first (GPUs held, no member Job); the staging Job, pinned to the chosen node,
    says what it copies; once it succeeded the input is present, the link learned, the Job
    created and the staging's predicted and actual seconds kept."""
    b = bed()
    try:
        record = b.add("a", ("imagenet", "m2", 10 * GB))
        b.start(record, transfer_s=8.0, staged=("imagenet@v1",))
        assert record.phase == k.PHASE_STAGING and record.active
        assert record.staging == ("imagenet@v1",)
        assert b.staging_jobs() and record.member_job not in b.m1.created
        name = b.staging_jobs()[0]
        manifest = b.created[name]
        seen = read_staging_job(manifest)
        assert seen is not None and (seen.ident, seen.source, seen.size_bytes) == (
            "imagenet@v1",
            "m2",
            10 * GB,
        )
        assert seen.predicted_s == 8.0  # 10 GB at the static 10 Gbit/s
        assert manifest["spec"]["activeDeadlineSeconds"] == 21600  # data.staging_timeout_s
        pod = manifest["spec"]["template"]["spec"]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["n1"]
        assert (
            "--uri" in pod["containers"][0]["args"]
            and "s3://bucket/imagenet" in pod["containers"][0]["args"]
        )
        assert "imagenet@v1" not in b.staging.caches.get("m1", {})  # not before it succeeded
        b.clock.advance(20)
        b.report(name, "Succeeded", "2026-01-01T00:00:00Z", "2026-01-01T00:00:16Z")
        assert record.phase == k.PHASE_DISPATCHED
        assert record.member_job in b.m1.created
        assert "imagenet@v1" in b.staging.caches["m1"]
        assert (record.staging_predicted_s, record.staging_actual_s) == (8.0, 20.0)
        assert b.staging.links.estimate("m2", "m1", 10.0) == 7.5  # median of 5 and the prior 10
        assert {"Staging", "Staged"} <= set(b.events())
        b.close()  # the pool's calls done
        assert name in b.m1.deleted  # a staging Job that succeeded is removed
        pulls = [n for n in b.m1.created if n.startswith("cpn-pull-")]
        assert len(pulls) == 1  # its image pulled onto the node while it staged
        pull = b.created[pulls[0]]["spec"]["template"]["spec"]
        assert pull["containers"][0]["image"] == "i"
        terms = pull["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["n1"]
    finally:
        b.close()


def test_two_jobs_needing_one_absent_input_share_one_staging_and_a_third_stages_nothing():
    b = bed(DataPolicy(prepull=False))
    try:
        first, second = b.add("a", ("ds", "m2", GB)), b.add("b", ("ds", "m2", GB))
        b.start(first, staged=("ds@v1",))
        b.start(second)  # the cycle saw it arriving: nothing staged by this start
        assert len(b.staging_jobs()) == 1
        assert second.phase == k.PHASE_STAGING and "another job" in second.message
        b.report(b.staging_jobs()[0], "Succeeded", "2026-01-01T00:00:00Z", "2026-01-01T00:00:02Z")
        assert first.phase == second.phase == k.PHASE_DISPATCHED
        third = b.add("c", ("ds", "m2", GB))
        b.start(third)
        assert third.phase == k.PHASE_DISPATCHED and len(b.staging_jobs()) == 1
        assert third.member_job in b.m1.created
    finally:
        b.close()
    assert not [n for n in b.m1.created if n.startswith("cpn-pull-")]  # prepull: false


def test_a_failed_staging_is_retried_after_its_back_off_then_fails_the_aijob():
    b = bed(DataPolicy(staging_attempts=2, staging_backoff_s=5.0))
    try:
        record = b.add("a", ("ds", "m2", GB))
        b.start(record, staged=("ds@v1",))
        first = b.staging_jobs()[0]
        b.report(first, "Failed", "2026-01-01T00:00:00Z", "")
        assert record.phase == k.PHASE_STAGING and "retrying in 5s" in record.message
        b.clock.advance(1)
        b.report(first, "Failed", "2026-01-01T00:00:00Z", "")  # seen again (the sweep)
        assert b.events().count("StagingRetry") == 1
        b.clock.advance(-1)
        assert b.staging.next_wake_s(b.clock.wall()) == 5.0
        b.staging.tick()
        assert len(b.staging_jobs()) == 1  # not before its back-off
        b.clock.advance(5)
        b.run(b.staging.tick)
        assert len(b.staging_jobs()) == 2
        second = b.staging_jobs()[1]
        assert b.created[second]["metadata"]["annotations"][k.ANNOTATION_STAGING_ATTEMPT] == "2"
        b.report(second, "Failed", "2026-01-01T00:00:00Z", "")
        assert (record.phase, record.reason) == (k.PHASE_FAILED, "StagingFailed")
        assert "failed 2 time(s)" in record.message and "403" in record.message
        assert not record.active and record.member_job not in b.m1.created
        assert "ds@v1" not in b.staging.caches.get("m1", {})
        assert "StagingFailed" in b.events()
    finally:
        b.close()


def test_a_job_requeued_while_staging_stops_waiting_and_the_staging_still_fills_the_cache():
    b = bed()
    try:
        record = b.add("a", ("ds", "m2", GB))
        b.start(record, staged=("ds@v1",))
        record.phase = k.PHASE_QUEUED  # e.g. its member was lost meanwhile
        b.staging.tick()
        assert b.staging.held == {}
        b.report(b.staging_jobs()[0], "Succeeded", "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z")
        assert record.phase == k.PHASE_QUEUED and record.member_job not in b.m1.created
        assert "ds@v1" in b.staging.caches["m1"]
    finally:
        b.close()


def test_the_cycle_sees_present_inputs_free_and_moving_ones_when_they_will_be_complete():
    b = bed()
    try:
        record = b.add("a", ("ds", "m2", 10 * GB))
        b.start(record, staged=("ds@v1",))
        cache = b.staging.data_cache()["m1"]["ds@v1"]
        assert cache.ready_s == b.clock.wall() + 8.0
        b.staging.caches.setdefault("m1", {})["other"] = Cached(
            size_gb=1.0, last_used_s=5.0, ready_s=5.0
        )
        assert b.staging.data_cache()["m1"]["other"].ready_s == 5.0
    finally:
        b.close()


def test_learned_links_replace_the_static_figure_and_resist_an_outlier():
    b = bed()
    try:
        links = b.staging.links
        for took in (80.0, 81.0, 79.0, 400.0, 80.0):  # 10 GB: about 1 Gbit/s, one slow start
            links.observe("m2", "m1", 10 * GB, took)
        value = links.estimate("m2", "m1", 10.0)
        assert value is not None and abs(value - 1.0) < 0.02
        table = b.staging.bandwidth({"m1": {"m2": 10.0}, "m2": {"m1": 10.0}})
        assert abs(table["m2"]["m1"] - 1.0) < 0.02 and table["m1"]["m2"] == 10.0
        assert not links.observe("m2", "m1", 0, 10.0)  # an unknown size teaches nothing
    finally:
        b.close()


def test_the_cache_is_evicted_to_the_policy_capacity_never_dropping_what_a_placed_job_reads():
    b = bed(DataPolicy(default_cache_gb=1.5))
    try:
        record = b.add("a", ("ds", "m2", GB))
        b.start(record, staged=("ds@v1",))
        b.staging.caches["m1"] = {"old": Cached(size_gb=1.0, last_used_s=1.0, ready_s=1.0)}
        b.report(b.staging_jobs()[0], "Succeeded", "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z")
        assert set(b.staging.caches["m1"]) == {"ds@v1"}  # "old" went, the running job's stayed
    finally:
        b.close()


def test_the_cache_status_is_capped_and_read_back_after_a_restart():
    cache = {
        f"in{i}@v": Cached(size_gb=1.0, last_used_s=1_700_000_000.0 + i, ready_s=0.0)
        for i in range(30)
    }
    status = cache_status(cache, 100.0)
    assert (status["count"], status["usedBytes"], status["capacityBytes"]) == (
        30,
        30 * GB,
        100 * GB,
    )
    assert len(status["entries"]) == 20 and status["entries"][0]["input"] == "in29@v"
    back = cache_from_status({"cache": status})
    assert set(back) == {f"in{i}@v" for i in range(10, 30)}
    assert back["in29@v"].size_gb == 1.0 and back["in29@v"].last_used_s == 1_700_000_029.0
    assert cache_from_status({"cache": {"entries": [{"input": 3}, "x"]}}) == {}
    b = bed()
    try:
        b.staging.restore("m1", {"cache": status})
        assert len(b.staging.caches["m1"]) == 20
    finally:
        b.close()


def test_an_input_declared_without_a_size_learns_it_from_its_first_staging():
    """Its staging Job says 0 bytes; once it succeeded, the bytes its pod reports are the
    input's size in the cache, the link's measurement and later estimates from its source."""
    b = bed(DataPolicy(prepull=False))
    asked: list[str] = []

    def messages(job: str) -> list[str]:
        asked.append(job)
        return ["", '{"dest": "/d", "bytes": 20000000000, "seconds": 16.0}']

    b.m1.termination_messages = messages  # type: ignore[attr-defined]
    try:
        record = b.add("a", ("weights", "m2", 0))
        b.start(record, staged=("weights@v1",))
        name = b.staging_jobs()[0]
        seen = read_staging_job(b.created[name])
        assert seen is not None and seen.size_bytes == 0
        b.clock.advance(20)
        b.report(name, "Succeeded", "2026-01-01T00:00:00Z", "2026-01-01T00:00:16Z")
        b.run(lambda: asyncio.sleep(0.1))  # the pods' report read
        assert asked == [name]
        assert record.phase == k.PHASE_DISPATCHED
        assert b.staging.caches["m1"]["weights@v1"].size_gb == 20.0
        assert b.staging.links.count("m2", "m1") == 1  # 20 GB in 16 s: 10 Gbit/s measured
        assert b.staging.links.estimate("m2", "m1", None) == 10.0
        later = b.staging.sized(record.job)  # type: ignore[arg-type]
        assert later.inputs[0].size_gb == 20.0
        # its Job seen Succeeded again (an update before its deletion lands), its pod gone:
        # the size learned stays (CI once saw the cache entry turn 0 bytes)
        b.m1.termination_messages = lambda job: []  # type: ignore[attr-defined]
        b.report(name, "Succeeded", "2026-01-01T00:00:00Z", "2026-01-01T00:00:16Z")
        b.run(lambda: asyncio.sleep(0.1))
        assert b.staging.caches["m1"]["weights@v1"].size_gb == 20.0
    finally:
        b.close()


def test_with_cluster_scope_the_member_job_mounts_the_shared_claim_its_inputs_went_to():
    b = bed(DataPolicy(prepull=False, staging_scope="cluster", shared_claim="shared"))
    try:
        record = b.add("a", ("ds", "m2", GB))
        b.start(record, staged=("ds@v1",))
        name = b.staging_jobs()[0]
        assert "affinity" not in b.created[name]["spec"]["template"]["spec"]
        b.report(name, "Succeeded", "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z")
        assert record.phase == k.PHASE_DISPATCHED
        pod = b.created[record.member_job]["spec"]["template"]["spec"]
        claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]]
        assert claims == ["shared"]
    finally:
        b.close()
