"""GPU-hour accounting as pure values: records, idempotence, roll-up and queries."""

from __future__ import annotations

import pytest

from cpn.core.accounting import (
    DAY_S,
    KIND_PREEMPTED,
    KIND_RUN,
    Archive,
    DayUsage,
    Total,
    UsageRecord,
    archived,
    by_group_user,
    day_start_s,
    merged,
    rolled_up,
    run_record,
    summed_by,
    usage_rows,
)

DAY = "2026-11-27"
T0 = day_start_s(DAY)  # midnight UTC


def rec(
    uid: str = "u1",
    *,
    attempt: int = 1,
    outcome: str = "succeeded",
    start: float = 3600.0,
    end: float = 7200.0,
    gpus: float = 2,
    user: str = "ada",
    group: str = "vision",
    gpu_type: str = "A100-80GB",
    domain: str = "",
) -> UsageRecord:
    made = run_record(
        uid=uid,
        attempt=attempt,
        outcome=outcome,
        namespace="ns",
        name=f"job-{uid}",
        user=user,
        group=group,
        domain=domain,
        gpu_type=gpu_type,
        gpus=gpus,
        cluster="north",
        start_s=T0 + start,
        end_s=T0 + end,
    )
    assert made is not None
    return made


def test_a_run_counts_its_gpus_times_its_time() -> None:
    record = rec(start=0, end=1800, gpus=4)
    assert record.gpu_s == 4 * 1800 and record.kind == KIND_RUN and record.day == DAY


def test_a_preempted_run_is_a_fragment_keyed_apart_from_the_attempt_after() -> None:
    fragment = rec(outcome="preempted", attempt=1)
    resumed = rec(outcome="succeeded", attempt=2)
    assert fragment.kind == KIND_PREEMPTED and fragment.key != resumed.key


def test_a_run_that_never_held_gpus_is_not_recorded() -> None:
    common = {
        "uid": "u",
        "attempt": 1,
        "outcome": "retried",
        "namespace": "n",
        "name": "j",
        "user": "a",
        "group": "g",
        "domain": "",
        "gpu_type": "K80",
        "cluster": "c",
    }
    assert run_record(**common, gpus=1, start_s=0.0, end_s=T0) is None  # never started
    assert run_record(**common, gpus=1, start_s=T0, end_s=T0) is None  # no time
    assert run_record(**common, gpus=0, start_s=T0, end_s=T0 + 5) is None  # no GPUs


def test_an_unknown_outcome_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown outcome 'exploded'"):
        rec(outcome="exploded")


def test_seeing_a_run_twice_counts_it_once() -> None:
    first, added = merged(DayUsage(DAY), [rec("a"), rec("b")])
    again, added_again = merged(first, [rec("a"), rec("c")])
    assert [r.uid for r in added] == ["a", "b"]
    assert [r.uid for r in added_again] == ["c"]
    assert again.gpu_s() == 3 * rec().gpu_s


def test_a_run_of_another_day_is_refused() -> None:
    with pytest.raises(ValueError, match="not 2026-11-26"):
        merged(DayUsage("2026-11-26"), [rec()])


def test_runs_past_the_retention_are_rolled_up_without_losing_gpu_hours() -> None:
    day, _ = merged(
        DayUsage(DAY),
        [
            rec("a", end=7200),
            rec("b", end=7300, user="bob"),
            rec("c", end=7400),
            rec("d", end=50000),
        ],
    )
    rolled = rolled_up(day, before_s=T0 + 10000, budget_bytes=10**6, row_bytes=300)
    assert set(rolled.runs) == {rec("d").key}
    assert rolled.totals == {
        ("vision", "ada", "A100-80GB", ""): Total(
            rec("a", end=7200).gpu_s + rec("c", end=7400).gpu_s, 2
        ),
        ("vision", "bob", "A100-80GB", ""): Total(rec("b", end=7300).gpu_s, 1),
    }
    assert rolled.gpu_s() == pytest.approx(day.gpu_s())
    assert rolled_up(rolled, before_s=T0 + 10000, budget_bytes=10**6, row_bytes=300) is rolled


def test_a_day_over_its_byte_budget_rolls_up_its_oldest_runs_early() -> None:
    day, _ = merged(DayUsage(DAY), [rec(str(i), end=4000 + i) for i in range(10)])
    rolled = rolled_up(day, before_s=T0, budget_bytes=5 * 100, row_bytes=100)
    assert len(rolled.runs) + len(rolled.totals) <= 5
    assert sorted(r.uid for r in rolled.runs.values()) == ["6", "7", "8", "9"]  # the newest
    assert rolled.gpu_s() == pytest.approx(day.gpu_s())


def test_a_window_counts_the_part_of_each_run_inside_it() -> None:
    day, _ = merged(DayUsage(DAY), [rec("a", start=0, end=3600, gpus=2)])
    rows = usage_rows([day], since_s=T0 + 1800, until_s=T0 + 2700)
    assert [(r.user, r.gpu_s, r.runs) for r in rows] == [("ada", 2 * 900.0, 1)]
    assert usage_rows([day], since_s=T0 + 3600) == []


def test_a_rolled_up_day_counts_whole_when_it_overlaps_the_window() -> None:
    old = DayUsage("2026-11-01", totals={("g", "u", "K80", "batch"): Total(7200.0, 3)})
    inside = usage_rows([old], since_s=day_start_s("2026-11-01") + DAY_S / 2)
    outside = usage_rows([old], since_s=day_start_s("2026-11-02"))
    assert [(r.gpu_s, r.runs, r.domain) for r in inside] == [(7200.0, 3, "batch")]
    assert outside == []


def test_rows_filter_by_group_and_user_and_sum_by_a_dimension() -> None:
    day, _ = merged(
        DayUsage(DAY),
        [
            rec("a", gpus=1, user="ada", group="vision", gpu_type="K80"),
            rec("b", gpus=2, user="bob", group="vision", gpu_type="A100-80GB"),
            rec("c", gpus=4, user="cy", group="nlp", gpu_type="K80"),
        ],
    )
    assert {r.user for r in usage_rows([day], group="vision")} == {"ada", "bob"}
    assert [r.user for r in usage_rows([day], user="cy")] == ["cy"]
    rows = usage_rows([day])
    assert summed_by(rows, "gpu-type") == {"K80": 5 * 3600.0, "A100-80GB": 2 * 3600.0}
    assert summed_by(rows, "group") == {"nlp": 4 * 3600.0, "vision": 3 * 3600.0}
    assert by_group_user(rows) == {
        ("vision", "ada"): 3600.0,
        ("vision", "bob"): 7200.0,
        ("nlp", "cy"): 4 * 3600.0,
    }
    with pytest.raises(ValueError, match="cannot group by 'colour'"):
        summed_by(rows, "colour")


def test_a_day_is_archived_into_its_month_once() -> None:
    day, _ = merged(DayUsage(DAY), [rec("a", gpus=1), rec("b", gpus=2, user="bob")])
    once = archived(Archive(), day)
    assert once.days == {DAY}
    assert once.months == {
        ("2026-11", "vision", "ada", "A100-80GB", ""): Total(3600.0, 1),
        ("2026-11", "vision", "bob", "A100-80GB", ""): Total(7200.0, 1),
    }
    assert archived(once, day) == once  # again: nothing added
    assert archived(once, day, forget_before="2026-12-01").days == frozenset()


def test_an_archived_month_counts_whole_when_it_overlaps_the_window() -> None:
    archive = archived(Archive(), merged(DayUsage(DAY), [rec("a", gpus=1)])[0])
    assert [r.gpu_s for r in usage_rows([], archive=archive, since_s=T0)] == [3600.0]
    assert usage_rows([], archive=archive, since_s=day_start_s("2026-12-01")) == []
    assert usage_rows([], archive=archive, group="nlp") == []
