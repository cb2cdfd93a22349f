"""One AIJob watch event's way through the runtime, in one straight line: the api reads the
object (``api/aijobread.read_aijob``), the store takes it (``Store.put``), a pure
transition says what follows (``lifecycle.arrived``) and ``Following.carry_out`` does it
(Events and status writes queued, member Job deletes, a kick for the loop)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import textwrap

import pytest

from cpn.api import constants as k
from cpn.config import OperatorConfig
from cpn.core.estimator import Estimator
from cpn.runtime import lifecycle
from cpn.runtime.engine import Runtime
from cpn.runtime.hubwatch import HubWatch
from tests.runtime.fakes import FakeClock, FakeHub, FakeLeadership, FakeMember
from tests.runtime.test_alone_status import ModelEstimator, with_model
from tests.runtime.test_store import FixedEstimator, body, succeeded


def test_an_aijob_event_goes_api_store_lifecycle_following_and_nowhere_back():
    """What HubWatch.aijob_event calls, in order: nothing else and nothing twice."""
    source = textwrap.dedent(inspect.getsource(HubWatch.aijob_event))
    calls = sorted(
        (
            node.lineno,
            node.col_offset,
            node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id,
        )
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
    )
    assert [name for _, _, name in calls] == ["read_aijob", "put", "arrived", "carry_out"]


@pytest.fixture
def runtime():
    runtime = on_fakes(FixedEstimator())
    runtime.members["m1"] = FakeMember("m1")
    yield runtime
    runtime.pool.shutdown(wait=True)
    runtime.write_pool.shutdown(wait=True)


def on_fakes(estimator: Estimator, config: OperatorConfig | None = None) -> Runtime:
    """A runtime on a fake hub and clock, nothing started."""
    return Runtime(
        config or OperatorConfig(),
        FakeHub(),
        estimator,
        clock=FakeClock(now=100.0, wall_s=100.0),
        leadership=FakeLeadership(),
    )


def reasons(runtime: Runtime) -> list[str]:
    return [reason for _, reason, _, _ in runtime.writes._events]


def test_watch_events_of_one_aijob_from_created_to_deleted(runtime):
    """Created: a record owned by its namespace's labels, a cycle asked for. Its own
    status write echoed: nothing. spec.suspend while it runs: its member Job stopped,
    Suspended. Deleted: its record let go, a cycle asked for."""
    watch, state = runtime.hub_watch, runtime.state
    watch.namespace_event("ADDED", {"metadata": {"name": "ns", "labels": {k.LABEL_USER: "al"}}})
    doc = body("a", "uid-a")
    watch.aijob_event("ADDED", doc)
    record = runtime.store.records["ns/a"]
    assert record.job is not None and (record.job.user, record.job.group) == ("al", "ns")
    assert state.kicked.is_set()
    state.kicked.clear()
    running = {"phase": k.PHASE_RUNNING, "cluster": "m1", "memberJob": {"name": "a-1"}}
    watch.aijob_event("MODIFIED", {**doc, "status": running})
    assert not state.kicked.is_set() and reasons(runtime) == []
    record.phase, record.cluster, record.member_job = k.PHASE_RUNNING, "m1", "a-1"
    suspended = {**doc, "metadata": {**doc["metadata"], "generation": 2}}
    suspended["spec"] = {**doc["spec"], "suspend": True}
    watch.aijob_event("MODIFIED", suspended)
    runtime.pool.shutdown(wait=True)  # the member Job delete ran
    assert runtime.members["m1"].deleted == ["a-1"]  # type: ignore[attr-defined]
    assert (record.phase, record.member_job, reasons(runtime)) == (
        k.PHASE_SUSPENDED,
        "",
        ["Suspended"],
    )
    assert state.kicked.is_set() and runtime.writes.statuses() == 1
    state.kicked.clear()
    watch.aijob_event("DELETED", {"metadata": doc["metadata"]})
    assert "ns/a" not in runtime.store.records and state.kicked.is_set()


def test_a_finished_jobs_runtime_is_learned_by_the_next_cycle_once():
    """Succeeded: its UID counts as seen at once (a re-list does not learn it again); the
    estimator sees its runtime when the loop next cycles, before the snapshot, and the
    waiting jobs of its model are estimated again then."""
    estimator = ModelEstimator()
    runtime = Runtime(
        OperatorConfig(),
        FakeHub(),
        estimator,
        clock=FakeClock(now=100.0, wall_s=100.0),
        leadership=FakeLeadership(),
    )
    runtime.store.set_gpu_types(["a100"])
    for name in ("a", "b"):
        runtime.hub_watch.aijob_event("ADDED", with_model(name, f"uid-{name}"))
    done, waiting = runtime.store.records["ns/a"], runtime.store.records["ns/b"]
    done.phase, done.cluster, done.gpu_type, done.start_s = k.PHASE_RUNNING, "m1", "a100", 40.0
    runtime.following.carry_out(done, lifecycle.succeeded(done, 100.0))
    assert "uid-a" in runtime.state.learned and estimator.seen == set()
    assert waiting.job is not None and waiting.job.estimate.new_model
    assert runtime.following.learn() == 1 and runtime.following.learn() == 0
    assert estimator.seen == {"llama3"} and not waiting.job.estimate.new_model
    runtime.pool.shutdown(wait=True)
    runtime.write_pool.shutdown(wait=True)


class Remembering(FixedEstimator):
    """Records which way it learned: observe (a job that finished now) or recall (one read
    back from the hub at start-up, which must not be stored again)."""

    def __init__(self) -> None:
        super().__init__()
        self.ways: list[tuple[str, str, float]] = []

    def observe(self, job, gpu_type, actual_s):
        self.ways.append(("observe", gpu_type, actual_s))

    def recall(self, job, gpu_type, actual_s):
        self.ways.append(("recall", gpu_type, actual_s))


def test_finished_aijobs_listed_at_start_are_recalled_once_not_observed():
    """The first listing's Succeeded AIJobs reach the estimator through ``recall`` (the
    Estimator protocol's, no probing), once per UID even when listed again."""
    estimator = Remembering()
    runtime = on_fakes(estimator)
    try:
        done = succeeded("a", "uid-a")
        runtime.hub_watch._aijobs_listed([done, body("b", "uid-b")])
        runtime.hub_watch._aijobs_listed([done, body("b", "uid-b")])
        assert estimator.ways == [("recall", "A100-80GB", 1200.0)]
    finally:
        runtime.pool.shutdown(wait=True)
        runtime.write_pool.shutdown(wait=True)


def test_with_check_plans_a_cycle_logs_each_rule_its_plan_breaks(monkeypatch, caplog):
    """``CPN_CHECK_PLANS`` (on in the end-to-end tests): a cycle whose plan preempts a job
    that is not running logs ``plan check:`` naming the job and the rule."""
    from cpn.core.model import CyclePlan, Preempt
    from cpn.runtime import loop

    runtime = on_fakes(FixedEstimator(), OperatorConfig(check_plans=True))
    bad = CyclePlan(preemptions=(Preempt(job_key="ns/ghost", for_key="ns/other"),))
    monkeypatch.setattr(loop, "_plan_and_explain", lambda snapshot: (bad, 0.0, {}, {}))
    try:
        with caplog.at_level("ERROR", logger=loop.__name__):
            asyncio.run(runtime.scheduler.cycle())
    finally:
        runtime.pool.shutdown(wait=True)
        runtime.write_pool.shutdown(wait=True)
    checks = [r.getMessage() for r in caplog.records if "plan check:" in r.getMessage()]
    assert checks and all("ns/ghost" in line for line in checks)


def test_a_paged_list_deletes_only_when_whole_and_learns_each_finished_once():
    """Pages of a re-list are taken as they come; an AIJob missing from the list goes only
    once the list is whole (it may be on a later page), and a list begun again (its first
    page) forgets the keys of the one that broke off."""
    estimator = Remembering()
    runtime = on_fakes(estimator)
    watch = runtime.hub_watch
    try:
        done = succeeded("a", "uid-a")
        watch._aijobs_listed([body("b", "uid-b"), body("c", "uid-c"), done])
        assert len(runtime.store.records) == 3
        # A list that breaks off after one page, then one begun again: b, then a and c.
        watch._aijobs_page([body("b", "uid-b")], first=True)
        watch._aijobs_page([body("b", "uid-b")], first=True)
        assert len(runtime.store.records) == 3  # nothing deleted before the list is whole
        watch._aijobs_page([done, body("c", "uid-c")], first=False)
        watch._aijobs_end()
        assert len(runtime.store.records) == 3
        watch._aijobs_page([body("b", "uid-b")], first=True)
        watch._aijobs_page([done], first=False)
        watch._aijobs_end()  # c was deleted meanwhile
        assert sorted(runtime.store.records) == ["ns/a", "ns/b"]
        assert estimator.ways == [("recall", "A100-80GB", 1200.0)]
    finally:
        runtime.pool.shutdown(wait=True)
        runtime.write_pool.shutdown(wait=True)
