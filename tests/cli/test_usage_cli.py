"""``cpn usage`` without a cluster: its dates and ages, its document and its table."""

from __future__ import annotations

import pytest

from cpn.cli.usage import main, parse_when, render, report
from cpn.core.accounting import DayUsage, day_start_s, merged
from tests.core.test_accounting import DAY, T0, rec


def test_dates_times_and_ages() -> None:
    now = day_start_s(DAY) + 7200
    assert parse_when("2026-11-27", now) == day_start_s(DAY)
    assert parse_when("2026-11-27T01:00:00Z", now) == day_start_s(DAY) + 3600
    assert parse_when("90m", now) == now - 5400
    assert parse_when("2d", now) == now - 2 * 86400
    with pytest.raises(ValueError, match="'last week' is not a date"):
        parse_when("last week", now)


def test_a_bad_date_is_refused_by_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--since", "yesterday-ish"])
    assert done.value.code == 2
    assert "'yesterday-ish' is not a date" in capsys.readouterr().err


def test_the_report_sums_by_the_key_asked() -> None:
    day, _ = merged(
        DayUsage(DAY),
        [rec("a", gpus=1, user="ada"), rec("b", gpus=3, user="bob", gpu_type="K80")],
    )
    doc = report([day], since_s=T0, until_s=None, group="vision", user=None, by="gpu-type")
    assert doc["totalGpuHours"] == 4.0 and doc["runs"] == 2
    assert doc["gpuHoursBy"] == {"K80": 3.0, "A100-80GB": 1.0}
    table = render(doc)
    assert table.splitlines()[0].split() == ["GPU-TYPE", "GPU-HOURS"]
    assert table.endswith("total: 4.00 GPU-hours in 2 run(s)")
