"""Fencing of attempts (cpn.core.fence): only the member Job carrying the record's current
attempt and token speaks for it; a stale one's result is named for an Event; the
checkpoint convention's directories; which jobs wait for a lost member."""

from __future__ import annotations

import pytest

from cpn.core.fence import (
    AT_MOST_ONCE,
    AVAILABILITY,
    checkpoint_env,
    fence_attempt,
    fence_token,
    holds_for_member,
    job_result,
    judge_report,
    member_timeout,
    next_fence,
)


def test_the_current_attempt_and_token_are_believed() -> None:
    assert judge_report(2, "2-ab", 2, "2-ab", "Succeeded").current


def test_an_earlier_attempt_reporting_success_is_ignored_and_named() -> None:
    """The partition case: attempt 1 comes back from a lost member with Succeeded while
    attempt 2 runs elsewhere."""
    told = judge_report(2, "2-cd", 1, "1-ab", "Succeeded", "a-1 on member-a")
    assert not told.current
    assert told.stale_result == "Succeeded"
    assert "a-1 on member-a reported Succeeded for attempt 1 (fence 1-ab)" in told.message
    assert "current attempt is 2 (fence 2-cd)" in told.message


def test_the_same_number_with_another_token_is_not_believed() -> None:
    told = judge_report(2, "2-cd", 2, "2-ab", "Failed", "a-2 on member-b")
    assert (told.current, told.stale_result) == (False, "Failed")


def test_a_stale_job_still_running_asks_for_no_event() -> None:
    told = judge_report(2, "2-cd", 1, "1-ab", "")
    assert (told.current, told.stale_result, told.message) == (False, "", "")


@pytest.mark.parametrize(("fence", "job_fence"), [("", "2-ab"), ("2-ab", ""), ("", "")])
def test_without_a_token_on_either_side_the_number_decides(fence: str, job_fence: str) -> None:
    """A status written before tokens existed, or a Job created before them."""
    assert judge_report(2, fence, 2, job_fence).current
    assert not judge_report(2, fence, 1, job_fence).current


def test_a_reused_attempt_number_keeps_its_token_and_a_new_one_gets_a_new_token() -> None:
    """A create that got no answer is not counted, and its number is used again: the Job
    may exist under that name, so the token must be the same."""
    first = next_fence("", 1, "aa")
    assert first == fence_token(1, "aa") == "1-aa"
    assert next_fence(first, 1, "bb") == "1-aa"
    assert next_fence(first, 2, "bb") == "2-bb"
    assert (fence_attempt("12-x"), fence_attempt(""), fence_attempt("x-1")) == (12, 0, 0)


def test_each_attempt_writes_its_own_directory_and_reads_earlier_ones_newest_first() -> None:
    first = checkpoint_env("/ckpt/", "u1", 1)
    assert first == {
        "CPN_CHECKPOINT_ROOT": "/ckpt/u1",
        "CPN_CHECKPOINT_DIR": "/ckpt/u1/attempt-1",
        "CPN_RESUME_DIRS": "",
    }
    third = checkpoint_env("/ckpt", "u1", 3)
    assert third["CPN_CHECKPOINT_DIR"] == "/ckpt/u1/attempt-3"
    assert third["CPN_RESUME_DIRS"] == "/ckpt/u1/attempt-2:/ckpt/u1/attempt-1"


def test_the_member_timeout_is_the_policys_when_it_sets_one_else_the_operators() -> None:
    assert member_timeout(15.0, 60.0) == (15.0, "policy retry.member_timeout_s")
    value, source = member_timeout(None, 60.0)
    assert value == 60.0 and "CPN_MEMBER_TIMEOUT_S" in source


def test_only_non_checkpointing_jobs_wait_and_only_under_at_most_once() -> None:
    assert holds_for_member(AT_MOST_ONCE, checkpoints=False)
    assert not holds_for_member(AT_MOST_ONCE, checkpoints=True)
    assert not holds_for_member(AVAILABILITY, checkpoints=False)


@pytest.mark.parametrize(
    ("conditions", "want"),
    [
        ([{"type": "Complete", "status": "True"}], "Succeeded"),
        ([{"type": "SuccessCriteriaMet", "status": "True"}], "Succeeded"),
        ([{"type": "Failed", "status": "True"}], "Failed"),
        ([{"type": "FailureTarget", "status": "True"}], "Failed"),
        ([{"type": "Complete", "status": "False"}], ""),
        ([], ""),
    ],
)
def test_a_jobs_result_comes_from_its_true_conditions(conditions: list, want: str) -> None:
    assert job_result({"conditions": conditions}) == want
