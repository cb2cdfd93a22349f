"""Kubernetes quantities read by cpn's own parser (``cpn.api.quantity``)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity as client_parse

from cpn.api.quantity import parse_quantity

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E"]
SUFFIXES += ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "E-2", "e+1"]


@given(
    sign=st.sampled_from(["", "+", "-"]),
    whole=st.text("0123456789", min_size=1, max_size=8),
    fraction=st.none() | st.text("0123456789", max_size=6),
    suffix=st.sampled_from(SUFFIXES),
)
def test_every_quantity_of_the_grammar_reads_as_the_kubernetes_client_reads_it(
    sign: str, whole: str, fraction: str | None, suffix: str
) -> None:
    """On the API server's grammar, the value is the client library's, exactly."""
    text = sign + whole + ("" if fraction is None else "." + fraction) + suffix
    assert parse_quantity(text) == client_parse(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", "0.5"), ("16Gi", "17179869184"), (".5", "0.5"), ("2e3", "2000"), ("1E", "1e18")],
)
def test_examples(text: str, value: str) -> None:
    """A few quantities as admins write them, with their values."""
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize(
    "text", ["1K", "1ki", "NaN", "inf", "1 Gi", "", "e3", "1e", "Gi", "1.2.3", "0x10"]
)
def test_what_the_api_server_refuses_is_refused(text: str) -> None:
    """Forms outside the grammar (some the client library lets through) raise ValueError."""
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


def test_a_huge_exponent_stays_huge_and_cheap() -> None:
    """``9e999999999`` is read as a value past every limit, without a billion-digit number."""
    assert parse_quantity("9e999999999") > Decimal("1e999")
    assert 0 < parse_quantity("9e-999999999") < Decimal("1e-999")


def test_numbers_are_taken_as_they_are_but_not_booleans_or_nan() -> None:
    """YAML numbers are quantities; a boolean or a non-finite float is not."""
    assert parse_quantity(4) == 4
    assert parse_quantity(2.5) == Decimal("2.5")
    for bad in (True, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="quantity"):
            parse_quantity(bad)
