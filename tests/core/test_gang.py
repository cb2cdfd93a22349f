"""The all-or-nothing start of an attempt's workers (cpn.core.gang) and the count of
running workers read from a member Job's status (cpn.api.jobs.workers_running)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cpn.api.jobs import workers_running
from cpn.core.gang import Gang, judge_start

T0 = 1_000.0  # the attempt's dispatch


def test_three_of_four_wait_until_the_deadline_then_the_attempt_is_removed() -> None:
    waiting = judge_start(4, 3, T0, T0 + 119.9, 120.0)
    assert waiting.action is Gang.WAIT and waiting.deadline_s == T0 + 120.0
    assert waiting.message.startswith("3 of 4 workers running; all must run within 120 s")
    removed = judge_start(4, 3, T0, T0 + 120.0, 120.0)
    assert removed.action is Gang.REMOVE
    assert removed.message == "3 of 4 workers running after 120 s: attempt removed, requeued"


def test_all_workers_running_is_running_even_past_the_deadline() -> None:
    """The count decides first: a gang seen complete late (an event delayed past the
    deadline) runs; it is not removed for being judged late."""
    for now in (T0, T0 + 500.0):
        verdict = judge_start(4, 4, T0, now, 120.0)
        assert verdict.action is Gang.RUNNING and verdict.message == "all 4 workers running"


def test_a_single_worker_is_a_gang_of_one() -> None:
    assert judge_start(1, 0, T0, T0 + 10, 300.0).action is Gang.WAIT
    assert judge_start(1, 1, T0, T0 + 10, 300.0).action is Gang.RUNNING
    assert judge_start(1, 0, T0, T0 + 300, 300.0).action is Gang.REMOVE
    # A malformed count of workers is read as one, and a negative count as none.
    assert judge_start(0, 1, T0, T0, 300.0).action is Gang.RUNNING
    assert judge_start(2, -1, T0, T0 + 300, 300.0).message.startswith("0 of 2")


@given(
    wanted=st.integers(1, 512),
    running=st.integers(0, 600),
    elapsed=st.floats(0, 1e5),
    timeout=st.floats(1, 1e5),
)
def test_a_partial_gang_is_never_running_and_a_complete_one_never_removed(
    wanted: int, running: int, elapsed: float, timeout: float
) -> None:
    verdict = judge_start(wanted, running, T0, T0 + elapsed, timeout)
    if running >= wanted:
        assert verdict.action is Gang.RUNNING
    elif elapsed >= timeout:
        assert verdict.action is Gang.REMOVE
    else:
        assert verdict.action is Gang.WAIT


@pytest.mark.parametrize(
    ("status", "running"),
    [
        ({}, 0),  # not seen by the job controller yet
        ({"active": 4, "ready": 3}, 3),  # what the bed reports: 3 bound, 1 Pending
        ({"active": 4, "ready": 4}, 4),
        ({"active": 3, "ready": 3, "succeeded": 1}, 4),  # a quick worker already finished
        ({"active": 4, "ready": 0}, 0),  # created, none ready: Pending pods are active
        ({"active": 4}, 4),  # a cluster before 1.24 has no ready: active is all it says
    ],
)
def test_workers_running_counts_ready_and_succeeded_pods(
    status: dict[str, Any], running: int
) -> None:
    assert workers_running(status) == running
