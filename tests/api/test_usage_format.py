"""A day's usage as a ConfigMap and back."""

from __future__ import annotations

import pytest

from cpn.api.usage import UsageFormatError, configmap, decode, encode
from cpn.core.accounting import DayUsage, Total, merged
from tests.core.test_accounting import DAY, rec


def test_a_day_reads_back_as_written() -> None:
    day, _ = merged(DayUsage(DAY), [rec("a"), rec("b", outcome="preempted", domain="batch")])
    day = DayUsage(day.day, day.runs, {("g", "u", "K80", ""): Total(120.5, 2)})
    body = configmap(day, "cpn-system", "42")
    assert body["metadata"]["name"] == f"cpn-usage-{DAY}"
    assert body["metadata"]["resourceVersion"] == "42"
    assert decode("cm", body["data"]) == day


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"format": "1", "day": "yesterday"}, "'day' is 'yesterday'"),
        ({"format": "9", "day": DAY}, "format '9'"),
        ({"format": "1", "day": DAY, "runs": "[[1, 2]]"}, "a run row has 2 columns"),
        ({"format": "1", "day": DAY, "runs": "{not json"}, "usage ConfigMap cm-x"),
        ({"format": "1", "day": DAY, "totals": '[["g","u","K80","",1]]'}, "a total row has 5"),
    ],
)
def test_a_broken_day_is_refused_naming_its_configmap(data: dict[str, str], message: str) -> None:
    with pytest.raises(UsageFormatError, match="usage ConfigMap cm-x") as err:
        decode("cm-x", data)
    assert message in str(err.value)


def test_rows_are_one_a_line() -> None:
    day, _ = merged(DayUsage(DAY), [rec("a"), rec("b")])
    assert encode(day)["runs"].count("\n") == 3
