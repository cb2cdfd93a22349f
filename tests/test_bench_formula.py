"""bench/bench_formula.py: every engine it times computes the same scores as cpn's own."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from bench import bench_formula as bench
from cpn.core.formula import compile_formula

COLS = bench.columns(200, seed=1)


def test_strict_cel_spelling_scores_like_cpns_loose_one() -> None:
    """cpn reads the bench's strict-CEL text (double literals, a comparison as the condition)
    with the same meaning as the spelling its own language allows (int literals, a number as
    the condition), so the libraries are timed on the formula cpn users write."""
    loose = (
        "1000000 * priority + 1000 * (user_level + group_level) + aging * wait_s"
        " - (unseen ? 1.5 : 1) * runtime_s / max(1, log1p(gpus)) - 0.1 * service_s / 3600"
        " - 1000 * clamp(quota_used, 0, 1) + (attempts > 0 && wait_s > 3600 ? 500 : 0)"
        " - sqrt(gpu_time_s) + min(user_estimate_s, runtime_s) / 1000"
    )
    np.testing.assert_array_equal(
        compile_formula(bench.FORMULAS["long"]).evaluate(COLS),
        compile_formula(loose).evaluate(COLS),
    )


@pytest.mark.parametrize("engine", list(bench.LIBRARIES))
@pytest.mark.parametrize("formula", list(bench.FORMULAS))
def test_library_scores_agree_with_cpn(engine: str, formula: str) -> None:
    """Each installed CEL library gives cpn's scores for each benchmark formula (rtol 1e-9)."""
    if importlib.util.find_spec(bench.LIBRARIES[engine]) is None:
        pytest.skip(f"{engine} is not installed (pip install -e '.[formula-bench]')")
    text = bench.FORMULAS[formula]
    names = sorted(compile_formula(text).names)
    scores = bench.scorer(engine, text, names)(COLS)
    np.testing.assert_allclose(scores, compile_formula(text).evaluate(COLS), rtol=1e-9)


def test_a_missing_library_is_reported_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine whose module is absent gives an error entry instead of stopping the run."""
    monkeypatch.setitem(bench.LIBRARIES, "cel-python", "no_such_module_for_cpn_tests")
    result = bench.measure("cel-python", bench.FORMULAS["default"], COLS, 2, 1.0)
    assert result == {"error": "not installed (cel-python)"}
    assert bench.probe("cel-python") == {"error": "not installed (cel-python)"}


def test_bench_prints_one_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    """A small run of cpn alone prints one JSON object with a timed, agreeing entry per
    formula and cpn's refusals of the non-numeric probes."""
    assert bench.main(["--rows", "50", "--repeats", "2", "--engines", "cpn"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["results"]) == {f"cpn/{name}" for name in bench.FORMULAS}
    for entry in doc["results"].values():
        assert entry["repeats"] == 2 and entry["agrees"] and entry["finite"]
        assert entry["p50_ms"] <= entry["p99_ms"]
    probes = doc["probes"]["cpn"]
    for label in ("string", "list-macro", "nested-macros", "attribute", "regex"):
        assert probes[label].startswith("refused at compile"), label
    assert probes["int-division"] == "runs: 3.5"


def test_restricted_cel_refuses_every_probe() -> None:
    """cel-expr-python with macros and string functions excluded and a double result required
    refuses every probe at compile time, as cpn does (what docs/policy.md calls made safe)."""
    if importlib.util.find_spec("cel_expr_python") is None:
        pytest.skip("cel-expr-python is not installed (pip install -e '.[formula-bench]')")
    outcome = bench.probe("cel-expr-python-restricted")
    assert set(outcome) == set(bench.PROBES)
    refused = {label for label, text in outcome.items() if text.startswith("refused at compile")}
    assert refused == set(bench.PROBES)
