"""``cpn validate``: table cases from tests/data/validate, exit codes, CEL rules, YAML safety."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from cpn.api import validation
from cpn.api.crdschema import CEL_RULES, cel_rules, load_crds
from cpn.api.policy import parse_policy_configmap
from cpn.api.validation import Validator
from cpn.cli.main import main as cpn_main
from cpn.cli.validate import main
from cpn.core.errors import PolicyError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "validate"
GOOD = sorted((DATA / "good").glob("*.yaml"))
BAD = sorted((DATA / "bad").glob("*.yaml"))
CRDS = load_crds(ROOT / "crds")
_EXPECT = re.compile(r"^# expect: (\S+) \| (\d+) \| (.*?) \| (.+)$")


def check_text(text: str, *, ignore_unknown: bool = False) -> list[validation.Problem]:
    validator = Validator(CRDS, ignore_unknown=ignore_unknown)
    validator.validate_text(text, "x.yaml")
    return validator.problems


def check_file(path: Path) -> list[validation.Problem]:
    validator = Validator(CRDS)
    validator.validate_path(str(path))
    return validator.problems


def expectations(path: Path) -> list[tuple[str, int, str, str]]:
    """The ``# expect: DOC | LINE | PATH | MESSAGE`` lines at the top of a bad case."""
    found = []
    for line in path.read_text().splitlines():
        match = _EXPECT.match(line)
        if match:
            doc, number, field, message = match.groups()
            found.append((doc, int(number), field.strip(), message.strip()))
    return found


def doc_index(problem: validation.Problem) -> str:
    match = re.match(r"document (\d+)", problem.document)
    return match.group(1) if match else "-"


def aijob(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "resources": {"gpus": 1},
        "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}},
    }
    return {
        "apiVersion": "cpn.io/v1alpha1",
        "kind": "AIJob",
        "metadata": {"name": "j"},
        "spec": {**base, **spec},
    }


# --- table cases -------------------------------------------------------------------------


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_case_has_no_problem(path: Path) -> None:
    """Every file under good/ validates cleanly."""
    assert [str(p) for p in check_file(path)] == []


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_case_reports_exactly_its_expected_problems(path: Path) -> None:
    """Every file under bad/ yields exactly its ``# expect:`` problems: document, line, path."""
    expected = expectations(path)
    assert expected, f"{path.name} lists no '# expect:' line"
    problems = check_file(path)
    got = sorted((doc_index(p), p.line, p.path) for p in problems)
    assert got == sorted((doc, line, field) for doc, line, field, _ in expected), [
        str(p) for p in problems
    ]
    for doc, line, field, message in expected:
        messages = [
            p.message for p in problems if (doc_index(p), p.line, p.path) == (doc, line, field)
        ]
        assert any(message in m for m in messages), (field, message, messages)


def test_problem_line_names_file_document_kind_name_and_path() -> None:
    """A problem prints as FILE:LINE: document N (Kind namespace/name): path: message."""
    text = yaml.safe_dump({**aijob(workers=0), "metadata": {"name": "j", "namespace": "team-a"}})
    (problem,) = check_text(text)
    line = str(problem)
    assert line.startswith("x.yaml:")
    assert "document 1 (AIJob team-a/j): spec.workers: must be at least 1" in line


# --- the command ---------------------------------------------------------------------------


def test_exit_0_when_all_valid(capsys: pytest.CaptureFixture[str]) -> None:
    """Valid files (a directory included) exit 0 and print no problem on stdout."""
    assert main([str(DATA / "good"), str(ROOT / "examples" / "aijobs")]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "all valid" in captured.err


def test_exit_1_with_one_line_per_problem(capsys: pytest.CaptureFixture[str]) -> None:
    """An invalid file exits 1 and prints one stdout line per problem, each naming the file."""
    path = DATA / "bad" / "aijob-bounds.yaml"
    assert main(["-q", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(expectations(path))
    assert all(line.startswith(f"{path}:") for line in out)


def test_cpn_cli_dispatches_validate(capsys: pytest.CaptureFixture[str]) -> None:
    """``cpn validate`` is registered with the top-level command."""
    assert cpn_main(["validate", "-q", str(DATA / "bad" / "empty.yaml")]) == 1
    assert "no YAML documents" in capsys.readouterr().out


def test_reads_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """``-`` reads the manifest from standard input."""
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(aijob(priority=5000))))
    assert main(["-q", "-"]) == 1
    assert capsys.readouterr().out.startswith("<stdin>:")


def test_missing_file_is_a_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that cannot be read is reported (exit 1), and the others are still checked."""
    missing = tmp_path / "nope.yaml"
    assert main(["-q", str(missing), str(DATA / "bad" / "empty.yaml")]) == 1
    out = capsys.readouterr().out
    assert f"{missing}: cannot be read" in out
    assert "no YAML documents" in out


def test_missing_crds_is_a_usage_error(tmp_path: Path, capsys: Any) -> None:
    """Without the CRDs there is no schema to check against: exit 2 with a hint."""
    assert main(["--crds", str(tmp_path / "none"), str(DATA / "good")]) == 2
    assert "--crds" in capsys.readouterr().err


def test_file_size_is_capped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file larger than the cap is reported, not read."""
    monkeypatch.setattr(validation, "MAX_FILE_BYTES", 100)
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(aijob()) * 3)
    assert main(["-q", str(big)]) == 1
    assert "more than the 100 read" in capsys.readouterr().out


def test_ignore_unknown_skips_other_kinds_only() -> None:
    """--ignore-unknown drops unknown kinds but still reports the bad AIJob of the same file."""
    path = DATA / "bad" / "mixed.yaml"
    validator = Validator(CRDS, ignore_unknown=True)
    validator.validate_path(str(path))
    assert sorted(p.path for p in validator.problems) == [
        "",
        "apiVersion",
        "items[0].spec.resources.gpus",
    ]


# --- the CRD's CEL rules, by hand ------------------------------------------------------------


def test_every_cel_rule_of_the_crds_has_a_hand_implementation() -> None:
    """The CEL rules in crds/ and CEL_RULES are the same set (a new rule needs code here)."""
    in_crds = {rule for crd in CRDS.values() for rule in cel_rules(crd.schema)}
    assert in_crds == set(CEL_RULES)


SHARE = (
    "!has(self.resources.gpuShare) || self.resources.gpuShare >= 1.0 || self.resources.gpus == 1"
)
DATA_RULE = (
    "!has(self.data) || !has(self.data.sizeGB) || self.data.sizeGB == 0.0 || has(self.data.cluster)"
)

INPUTS_RULE = "!has(self.inputs) || self.inputs.all(x, self.inputs.exists_one(y, y.name == x.name))"


@pytest.mark.parametrize(
    ("rule", "spec", "holds"),
    [
        (SHARE, {"resources": {"gpus": 4}}, True),
        (SHARE, {"resources": {"gpus": 4, "gpuShare": 1.0}}, True),
        (SHARE, {"resources": {"gpus": 1, "gpuShare": 0.25}}, True),
        (SHARE, {"resources": {"gpus": 2, "gpuShare": 0.25}}, False),
        (SHARE, {"resources": {"gpus": 0, "gpuShare": 0.5}}, False),
        (DATA_RULE, {}, True),
        (DATA_RULE, {"data": {}}, True),
        (DATA_RULE, {"data": {"sizeGB": 0}}, True),
        (DATA_RULE, {"data": {"sizeGB": 3, "cluster": ""}}, True),
        (DATA_RULE, {"data": {"sizeGB": 3, "cluster": "m"}}, True),
        (DATA_RULE, {"data": {"sizeGB": 3}}, False),
        (DATA_RULE, {"data": {"cluster": "m"}}, True),
        (INPUTS_RULE, {}, True),
        (INPUTS_RULE, {"inputs": []}, True),
        (INPUTS_RULE, {"inputs": [{"name": "a"}, {"name": "b"}]}, True),
        (INPUTS_RULE, {"inputs": [{"name": "a"}, {"name": "b"}, {"name": "a"}]}, False),
    ],
)
def test_cel_rule_by_hand(rule: str, spec: dict[str, Any], holds: bool) -> None:
    """Each hand-written rule holds exactly where the CEL expression does."""
    assert CEL_RULES[rule](spec) is holds


def test_cel_rules_run_only_on_structurally_valid_objects() -> None:
    """With a schema error the CEL rules are not evaluated (as the API server does)."""
    problems = check_text(yaml.safe_dump(aijob(workers=0, data={"sizeGB": 3})))
    assert [p.path for p in problems] == ["spec.workers"]


def test_unimplemented_rule_is_reported_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CEL rule with no hand implementation is named on stderr, not silently passed."""
    crds = tmp_path / "crds"
    shutil.copytree(ROOT / "crds", crds)
    aijob_crd = crds / "aijob.yaml"
    aijob_crd.write_text(aijob_crd.read_text().replace("self.resources.gpus == 1", "true"))
    assert main(["--crds", str(crds), "-q", str(DATA / "good" / "aijobs.yaml")]) == 0
    assert "CEL rule not checked offline" in capsys.readouterr().err


# --- AIJob details ---------------------------------------------------------------------------


def test_nulls_are_pruned_like_the_api_server() -> None:
    """A null optional field is dropped; a null required one is then missing."""
    assert check_text(yaml.safe_dump(aijob(queue=None, priority=None))) == []
    (problem,) = check_text(yaml.safe_dump(aijob(resources={"gpus": None})))
    assert (problem.path, problem.message) == ("spec.resources.gpus", "required value")


def test_status_is_ignored() -> None:
    """A status written in a manifest is dropped by the API (status subresource): not checked."""
    body = {**aijob(), "status": {"phase": "Nonsense", "position": "first"}}
    assert check_text(yaml.safe_dump(body)) == []


def test_quoted_yes_stays_a_string_for_kubectl() -> None:
    """Only plain scalars are YAML 1.1 booleans to kubectl; a quoted "yes" is a string."""
    text = yaml.safe_dump(aijob(queue="yes"))  # safe_dump quotes it
    assert "'yes'" in text
    assert check_text(text) == []
    (problem,) = check_text(text.replace("'yes'", "yes"))
    assert problem.path == "spec.queue" and "boolean" in problem.message


def test_cluster_scoped_kind_refuses_namespace_and_bad_name() -> None:
    """MemberCluster has no namespace; names are DNS subdomains."""
    body = {
        "apiVersion": "cpn.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": "UPPER", "namespace": "x"},
        "spec": {"kubeconfigSecret": {"name": "s"}},
    }
    assert sorted(p.path for p in check_text(yaml.safe_dump(body))) == [
        "metadata.name",
        "metadata.namespace",
    ]


def test_per_gpu_type_hint_names_the_canonical_type() -> None:
    """A GPU-type key that is an alias gets its canonical spelling as a hint."""
    (message,) = validation.per_gpu_type_problems('{"a": {"v100-32gb": "1s"}}')
    assert "write 'V100-32GB'" in message


# --- policies --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", sorted((ROOT / "examples" / "policies").glob("*.yaml")), ids=lambda p: p.name
)
def test_example_policies_pass_bare_and_in_a_configmap(path: Path) -> None:
    """The shipped policies are valid as bare documents and as the operator's ConfigMap."""
    assert check_file(path) == []
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cpn-policy", "namespace": "cpn-system"},
        "data": {"policy.yaml": path.read_text()},
    }
    assert check_text(yaml.safe_dump(configmap)) == []


@pytest.mark.parametrize(
    "policy",
    ["ordering: nope\n", "levels: 3\n", "retry: {max_attempts: 0}\n", "a: &x 1\nb: *x\n", "x: 1\n"],
)
def test_configmap_verdict_is_the_operators(policy: str) -> None:
    """validate refuses a policy ConfigMap exactly when the operator's reader does."""
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"policy.yaml": policy}}
    with pytest.raises(PolicyError) as caught:
        parse_policy_configmap(configmap)
    problems = check_text(yaml.safe_dump(configmap))
    assert sorted(p.path for p in problems) == sorted(
        f'data["policy.yaml"].{e.path}' if e.path else 'data["policy.yaml"]'
        for e in caught.value.errors
    )


def test_configmap_policy_size_cap_is_the_operators() -> None:
    """A policy text above the reader's 256 KiB cap is refused at data["policy.yaml"]."""
    text = "# " + "x" * (256 * 1024) + "\nname: big\n"
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"policy.yaml": text}}
    (problem,) = check_text(yaml.safe_dump(configmap, width=1 << 30))
    assert problem.path == 'data["policy.yaml"]' and "bytes" in problem.message


def test_configmap_data_values_must_be_strings() -> None:
    """ConfigMap data values are strings (the API refuses others), checked before the policy."""
    text = "apiVersion: v1\nkind: ConfigMap\ndata:\n  policy.yaml: {ordering: fifo}\n"
    (problem,) = check_text(text)
    assert problem.path == 'data["policy.yaml"]' and "string" in problem.message


def test_yaml_bomb_is_refused() -> None:
    """The policy tests' alias bomb is refused by the same loader."""
    problems = check_file(ROOT / "tests" / "data" / "policies" / "bomb.yaml")
    assert len(problems) == 1 and "not accepted as YAML" in problems[0].message


def test_documents_before_a_yaml_error_are_still_checked() -> None:
    """A broken document stops the file, but the documents before it are checked and reported."""
    text = yaml.safe_dump(aijob(workers=0)) + "---\na: [\n"
    problems = check_text(text)
    assert [p.path for p in problems] == ["spec.workers", ""]
    assert "not accepted as YAML" in problems[1].message


def test_deep_nesting_is_refused() -> None:
    """Nesting deeper than the loader's limit is refused, not recursed into."""
    problems = check_text("a: " + "[" * 100 + "]" * 100 + "\n")
    assert len(problems) == 1 and "nesting deeper" in problems[0].message


DOMAIN_WARNINGS = """
name: typo
levels:
  - {name: all, queues: [debug]}
quotas: {groups: {vision: {gpus: 8}}}
domains:
  interactive: {clusters: [north], queues: [debug, interative], groups: [vision, visoin]}
"""


def test_a_domain_binding_a_name_the_policy_names_nowhere_else_is_a_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    validator = Validator(CRDS)
    validator.validate_text(DOMAIN_WARNINGS, "p.yaml")
    assert validator.problems == []
    assert [(w.line, w.path, w.message.split(":")[0]) for w in validator.warnings] == [
        (7, "domains.interactive.groups", "warning"),
        (7, "domains.interactive.queues", "warning"),
    ]
    assert "group visoin is named nowhere else" in validator.warnings[0].message
    assert "queue interative is named nowhere else" in validator.warnings[1].message
    path = tmp_path / "p.yaml"
    path.write_text(DOMAIN_WARNINGS)
    assert main([str(path)]) == 0  # warnings do not fail the check
    out, err = capsys.readouterr()
    assert "domains.interactive.groups: warning: group visoin" in out
    assert "the operator checks at run time against the members' nodes" in err
    assert "1 document(s) checked: all valid, 2 warnings" in err


def test_a_policy_without_domains_gets_no_domain_note(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: plain\n")
    assert main([str(path)]) == 0
    assert "run time" not in capsys.readouterr().err
