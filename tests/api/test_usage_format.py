"""A day's usage as a ConfigMap and back."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cpn.api.usage import (
    ARCHIVE,
    SLOTS,
    UsageFormatError,
    configmap,
    configmap_name,
    decode,
    decode_archive,
    encode,
    encode_archive,
    names,
)
from cpn.core.accounting import Archive, DayUsage, Total, archived, day_of, day_start_s, merged
from tests.core.test_accounting import DAY, rec

ROOT = Path(__file__).resolve().parents[2]


def test_a_day_reads_back_as_written() -> None:
    day, _ = merged(DayUsage(DAY), [rec("a"), rec("b", outcome="preempted", domain="batch")])
    day = DayUsage(day.day, day.runs, {("g", "u", "K80", ""): Total(120.5, 2)})
    body = configmap(configmap_name(DAY), encode(day), "cpn-system", "42")
    assert body["metadata"]["labels"]["cpn.io/usage"] == "day"
    assert body["metadata"]["resourceVersion"] == "42"
    assert decode("cm", body["data"]) == day


def test_days_take_a_fixed_ring_of_names() -> None:
    """A day's slot comes round again after SLOTS days; every name is in names()."""
    first = day_start_s(DAY)
    later = day_of(first + SLOTS * 86400)
    assert configmap_name(DAY) == configmap_name(later)
    assert configmap_name(DAY) != configmap_name(day_of(first + 86400))
    assert {configmap_name(day_of(first + i * 86400)) for i in range(SLOTS)} | {ARCHIVE} == set(
        names()
    )


def test_the_archive_reads_back_as_written() -> None:
    day, _ = merged(DayUsage(DAY), [rec("a")])
    archive = archived(Archive(), day)
    assert decode_archive(encode_archive(archive)) == archive
    assert decode_archive({}) == Archive()
    with pytest.raises(UsageFormatError, match="cpn-usage-archive: a month row has 2"):
        decode_archive({"format": "1", "months": '[["2026-11", 1]]'})


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


def test_the_operator_may_update_exactly_the_usage_store() -> None:
    """The Role names every ConfigMap the usage store writes (update cannot be granted on
    a name pattern)."""
    docs = yaml.safe_load_all((ROOT / "manifests" / "common" / "rbac.yaml").read_text())
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "cpn-operator"]
    updatable = {
        name
        for rule in role["rules"]
        if "update" in rule["verbs"] and rule["resources"] == ["configmaps"]
        for name in rule.get("resourceNames") or ["*"]
    }
    assert set(names()) <= updatable and "*" not in updatable
