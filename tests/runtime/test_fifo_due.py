"""The operator stamps each waiting AIJob's FIFO due time once, shows it in the status
(fifoDue) and reads it back after a restart."""

from __future__ import annotations

from typing import Any

from cpn.api.aijob import parse_time
from cpn.core.policy import QueuePolicy
from cpn.runtime.status import render_status
from cpn.runtime.store import Store
from tests.builders import cluster, nodes
from tests.runtime.fakes import upsert
from tests.runtime.test_store import FixedEstimator, body

A100 = "A100-80GB"
FLEET = [cluster("m", nodes("m", 1, gpu_type=A100, gpus=2))]  # 2 GPUs
NOW = parse_time("2026-01-01T00:01:00Z") or 0.0


def aijob(name: str, uid: str, created: str, status: dict[str, Any] | None = None):
    made = body(name, uid)
    made["metadata"]["creationTimestamp"] = created
    if status:
        made["status"] = status
    return made


def store() -> Store:
    s = Store(QueuePolicy(), FixedEstimator())  # 60 s on every GPU type
    s.set_gpu_types([A100])
    return s


def test_due_times_are_stamped_once_in_submit_order():
    """The first cycle to see a job stamps its due time from the work ahead of it (60 s
    per one-GPU job over 2 GPUs); later cycles keep it and stamp only newcomers."""
    s = store()
    upsert(s, aijob("b", "uid-b", "2026-01-01T00:00:10Z"), user="u", group="g")
    upsert(s, aijob("a", "uid-a", "2026-01-01T00:00:00Z"), user="u", group="g")
    first = s.snapshot(NOW, FLEET, {})
    assert {j.key: j.fifo_due_s for j in first.pending} == {"ns/a": NOW, "ns/b": NOW + 30}
    upsert(s, aijob("c", "uid-c", "2026-01-01T00:00:20Z"), user="u", group="g")
    later = s.snapshot(NOW + 100, FLEET, {})
    assert {j.key: j.fifo_due_s for j in later.pending} == {
        "ns/a": NOW,
        "ns/b": NOW + 30,
        "ns/c": NOW + 100 + 2 * 60 / 2,
    }
    assert s.records["ns/c"].fifo_due_s == NOW + 160


def test_no_stamp_without_gpus_then_stamped_when_capacity_appears():
    s = store()
    upsert(s, aijob("a", "uid-a", "2026-01-01T00:00:00Z"), user="u", group="g")
    assert [j.fifo_due_s for j in s.snapshot(NOW, [], {}).pending] == [None]
    assert s.records["ns/a"].fifo_due_s is None
    assert [j.fifo_due_s for j in s.snapshot(NOW + 5, FLEET, {}).pending] == [NOW + 5]


def test_the_due_time_is_in_the_status_and_survives_a_restart():
    """status.fifoDue shows it (RFC 3339); a new store built from that status keeps it and
    does not stamp the job again, whatever the backlog is now."""
    s = store()
    upsert(s, aijob("a", "uid-a", "2026-01-01T00:00:00Z"), user="u", group="g")
    upsert(s, aijob("b", "uid-b", "2026-01-01T00:00:10Z"), user="u", group="g")
    s.snapshot(NOW, FLEET, {})
    status, _ = render_status(s.records["ns/b"], NOW)
    assert status["fifoDue"] == "2026-01-01T00:01:30Z"
    unstamped, _ = render_status(
        upsert(store(), aijob("x", "u-x", "2026-01-01T00:00:00Z"), user="u", group="g"), NOW
    )
    assert "fifoDue" not in unstamped

    again = store()
    upsert(again, aijob("b", "uid-b", "2026-01-01T00:00:10Z", status), user="u", group="g")
    assert again.records["ns/b"].fifo_due_s == NOW + 30
    snap = again.snapshot(NOW + 500, FLEET, {})
    assert [j.fifo_due_s for j in snap.pending] == [NOW + 30]


def test_calibrated_due_times_scale_by_what_succeeded_jobs_ran():
    """A job stamped with a 60 s estimate that succeeded after 180 s makes the ratio 3:
    later jobs' calibrated due times put the backlog ahead at three times its estimate.
    Both stamps and the basis go to the status and come back after a restart."""
    from cpn.api import constants as k

    s = store()
    upsert(s, aijob("done", "uid-d", "2026-01-01T00:00:00Z"), user="u", group="g")
    s.snapshot(NOW, FLEET, {})
    done = s.records["ns/done"]
    assert (done.fifo_calibrated_due_s, done.fifo_basis_s) == (NOW, 60.0)  # nothing learnt
    done.phase, done.actual_s = k.PHASE_SUCCEEDED, 180.0
    upsert(s, aijob("a", "uid-a", "2026-01-01T00:00:10Z"), user="u", group="g")
    upsert(s, aijob("b", "uid-b", "2026-01-01T00:00:20Z"), user="u", group="g")
    s.snapshot(NOW + 100, FLEET, {})
    b = s.records["ns/b"]
    assert (b.fifo_due_s, b.fifo_calibrated_due_s, b.fifo_basis_s) == (
        NOW + 100 + 60 / 2,
        NOW + 100 + 3 * 60 / 2,
        60.0,
    )
    status, _ = render_status(b, NOW + 100)
    assert status["fifoDueCalibrated"] == "2026-01-01T00:04:10Z"
    assert status["fifoBasisSeconds"] == 60.0

    again = store()
    upsert(again, aijob("b", "uid-b", "2026-01-01T00:00:20Z", status), user="u", group="g")
    (job,) = again.snapshot(NOW + 500, FLEET, {}).pending
    assert (job.fifo_due_s, job.fifo_calibrated_due_s, job.fifo_basis_s) == (
        NOW + 130,
        NOW + 190,
        60.0,
    )
