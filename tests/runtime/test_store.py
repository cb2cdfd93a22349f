"""The operator's store: records by key and by UID, refreshed from AIJob objects."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from cpn.api import constants as k
from cpn.api.aijobread import read_aijob
from cpn.core.estimator import Estimator
from cpn.core.model import Estimate, Job
from cpn.core.policy import QueuePolicy
from cpn.runtime import store as store_module
from cpn.runtime.status import render_status
from cpn.runtime.store import Store
from tests.runtime.fakes import upsert


class FixedEstimator(Estimator):
    """60 s on every GPU type; learns nothing (the protocol's defaults)."""

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        return Estimate(runtime_s={t: 60.0 for t in gpu_types})

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        return None


def body(name: str, uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "resources": {"gpus": 1},
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }


def test_records_are_found_by_uid_and_a_recreated_name_replaces_the_old_uid():
    """A name deleted and created again is a new record; the old UID no longer resolves."""
    store = Store(QueuePolicy(), FixedEstimator())
    first = upsert(store, body("a", "uid-1"), user="u", group="g")
    assert store.by_uid("uid-1") is first
    second = upsert(store, body("a", "uid-2"), user="u", group="g")
    assert second is not first
    assert store.by_uid("uid-2") is second and store.by_uid("uid-1") is None
    store.remove("ns/a")
    assert store.by_uid("uid-2") is None and store.records == {}


def succeeded(name: str, uid: str, **status: Any) -> dict[str, Any]:
    """An AIJob that Succeeded, as the operator leaves it: 1,200 s on an A100."""
    done = body(name, uid)
    done["status"] = {
        "phase": k.PHASE_SUCCEEDED,
        "cluster": "m1",
        "gpuType": "A100-80GB",
        "actualRuntimeSeconds": 1200.0,
        **status,
    }
    return done


class LearningEstimator(Estimator):
    """Unseen (conservative 600 s) until it has retrained (a new ``knowledge_version``),
    then 60 s."""

    def __init__(self) -> None:
        self.version = 0
        self.calls = 0

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        self.calls += 1
        if self.version:
            return Estimate(runtime_s={t: 60.0 for t in gpu_types})
        return Estimate(runtime_s={t: 600.0 for t in gpu_types}, unseen=True)

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        return None

    def knowledge_version(self) -> object:
        return self.version


def test_waiting_unseen_jobs_are_estimated_again_after_a_retrain_only():
    """A retrain re-estimates waiting jobs flagged unseen at the next snapshot, once."""
    estimator = LearningEstimator()
    store = Store(QueuePolicy(), estimator)
    store.set_gpu_types(["A100-80GB"])
    upsert(store, body("a", "uid-1"), user="u", group="g")
    snap = store.snapshot(0.0, [], {})
    assert snap.pending[0].estimate.runtime_s["A100-80GB"] == 600.0
    calls = estimator.calls
    store.snapshot(1.0, [], {})
    assert estimator.calls == calls  # nothing learned: nothing asked again
    estimator.version = 1
    snap = store.snapshot(2.0, [], {})
    assert snap.pending[0].estimate.runtime_s["A100-80GB"] == 60.0
    assert not snap.pending[0].estimate.unseen
    calls = estimator.calls
    store.snapshot(3.0, [], {})
    assert estimator.calls == calls


def test_a_queue_the_policy_does_not_know_is_said_and_checked_again_on_a_policy_change():
    """spec.queue outside the policy's queues (default + every level's queues) is noted on
    the record with the known names; a new policy that drops a queue flips its jobs."""
    from cpn.api.policy import parse_policy

    store = Store(parse_policy("levels: [{name: fast, queues: [debug]}]"), FixedEstimator())
    typo, debug, plain, default = (
        upsert(store, queued(name, queue), user="u", group="g")
        for name, queue in (("a", "dbug"), ("b", "debug"), ("c", None), ("d", "default"))
    )
    assert typo.unknown_queue == (
        "spec.queue 'dbug' is not a queue of the policy (its queues: debug, default); "
        "no level selects the job by its queue"
    )
    assert typo.phase == "Queued" and typo.job is not None  # it still runs
    assert debug.unknown_queue == plain.unknown_queue == default.unknown_queue == ""
    store.policy = QueuePolicy()
    assert store.recheck_queues() == [debug]  # newly unknown; the typo was already said
    assert "(its queues: default)" in debug.unknown_queue and typo.unknown_queue


def queued(name: str, queue: str | None) -> dict[str, Any]:
    doc = body(name, f"uid-{name}")
    if queue is not None:
        doc["spec"]["queue"] = queue
    return doc


def test_the_fence_survives_a_restart_through_the_status() -> None:
    """The current attempt's token is written to status.fence and read back from it, so a
    restarted operator still tells the current attempt's Job from a stale one."""
    store = Store(QueuePolicy(), FixedEstimator())
    before = upsert(store, body("a", "uid-1"), user="u", group="g")
    before.phase, before.attempts, before.fence = "Running", 2, "2-beef"
    before.cluster, before.member_job = "m1", "a-uid1-2"
    status, _ = render_status(before, 0.0)
    assert status["fence"] == "2-beef"
    restarted = Store(QueuePolicy(), FixedEstimator())
    after = upsert(restarted, {**body("a", "uid-1"), "status": status}, user="u", group="g")
    assert (after.attempts, after.fence) == (2, "2-beef")


def test_owners_follow_the_namespace_labels_and_the_policy_map_without_a_new_event() -> None:
    """A job's user and group are its namespace's: its labels, or the policy's namespace
    map over them, else the namespace's name; a change of either reaches every record of
    the namespace (an invalid spec stays invalid)."""
    store = Store(QueuePolicy(), FixedEstimator())
    bad = {**body("b", "uid-2"), "spec": {"resources": {"gpus": -1}}}
    for doc in (body("a", "uid-1"), bad):
        arrival = store.put(read_aijob(doc))
        assert arrival is not None and arrival.changed
    good, invalid = store.records["ns/a"], store.records["ns/b"]
    assert good.job is not None and (good.job.user, good.job.group) == ("ns", "ns")
    assert invalid.job is None and invalid.phase == k.PHASE_INVALID and invalid.invalid
    store.set_namespace("ns", {k.LABEL_USER: "alice", k.LABEL_GROUP: "team-a"})
    assert (good.user, good.group, good.job.user, good.job.group) == (
        "alice",
        "team-a",
        "alice",
        "team-a",
    )
    assert (invalid.user, invalid.job, invalid.phase) == ("alice", None, k.PHASE_INVALID)
    store.set_policy(replace(QueuePolicy(), namespaces={"ns": ("bob", "team-b")}))
    assert good.job.user == "bob" and good.job.group == "team-b"
    store.set_namespace("ns", None)
    assert good.job.user == "bob"  # the policy's map still says so


def test_a_status_write_echoed_back_changes_nothing_a_cycle_sees() -> None:
    """The watch event of our own status write: the record keeps its job and says what
    the status shows; not changed (no cycle). A new generation is a change, a deleted one
    lets the record go, and a deleted one the store never held is nothing."""
    store = Store(QueuePolicy(), FixedEstimator())
    doc = body("a", "uid-1")
    store.put(read_aijob(doc))
    job = store.records["ns/a"].job
    echo = store.put(read_aijob({**doc, "status": {"phase": "Queued", "message": "x"}}))
    assert echo is not None and not echo.changed and echo.record.job is job
    assert dict(echo.record.written) == {"phase": "Queued", "message": "x"}
    newer = store.put(read_aijob({**doc, "metadata": {**doc["metadata"], "generation": 2}}))
    assert newer is not None and newer.changed and newer.record.job is not job
    deleting = {**doc["metadata"], "generation": 2, "deletionTimestamp": "2026-01-01T00:01:00Z"}
    began = store.put(read_aijob({**doc, "metadata": deleting}))
    assert began is not None and began.changed and began.began_deleting
    gone = store.put(read_aijob({"metadata": doc["metadata"]}), gone=True)
    assert gone is not None and gone.gone and "ns/a" not in store.records
    assert store.put(read_aijob({"metadata": doc["metadata"]}), gone=True) is None


def test_the_store_reads_no_aijob_itself() -> None:
    """The store takes AIJobs read by the api (cpn.api.aijobread) and never parses one."""
    source = Path(store_module.__file__).read_text()
    imported = {
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "cpn.api.aijob" not in imported


def test_a_finished_aijob_read_back_is_not_estimated_again_and_keeps_its_predictions():
    """After a restart a Succeeded AIJob's status shows the runtimes predicted while it ran
    (the estimator now says otherwise): it is not estimated again, so its rendered status
    writes nothing back about them."""
    estimator = LearningEstimator()
    estimator.version = 1  # now 60 s everywhere
    store = Store(QueuePolicy(), estimator)
    store.set_gpu_types(["A100-80GB", "V100-32GB"])
    shown = {"A100-80GB": 900.0}
    high = {"A100-80GB": 1800.0}
    done = succeeded("a", "uid-1", predictedRuntimeSeconds=shown, predictedRuntimeHighSeconds=high)
    calls = estimator.calls
    record = upsert(store, done, user="u", group="g")
    assert estimator.calls == calls and record.job is not None
    status, _ = render_status(record, 5000.0)
    assert status["predictedRuntimeSeconds"] == shown
    assert status["predictedRuntimeHighSeconds"] == high
    waiting = upsert(store, body("b", "uid-2"), user="u", group="g")
    assert estimator.calls == calls + 1
    assert render_status(waiting, 5000.0)[0]["predictedRuntimeSeconds"] == {
        "A100-80GB": 60.0,
        "V100-32GB": 60.0,
    }
