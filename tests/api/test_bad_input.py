"""The bad-input corpus (tests/data/bad/) through the real parsers, and fuzzing of the AIJob reader.

Each corpus file starts with a comment saying what it tries, then one or more
``# expect: PATH | TEXT`` lines: the parser must refuse the file with an error at
exactly PATH whose message contains TEXT. PATH ``yaml`` means the YAML loader
itself refuses the text; an empty PATH is the whole document. The same files are
applied to a real hub by tests/e2e/test_bad_input.py.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpn.api.aijob import KNOWN_KEYS, parse_aijob
from cpn.api.policy import parse_policy
from cpn.api.yamlsafe import YamlError, load_yaml
from cpn.cli.validate import main as validate_main
from cpn.core.errors import CpnError, FieldError, FormulaError, InvalidSpec, PolicyError
from cpn.core.formula import compile_formula

BAD = Path(__file__).resolve().parents[1] / "data" / "bad"
CRD = Path(__file__).resolve().parents[2] / "crds" / "aijob.yaml"
AIJOBS = sorted((BAD / "aijobs").glob("*.yaml"))
POLICIES = sorted((BAD / "policies").glob("*.yaml"))
#: Every file takes milliseconds (10,000 nested brackets included: the loader refuses the
#: 65th while scanning). The bound catches a parser that loops or blows up, with room for a
#: loaded CI machine.
TIME_LIMIT_S = 2.0


def expectations(path: Path) -> list[tuple[str, str]]:
    """The ``(field path, message part)`` pairs a corpus file lists."""
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# expect:"):
            field, _, text = line.removeprefix("# expect:").partition(" | ")
            found.append((field.strip(), text.strip()))
    return found


def _timed(fn: Callable[[], Any]) -> tuple[BaseException | None, float]:
    start = time.perf_counter()
    try:
        fn()
    except Exception as err:
        return err, time.perf_counter() - start
    return None, time.perf_counter() - start


def _check(errors: list[FieldError], expected: list[tuple[str, str]], name: str) -> None:
    for field, text in expected:
        at_path = [e.message for e in errors if e.path == field]
        assert any(text in m for m in at_path), (
            f"{name}: no error at {field!r} containing {text!r}; got {[str(e) for e in errors]}"
        )


def _load(path: Path) -> tuple[Any, YamlError | None]:
    try:
        return load_yaml(path.read_text(encoding="utf-8")), None
    except YamlError as err:
        return None, err


def test_corpus_is_large_and_every_file_says_what_it_expects() -> None:
    """The corpus covers both parsers, and every file names at least one expected error."""
    assert len(AIJOBS) >= 30 and len(POLICIES) >= 30
    for path in [*AIJOBS, *POLICIES]:
        assert expectations(path), f"{path.name} has no '# expect:' line"


@pytest.mark.parametrize("path", AIJOBS, ids=lambda p: p.name)
def test_bad_aijob_is_refused_with_its_specific_message(path: Path) -> None:
    """Every bad AIJob is refused by the loader or parse_aijob with the listed field and text."""
    expected = expectations(path)
    start = time.perf_counter()
    doc, yaml_error = _load(path)
    if yaml_error is not None:
        assert [f for f, _ in expected] == ["yaml"], f"{path.name}: YAML refused: {yaml_error}"
        assert expected[0][1] in str(yaml_error)
        assert yaml_error.line > 0, "a YAML refusal gives the line"
        return
    error, _ = _timed(lambda: parse_aijob(doc, user="alice", group="vision"))
    assert time.perf_counter() - start < TIME_LIMIT_S
    assert isinstance(error, InvalidSpec), f"{path.name}: {error!r}"
    _check(error.errors, expected, path.name)


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_bad_policy_is_refused_with_its_specific_message(path: Path) -> None:
    """Every bad policy is refused by parse_policy, at the listed field, with the listed text."""
    expected = expectations(path)
    error, seconds = _timed(lambda: parse_policy(path.read_text(encoding="utf-8")))
    assert seconds < TIME_LIMIT_S
    assert isinstance(error, PolicyError), f"{path.name}: {error!r}"
    if [f for f, _ in expected] == ["yaml"]:
        (only,) = error.errors
        assert only.path == "" and only.message.startswith("not accepted as YAML")
        assert expected[0][1] in only.message
        return
    _check(error.errors, expected, path.name)


@pytest.mark.parametrize(
    "path",
    [p for p in POLICIES if any(f.endswith("formula") for f, _ in expectations(p))],
    ids=lambda p: p.name,
)
def test_bad_formula_is_refused_by_the_formula_compiler_itself(path: Path) -> None:
    """The corpus's formulas, given straight to compile_formula, raise FormulaError quickly."""
    doc = load_yaml(path.read_text(encoding="utf-8"))
    formula = doc["formula"] if "formula" in doc else doc["levels"][0]["formula"]
    (text,) = [t for f, t in expectations(path) if f.endswith("formula")]
    error, seconds = _timed(lambda: compile_formula(formula))
    assert seconds < TIME_LIMIT_S
    assert isinstance(error, FormulaError), f"{path.name}: {error!r}"
    assert text.removeprefix("invalid formula: ") in str(error) or "a string" in text


#: ``cpn validate`` reads YAML as kubectl does (YAML 1.1: ``yes`` is true), so it agrees with
#: what the hub will store; the operator's own loader refuses it.
VALIDATE_ACCEPTS = {"suspend-yes.yaml"}


@pytest.mark.parametrize("path", [*AIJOBS, *POLICIES], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cpn_validate_refuses_the_corpus_offline(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cpn validate FILE` exits 1 on every corpus file (but what kubectl reads as valid)."""
    code = validate_main([str(path)])
    out = capsys.readouterr().out
    assert code == (0 if path.name in VALIDATE_ACCEPTS else 1), out


def test_reader_keys_match_the_crd_schema() -> None:
    """parse_aijob knows exactly the fields the CRD defines (so neither refuses the other's)."""
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]["properties"]
    assert set(KNOWN_KEYS["spec"]) == set(spec)
    for section in ("resources", "model", "data", "image"):
        assert set(KNOWN_KEYS[f"spec.{section}"]) == set(spec[section]["properties"]), section
    assert set(KNOWN_KEYS["spec.inputs[]"]) == set(spec["inputs"]["items"]["properties"])


def test_unknown_but_plain_model_is_accepted_as_unseen() -> None:
    """A new model with a plain name is not an error: the predictor treats it as unseen."""
    doc = copy.deepcopy(VALID)
    doc["spec"]["model"]["name"] = "my-new-model-7b"
    assert parse_aijob(doc, user="u", group="g").model == "my-new-model-7b"


# --- fuzzing: random structures and mutations of a valid AIJob ----------------------------

VALID: dict[str, Any] = {
    "apiVersion": "cpn.io/v1alpha1",
    "kind": "AIJob",
    "metadata": {
        "name": "ok",
        "namespace": "team-a",
        "creationTimestamp": "2026-01-01T00:00:00Z",
    },
    "spec": {
        "queue": "default",
        "priority": 1,
        "workers": 2,
        "suspend": False,
        "checkpoint": True,
        "runtimeEstimateSeconds": 600,
        "resources": {
            "gpus": 2,
            "gpuShare": 1.0,
            "gpuMemoryGiB": 16,
            "cpu": "500m",
            "memory": "32Gi",
            "gpuTypes": ["v100", "A100-80GB"],
        },
        "model": {
            "name": "resnet50",
            "datasetSamples": 1000,
            "epochs": 3,
            "batchSize": 64,
            "steps": 10,
            "features": {"lr": 0.1},
        },
        "data": {"cluster": "member-a", "sizeGB": 10},
        "image": {"sizeGB": 2},
        "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}},
    },
    "status": {"attempts": 1, "notBefore": "2026-01-01T00:01:00Z"},
}

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "1e999", "-1", "999999Ti", "NaN", "A100", "\u202e", "0x10", "1.5Gi"]),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*prefix, index))
    return out


_ALL_PATHS = _paths(VALID)[1:]


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """The valid AIJob with 1-4 places replaced by random values or removed."""
    doc = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(_ALL_PATHS))
        parent: Any = doc
        try:
            for part in path[:-1]:
                parent = parent[part]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(_JSON)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation changed the shape
    return doc


def _parse_or_field_error(doc: Any) -> None:
    try:
        parse_aijob(doc, user="u", group="g")
    except InvalidSpec as err:
        assert err.errors, "an InvalidSpec lists its errors"
        for error in err.errors:
            assert error.message
            assert error.path or not isinstance(doc, dict) or "mapping" in error.message
    # Anything else propagates and fails the test.


def test_the_valid_fuzzing_seed_parses() -> None:
    """The document the mutations start from is itself valid (else the fuzzing proves little)."""
    job = parse_aijob(VALID, user="u", group="g")
    assert job.gpus == 4 and job.user_estimate_s == 600


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(doc=mutated())
def test_fuzz_mutated_aijob_parses_or_names_the_field(doc: dict[str, Any]) -> None:
    """A valid AIJob with random parts replaced parses or raises InvalidSpec with field paths."""
    _parse_or_field_error(doc)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.one_of(_JSON, st.fixed_dictionaries({"spec": _JSON, "metadata": _JSON})))
def test_fuzz_random_structures_never_raise_anything_else(doc: Any) -> None:
    """Random nested JSON (top level or as spec/metadata) never raises a non-project error."""
    _parse_or_field_error(doc)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(doc=mutated())
def test_fuzz_yaml_text_of_mutated_aijob_loads_and_parses_or_errs(doc: dict[str, Any]) -> None:
    """Through YAML text and the safe loader: only YamlError or InvalidSpec, never a crash."""
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:
        return  # PyYAML cannot write it: nothing to load
    try:
        loaded = load_yaml(text)
    except YamlError:
        return
    except CpnError:  # pragma: no cover - load_yaml raises only YamlError
        raise
    _parse_or_field_error(loaded)
