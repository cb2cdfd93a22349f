"""The priority-formula language: grammar, semantics, limits and safety."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cpn.core.errors import FormulaError
from cpn.core.formula import (
    BIG,
    EXP_MAX_ARG,
    FACTORS,
    FUNCTIONS,
    MAX_CHARS,
    MAX_DEPTH,
    MAX_NODES,
    compile_formula,
)
from cpn.core.policy import DEFAULT_FORMULA

GPUS = np.array([1.0, 2.0, 8.0])
RUNTIME = np.array([3600.0, 60.0, 0.0])
WAIT = np.array([0.0, 100.0, 7200.0])
PRIORITY = np.array([0.0, 1.0, -2.0])


def columns() -> dict[str, np.ndarray]:
    """Three jobs with every factor filled (some zero, some negative)."""
    cols = {name: np.zeros(3) for name in FACTORS}
    cols.update(gpus=GPUS, runtime_s=RUNTIME, wait_s=WAIT, priority=PRIORITY)
    cols["gpu_time_s"] = GPUS * RUNTIME
    cols["aging"] = np.full(3, 4.0)
    return cols


VALID = [
    pytest.param("42", [42.0] * 3, id="an-int-literal-is-the-same-score-for-every-job"),
    pytest.param("1.5e3 + .5", [1500.5] * 3, id="doubles-with-exponent-and-leading-dot"),
    pytest.param("0x10", [16.0] * 3, id="hex-int-literal"),
    pytest.param("gpus", list(GPUS), id="a-factor-reads-its-column"),
    pytest.param("size", list(GPUS), id="size-is-an-alias-of-gpus"),
    pytest.param("2 + 3 * gpus", list(2 + 3 * GPUS), id="multiplication-binds-tighter"),
    pytest.param("(2 + 3) * gpus", list(5 * GPUS), id="parentheses-group"),
    pytest.param("10 - 4 - 3", [3.0] * 3, id="subtraction-is-left-associative"),
    pytest.param("-gpus * 2", list(-2 * GPUS), id="unary-minus"),
    pytest.param("--gpus", list(GPUS), id="double-negation"),
    pytest.param("gpus / 2", list(GPUS / 2), id="true-division-not-integer-division"),
    pytest.param("gpus / (gpus - 1)", [0.0, 2.0, 8.0 / 7.0], id="division-by-zero-is-zero"),
    pytest.param("7 % 3 + gpus % 0", [1.0] * 3, id="modulo-and-modulo-by-zero-is-zero"),
    pytest.param("-7 % 3", [-1.0] * 3, id="modulo-keeps-the-dividends-sign"),
    pytest.param("gpus > 1", [0.0, 1.0, 1.0], id="comparison-gives-0-or-1"),
    pytest.param("gpus == 2", [0.0, 1.0, 0.0], id="equality"),
    pytest.param("gpus != 2", [1.0, 0.0, 1.0], id="inequality"),
    pytest.param("gpus <= 2", [1.0, 1.0, 0.0], id="less-or-equal"),
    pytest.param("gpus >= 2", [0.0, 1.0, 1.0], id="greater-or-equal"),
    pytest.param("gpus < 2", [1.0, 0.0, 0.0], id="less-than"),
    pytest.param("(gpus > 1) * 10", [0.0, 10.0, 10.0], id="booleans-are-numbers"),
    pytest.param("gpus > 1 && priority > 0", [0.0, 1.0, 0.0], id="and"),
    pytest.param("gpus > 4 || priority > 0", [0.0, 1.0, 1.0], id="or"),
    pytest.param("!(gpus > 1)", [1.0, 0.0, 0.0], id="not"),
    pytest.param("!priority", [1.0, 0.0, 0.0], id="not-of-a-number-tests-zero"),
    pytest.param("true + false", [1.0] * 3, id="true-and-false-literals"),
    pytest.param("gpus > 1 ? wait_s : -1", [-1.0, 100.0, 7200.0], id="ternary-per-job"),
    pytest.param(
        "gpus == 1 ? 1 : gpus == 2 ? 2 : 3", [1.0, 2.0, 3.0], id="ternary-is-right-associative"
    ),
    pytest.param("1 || 0 ? 5 : 6", [5.0] * 3, id="ternary-binds-loosest"),
    pytest.param("min(gpus, 4, 3)", [1.0, 2.0, 3.0], id="min-of-several"),
    pytest.param("max(gpus)", list(GPUS), id="max-of-one"),
    pytest.param("clamp(gpus, 2, 4)", [2.0, 2.0, 4.0], id="clamp"),
    pytest.param("abs(priority)", [0.0, 1.0, 2.0], id="abs"),
    pytest.param("sqrt(gpus)", list(np.sqrt(GPUS)), id="sqrt"),
    pytest.param("sqrt(-gpus)", [0.0] * 3, id="sqrt-of-a-negative-is-zero"),
    pytest.param("log(gpus)", list(np.log(GPUS)), id="natural-log"),
    pytest.param("log(runtime_s)", [math.log(3600), math.log(60), 0.0], id="log-of-zero-is-zero"),
    pytest.param("log(priority)", [0.0, 0.0, 0.0], id="log-of-a-negative-is-zero"),
    pytest.param("log1p(wait_s)", list(np.log1p(WAIT)), id="log1p"),
    pytest.param("log1p(-1 - gpus)", [0.0] * 3, id="log1p-below-minus-one-is-zero"),
    pytest.param("exp(priority)", list(np.exp(PRIORITY)), id="exp"),
    pytest.param("exp(1000 * gpus)", [math.exp(EXP_MAX_ARG)] * 3, id="exp-is-clamped"),
    pytest.param("1e308 * gpus * 10", [BIG] * 3, id="overflow-becomes-the-largest-float"),
    pytest.param("-1e308 * gpus * 10", [-BIG] * 3, id="negative-overflow"),
    pytest.param(
        "1e308 * gpus * 10 - 1e308 * gpus * 10", [0.0] * 3, id="overflow-minus-overflow-is-zero"
    ),
    pytest.param(
        "1000000 * priority + aging * wait_s - runtime_s",
        list(1e6 * PRIORITY + 4 * WAIT - RUNTIME),
        id="the-default-formula-shape",
    ),
    pytest.param("gpus // a comment\n * 2", list(2 * GPUS), id="line-comments-and-newlines"),
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_valid_formula_scores(text: str, expected: list[float]) -> None:
    """A valid formula gives the expected float64 score per job."""
    scores = compile_formula(text).evaluate(columns())
    assert scores.dtype == np.float64
    assert scores.shape == (3,)
    np.testing.assert_allclose(scores, expected, rtol=1e-12)


INVALID = [
    pytest.param("gpus.count", 5, "attribute", id="attribute-access"),
    pytest.param("job.gpus", 4, "attribute", id="attribute-access-on-an-unknown-name"),
    pytest.param("__import__(gpus)", 1, "not an allowed function", id="dunder-import-call"),
    pytest.param("eval(1)", 1, "not an allowed function", id="eval-call"),
    pytest.param("gpus + 'x'", 8, "strings", id="single-quoted-string"),
    pytest.param('"os"', 1, "strings", id="double-quoted-string"),
    pytest.param("gpus[0]", 5, "indexing", id="indexing"),
    pytest.param("[1, 2]", 1, "lists", id="list-literal"),
    pytest.param("{1: 2}", 1, "maps", id="map-literal"),
    pytest.param("gpu + 1", 1, "did you mean 'gpus'", id="unknown-name-with-hint"),
    pytest.param("1 + waiting", 5, "unknown name 'waiting'", id="unknown-name-mid-text"),
    pytest.param("size(gpus)", 1, "a factor, not a function", id="calling-a-factor"),
    pytest.param("has(gpus)", 1, "not an allowed function", id="cel-macro-has"),
    pytest.param("min", 1, "is a function", id="function-without-call"),
    pytest.param("clamp(gpus, 1)", 1, "takes 3 argument", id="wrong-arity"),
    pytest.param("log()", 1, "takes 1 argument", id="no-argument"),
    pytest.param("1 < gpus < 3", 10, "chained", id="chained-comparison"),
    pytest.param("gpus = 1", 6, "==", id="single-equals"),
    pytest.param("gpus & 1", 6, "&&", id="single-ampersand"),
    pytest.param("gpus +", 7, "end of formula", id="dangling-operator"),
    pytest.param("(gpus", 6, "expected ')'", id="unclosed-parenthesis"),
    pytest.param("gpus)", 5, "found ')'", id="extra-parenthesis"),
    pytest.param("gpus 2", 6, "expected an operator", id="missing-operator"),
    pytest.param("(gpus)(1)", 7, "only the listed functions", id="calling-an-expression"),
    pytest.param("gpus > 1 ? 2", 13, "expected ':'", id="ternary-without-else"),
    pytest.param("null", 1, "not supported", id="null-literal"),
    pytest.param("gpus in 1", 6, "not supported", id="in-operator"),
    pytest.param("1e999", 1, "too large", id="infinite-literal"),
    pytest.param("gpus ** 2", 7, "unexpected '*'", id="power-operator"),
    pytest.param("gpus × 2", 6, "unexpected character", id="unicode-operator"),
    pytest.param("", 1, "empty", id="empty"),
    pytest.param("  // only a comment", 1, "empty", id="only-a-comment"),
    pytest.param("(" * 40 + "1" + ")" * 40, MAX_DEPTH + 1, "nests", id="deep-parentheses"),
    pytest.param("-" * 500 + "1", MAX_DEPTH + 1, "nests", id="deep-unary-chain"),
    pytest.param("1" + " + 1" * 200, None, "nodes", id="too-many-nodes"),
    pytest.param("1 +" * 340 + " 1", MAX_CHARS + 1, "longer than", id="too-long"),
]


@pytest.mark.parametrize(("text", "column", "fragment"), INVALID)
def test_invalid_formula_names_the_column(text: str, column: int | None, fragment: str) -> None:
    """A formula outside the grammar is a FormulaError saying what and where."""
    with pytest.raises(FormulaError) as caught:
        compile_formula(text)
    assert fragment in str(caught.value)
    if column is not None:
        assert caught.value.column == column
    else:
        assert 1 <= caught.value.column <= len(text)


def test_non_string_formula_is_a_formula_error() -> None:
    """A formula that is not text (a number from YAML) is refused, not a TypeError."""
    with pytest.raises(FormulaError, match="must be a string"):
        compile_formula(42)  # type: ignore[arg-type]


def test_names_lists_the_factors_read_with_aliases_resolved() -> None:
    """``names`` is what the caller must supply; ``size`` reads ``gpus``."""
    formula = compile_formula("size * runtime_s + max(wait_s, 1) + 2")
    assert formula.names == frozenset({"gpus", "runtime_s", "wait_s"})


def test_default_formula_compiles() -> None:
    """The policy's default formula is in the language and uses only known factors."""
    assert compile_formula(DEFAULT_FORMULA).names <= FACTORS.keys()


def test_compiled_formulas_are_cached_by_text() -> None:
    """Compiling the same text twice returns the same compiled object."""
    text = "gpus * 3 + wait_s"
    assert compile_formula(text) is compile_formula(text)


def test_missing_factor_is_a_key_error_naming_it() -> None:
    """Evaluating without a column the formula reads is a caller bug that names the factor."""
    with pytest.raises(KeyError, match="wait_s"):
        compile_formula("wait_s + gpus").evaluate({"gpus": GPUS})


def test_constant_formula_scores_every_row() -> None:
    """A formula with no factors still gives one score per job."""
    scores = compile_formula("2 * 3").evaluate({"gpus": np.zeros(5)})
    np.testing.assert_array_equal(scores, np.full(5, 6.0))


def test_no_jobs_gives_no_scores() -> None:
    """Zero-length columns give a zero-length result."""
    assert compile_formula("gpus + 1").evaluate({"gpus": np.zeros(0)}).shape == (0,)


def test_non_finite_inputs_are_cleaned() -> None:
    """NaN inputs count as 0 and infinite inputs as the largest float; scores stay finite."""
    scores = compile_formula("runtime_s + wait_s").evaluate(
        {"runtime_s": np.array([np.nan, np.inf, -np.inf]), "wait_s": np.ones(3)}
    )
    np.testing.assert_array_equal(scores, [1.0, BIG, -BIG])


def test_evaluate_does_not_modify_the_callers_columns() -> None:
    """Cleaning happens on copies; the caller's arrays are untouched."""
    runtime = np.array([np.nan, 1.0])
    compile_formula("runtime_s * 2").evaluate({"runtime_s": runtime})
    assert np.isnan(runtime[0])


def test_integer_and_boolean_columns_are_accepted() -> None:
    """Columns of ints or bools are read as float64."""
    scores = compile_formula("gpus + unseen").evaluate(
        {"gpus": np.array([1, 2]), "unseen": np.array([True, False])}
    )
    np.testing.assert_array_equal(scores, [2.0, 2.0])


def test_every_function_and_factor_is_documented() -> None:
    """FACTORS gives a meaning for each name and the functions are the whitelist."""
    assert all(meaning.strip() for meaning in FACTORS.values())
    assert {"min", "max", "log", "log1p", "sqrt", "exp", "abs", "clamp"} == FUNCTIONS


def test_limits_accept_a_formula_just_inside() -> None:
    """The limits are bounds, not off by one: depth 32, 256 nodes and 1000 characters pass."""
    deep = "(" * (MAX_DEPTH - 1) + "gpus" + ")" * (MAX_DEPTH - 1)
    assert compile_formula(deep).names == {"gpus"}
    many = "1" + " + 1" * ((MAX_NODES - 1) // 2)
    assert compile_formula(many).evaluate({}).tolist() == [float((MAX_NODES + 1) // 2)]
    long = "gpus" + " " * (MAX_CHARS - 4)
    assert compile_formula(long).names == {"gpus"}


# --- properties ------------------------------------------------------------------

_ARITH_FACTORS = sorted(FACTORS)
_LITERALS = st.sampled_from(["0", "1", "2.5", "1e300", "1e-300", "0.0", "3600", "1e308"])


def _formulas() -> st.SearchStrategy[str]:
    leaves = st.one_of(st.sampled_from(_ARITH_FACTORS), _LITERALS)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        binary = st.tuples(
            inner, st.sampled_from(["+", "-", "*", "/", "%", "<", "==", "&&", "||"]), inner
        ).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
        unary = st.tuples(
            st.sampled_from(["-", "!", "log", "log1p", "sqrt", "exp", "abs"]), inner
        ).map(lambda t: f"{t[0]}({t[1]})")
        many = st.tuples(st.sampled_from(["min", "max", "clamp"]), inner, inner, inner).map(
            lambda t: f"{t[0]}({t[1]}, {t[2]}, {t[3]})"
        )
        ternary = st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})")
        return st.one_of(binary, unary, many, ternary)

    return st.recursive(leaves, extend, max_leaves=12)


_VALUES = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=300, deadline=None)
@given(
    text=_formulas(),
    data=hnp.arrays(np.float64, (len(FACTORS), 4), elements=_VALUES),
)
def test_random_formulas_give_finite_scores(text: str, data: np.ndarray) -> None:
    """Any formula of the grammar scores any finite input with finite floats, silently."""
    formula = compile_formula(text)
    cols = {name: data[i] for i, name in enumerate(FACTORS)}
    scores = formula.evaluate(cols)
    assert scores.shape == (4,)
    assert scores.dtype == np.float64
    assert np.isfinite(scores).all()


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(list("gpus_wait()+-*/%<>=!&|?:,.'[]{} 0189e")), max_size=60
    )
)
def test_random_text_compiles_or_raises_formula_error(text: str) -> None:
    """Arbitrary text never raises anything but FormulaError when compiled."""
    try:
        formula = compile_formula(text)
    except FormulaError as error:
        assert 1 <= error.column <= len(text) + 1
        return
    scores = formula.evaluate({name: np.ones(2) for name in FACTORS})
    assert np.isfinite(scores).all()
