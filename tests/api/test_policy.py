"""Reading the admins' policy document: shapes, mistakes named by field, YAML safety."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpn.api.policy import KNOWN_KEYS, parse_policy, parse_policy_configmap
from cpn.api.yamlsafe import MAX_BYTES
from cpn.core.errors import PolicyError
from cpn.core.policy import DataPolicy, Limit, QueuePolicy

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "policies"
EXAMPLES = sorted((ROOT / "examples" / "policies").glob("*.yaml"))


def errors_of(doc: Any) -> dict[str, str]:
    """Parse ``doc`` expecting a PolicyError; return its messages by path."""
    with pytest.raises(PolicyError) as caught:
        parse_policy(doc)
    return {error.path: error.message for error in caught.value.errors}


# --- valid documents ---------------------------------------------------------------


@pytest.mark.parametrize("doc", ["", "# only a comment\n", {}, "---\n"], ids=repr)
def test_empty_document_is_the_default_policy(doc: Any) -> None:
    """An empty document gives every default of QueuePolicy."""
    policy = parse_policy(doc)
    assert dataclasses.replace(policy, version="") == QueuePolicy()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_parses(path: Path) -> None:
    """The shipped examples are valid policies named after their file."""
    policy = parse_policy(path.read_text())
    assert policy.name == path.stem


def test_default_example_spells_out_the_defaults() -> None:
    """examples/policies/default.yaml equals the defaults of core/policy.py (keep in sync)."""
    policy = parse_policy((ROOT / "examples" / "policies" / "default.yaml").read_text())
    assert dataclasses.replace(policy, version="") == QueuePolicy()


def test_every_key_maps_to_its_field() -> None:
    """A document setting every key to a non-default value lands in the right fields."""
    policy = parse_policy((DATA / "full.yaml").read_text())
    assert (policy.name, policy.ordering, policy.formula) == ("full", "sjf", "priority + wait_s")
    small, rest = policy.levels
    assert small.groups == {"team-a", "team-b"} and small.users == {"alice"}
    assert small.queues == {"debug"} and small.min_priority == 2
    assert (small.min_gpus, small.max_gpus, small.formula) == (0.5, 4.0, "wait_s - runtime_s")
    assert rest.name == "rest" and rest.formula is None
    assert dict(policy.user_levels) == {"alice": 2.5}
    assert dict(policy.group_levels) == {"team-a": -1.0}
    assert (policy.aging.rate, policy.aging.max_wait_s) == (0.5, None)
    team_a = policy.quotas.groups["team-a"]
    assert policy.quotas.lending is True
    assert team_a.limit == Limit(gpus=16.0, per_type={"V100-32GB": 8.0, "A100-80GB": 4.0})
    assert team_a.default_user == Limit(gpus=2.0)
    assert team_a.users["alice"] == Limit(gpus=8.0, per_type={"V100-32GB": 8.0})
    assert policy.quotas.groups["team-b"].limit == Limit(gpus=None, per_type={"K80": 10.0})
    reservation = policy.reservation
    assert (reservation.enabled, reservation.min_gpus) == (False, 32.0)
    assert (reservation.max_reservations, reservation.backfill) == (0, False)
    assert policy.node_cpu_ceiling is None
    placement = policy.placement
    assert (placement.method, placement.affinity, placement.window) == ("greedy", "gpu-type", 7)
    assert (placement.wait_weight, placement.transfer_weight) == (2.0, 0.0)
    assert (placement.runtime_weight, placement.time_limit_s) == (0.25, 0.5)
    assert placement.first_of_model_alone is True
    assert (policy.preemption.enabled, policy.preemption.min_priority_gap) == (True, 0)
    assert policy.preemption.restart_cost_s == 0.0
    assert (policy.preemption.checkpoint_interval_s, policy.preemption.min_run_s) == (300.0, 45.0)
    assert (policy.retry.max_attempts, policy.retry.backoff_s) == (1, 0.0)
    assert policy.retry.start_timeout_s == 45.0
    assert (policy.retry.member_lost, policy.retry.member_timeout_s) == ("at-most-once", 15.0)
    bench = policy.benchmarks
    assert (bench.enabled, bench.max_age_days, bench.models) == (True, 7.5, ("resnet50",))
    assert (bench.budget_s, bench.image) == (60.0, "registry.example/cpn-workloads:0.2")
    assert dict(policy.namespaces) == {"alice-dev": ("alice", "team-a"), "shared": ("", "team-b")}
    assert policy.data == DataPolicy(
        locality=False, cache_gb={"east": 250.0}, default_cache_gb=1000.0
    )


def test_numbers_are_floats_and_gpu_types_canonical() -> None:
    """Integers in number fields become floats; a GPU type alias becomes the one type it
    names, as nodes report it (a quota keyed otherwise would match no job)."""
    quota = {"gpus": 4, "per_type": {"h100-80gb": 2, "2080ti": 1, "a100-80gb": 3}}
    policy = parse_policy({"quotas": {"groups": {"g": quota}}})
    limit = policy.quotas.groups["g"].limit
    assert isinstance(limit.gpus, float)
    assert dict(limit.per_type) == {"H100-80GB": 2.0, "RTX2080TI": 1.0, "A100-80GB": 3.0}


def test_text_gets_a_content_hash_version_and_explicit_version_wins() -> None:
    """Without a version, text is versioned by its hash; an explicit version is kept."""
    first = parse_policy("name: a\n").version
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", first)
    assert parse_policy("name: b\n").version != first
    assert parse_policy("name: a\n", version="17").version == "17"
    assert parse_policy({"name": "a"}, version="18").version == "18"


def test_policies_are_immutable() -> None:
    """The parsed maps are read-only: nobody can change a policy in place."""
    policy = parse_policy((DATA / "full.yaml").read_text())
    with pytest.raises(TypeError):
        policy.user_levels["mallory"] = 100.0  # type: ignore[index]


# --- mistakes, each named by its field ------------------------------------------------

GROUP = "quotas:\n  groups:\n    team-a:\n"
MISTAKES = [
    pytest.param("formla: gpus", "formla", "did you mean 'formula'", id="typo-in-a-top-key"),
    pytest.param("ordering: sjff", "ordering", "did you mean 'sjf'", id="unknown-ordering"),
    pytest.param("formula: 'wait_s +'", "formula", "column 9", id="formula-syntax-column"),
    pytest.param("formula: 3", "formula", "a string", id="formula-not-text"),
    pytest.param(
        "levels:\n  - {name: a, groups: [x]}\n  - {name: b, users: [y]}\n"
        "  - {name: c, formula: 'job.gpus'}",
        "levels[2].formula",
        "attribute access (.) is not allowed (at column 4)",
        id="level-formula-attribute-access",
    ),
    pytest.param(
        "levels:\n  - {name: a, formula: '__import__(gpus)'}",
        "levels[0].formula",
        "not an allowed function",
        id="level-formula-import",
    ),
    pytest.param("levels:\n  - {groups: [x]}", "levels[0].name", "required", id="level-no-name"),
    pytest.param(
        "levels:\n  - {name: a, users: [x]}\n  - {name: a}",
        "levels[1].name",
        "also levels[0]",
        id="duplicate-level-name",
    ),
    pytest.param(
        "levels:\n  - {name: a, groups: team-a}", "levels[0].groups", "list", id="groups-not-a-list"
    ),
    pytest.param(
        "levels:\n  - {name: a, groups: [x, 7]}",
        "levels[0].groups[1]",
        "integer",
        id="group-name-not-a-string",
    ),
    pytest.param(
        "levels:\n  - {name: a, min_gpus: 8, max_gpus: 2}",
        "levels[0].min_gpus",
        "more than max_gpus",
        id="min-gpus-above-max-gpus",
    ),
    pytest.param(
        "levels:\n  - {name: everything}\n  - {name: never, groups: [x]}",
        "levels[1]",
        "never used",
        id="level-after-a-catch-all",
    ),
    pytest.param(
        "levels:\n  - {name: a, min_priority: 1.5}",
        "levels[0].min_priority",
        "integer",
        id="float-priority",
    ),
    pytest.param("levels: {a: 1}", "levels", "list", id="levels-not-a-list"),
    pytest.param(
        GROUP + "      gpus: 16\n      users:\n        alice: {gpus: 32}",
        "quotas.groups.team-a.users.alice.gpus",
        "ceiling",
        id="user-quota-above-group-quota",
    ),
    pytest.param(
        GROUP
        + "      per_type: {V100-32GB: 4}\n      users:\n        alice: {per_type: {v100-32gb: 8}}",
        "quotas.groups.team-a.users.alice.per_type.V100-32GB",
        "ceiling",
        id="user-per-type-above-group-per-type",
    ),
    pytest.param(
        GROUP + "      gpus: 4\n      default_user: {gpus: 5}",
        "quotas.groups.team-a.default_user.gpus",
        "ceiling",
        id="default-user-above-group",
    ),
    pytest.param(
        GROUP + "      gpus: -2", "quotas.groups.team-a.gpus", "at least 0", id="negative-quota"
    ),
    pytest.param(
        GROUP + "      gpus: '8'",
        "quotas.groups.team-a.gpus",
        "without quotes",
        id="quoted-number",
    ),
    pytest.param(
        GROUP + "      per_type: {v100-32gb: 4, V100-32GB: 2}",
        "quotas.groups.team-a.per_type.V100-32GB",
        "same GPU type",
        id="gpu-type-twice-by-case",
    ),
    pytest.param(
        GROUP + "      per_type: {A100: 4}",
        "quotas.groups.team-a.per_type.A100",
        "names 3 GPU types (A100-40GB, A100-80GB, A100-80GB-PCIE)",
        id="gpu-family-as-quota-key",
    ),
    pytest.param(
        GROUP + "      users:\n        alice: {gpus: 2, cpus: 4}",
        "quotas.groups.team-a.users.alice.cpus",
        "did you mean 'gpus'",
        id="unknown-key-in-user-quota",
    ),
    pytest.param(
        "quotas:\n  groups:\n    ml.research: {gpus: x}",
        'quotas.groups["ml.research"].gpus',
        "expected a number",
        id="odd-group-name-is-quoted-in-the-path",
    ),
    pytest.param("quotas: {lending: 'true'}", "quotas.lending", "true or false", id="quoted-bool"),
    pytest.param(
        "reservation: {min_gpus: true}", "reservation.min_gpus", "boolean", id="bool-for-number"
    ),
    pytest.param(
        "reservation: {enabled: 1}", "reservation.enabled", "true or false", id="int-for-bool"
    ),
    pytest.param(
        "preemption:\n  enabled: yes",
        "preemption.enabled",
        "only true and false",
        id="yaml-1.1-yes-is-not-a-boolean",
    ),
    pytest.param("reservation: {min_gpus: 0}", "reservation.min_gpus", "greater than 0", id="zero"),
    pytest.param(
        "reservation: {drain_after_s: 0}",
        "reservation.drain_after_s",
        "greater than 0",
        id="zero-drain",
    ),
    pytest.param(
        "reservation: {drain_after_s: 1h}",
        "reservation.drain_after_s",
        "expected a number",
        id="drain-with-unit",
    ),
    pytest.param(
        "reservation: {claim_big: 'no'}", "reservation.claim_big", "true or false", id="claim-str"
    ),
    pytest.param(
        "reservation: {drain_ratio: -1}", "reservation.drain_ratio", "at least 0", id="neg-ratio"
    ),
    pytest.param("placement: {window: 2.5}", "placement.window", "integer", id="float-for-int"),
    pytest.param("placement: {method: cplex}", "placement.method", "milp, greedy", id="bad-method"),
    pytest.param(
        "placement: {affinity: gpu_type}",
        "placement.affinity",
        "did you mean 'gpu-type'",
        id="affinity-spelling",
    ),
    pytest.param(
        "placement: {first_of_model_alone: yes}",
        "placement.first_of_model_alone",
        "true or false",
        id="alone-yes",
    ),
    pytest.param(
        "placement: {time_limit_s: 0}", "placement.time_limit_s", "greater than 0", id="zero-limit"
    ),
    pytest.param(
        "placement: {time_limit_s: 86400}",
        "placement.time_limit_s",
        "at most 600",
        id="huge-limit",
    ),
    pytest.param(
        "placement: {time_limt_s: 3}",
        "placement.time_limt_s",
        "did you mean 'time_limit_s'",
        id="typo-in-a-section-key",
    ),
    pytest.param(
        "placement: {wait_weight: 0, transfer_weight: 0, runtime_weight: 0}",
        "placement",
        "weight",
        id="all-weights-zero",
    ),
    pytest.param("node_cpu_ceiling: 70", "node_cpu_ceiling", "at most 1", id="percent-not-share"),
    pytest.param("node_cpu_ceiling: 0", "node_cpu_ceiling", "greater than 0", id="zero-ceiling"),
    pytest.param("aging: {rate: .nan}", "aging.rate", "finite", id="nan"),
    pytest.param("aging: {max_wait_s: .inf}", "aging.max_wait_s", "finite", id="infinity"),
    pytest.param("aging: {rate: -1}", "aging.rate", "at least 0", id="negative-rate"),
    pytest.param("aging: [1, 2]", "aging", "mapping", id="section-not-a-mapping"),
    pytest.param(
        "retry: {max_attempts: 1000000000000000000000000000000}",
        "retry.max_attempts",
        "between 1 and 100",
        id="huge-integer",
    ),
    pytest.param(
        "preemption: {restart_cost_s: 1e12}",
        "preemption.restart_cost_s",
        "at most 31622400",
        id="huge-duration",
    ),
    pytest.param(
        "preemption: {checkpoint_interval_s: 0}",
        "preemption.checkpoint_interval_s",
        "greater than 0",
        id="zero-checkpoint-interval",
    ),
    pytest.param("retry: {backoff_s: -5}", "retry.backoff_s", "at least 0", id="negative-backoff"),
    pytest.param(
        "retry: {start_timeout_s: 0}",
        "retry.start_timeout_s",
        "greater than 0",
        id="zero-start-timeout",
    ),
    pytest.param(
        "retry: {member_lost: at_most_once}",
        "retry.member_lost",
        "must be one of availability, at-most-once",
        id="unknown-member-lost",
    ),
    pytest.param(
        "retry: {member_timeout_s: 0}",
        "retry.member_timeout_s",
        "greater than 0",
        id="zero-member-timeout",
    ),
    pytest.param(
        "retry: {member_timeout_s: '15'}",
        "retry.member_timeout_s",
        "write it without quotes",
        id="member-timeout-as-text",
    ),
    pytest.param(
        "retry: {member_timeout_s: 40000000}",
        "retry.member_timeout_s",
        "at most 31622400",
        id="huge-member-timeout",
    ),
    pytest.param(
        "retry: {start_timeout_s: '2m'}",
        "retry.start_timeout_s",
        "expected a number",
        id="start-timeout-as-text",
    ),
    *(
        pytest.param(f"benchmarks: {{{doc}}}", f"benchmarks.{path}", fragment, id=f"bench-{name}")
        for name, doc, path, fragment in [
            ("unknown-model", "models: [resnet50, gpt5]", "models[1]", "resnet50, yolov8m, "),
            ("model-twice", "models: [resnet50, resnet50]", "models[1]", "listed twice"),
            ("no-models", "models: []", "models", "non-empty"),
            ("zero-age", "max_age_days: 0", "max_age_days", "greater than 0"),
            ("tiny-budget", "budget_s: 0.5", "budget_s", "at least 1"),
            ("image-with-space", "image: 'cpn workloads'", "image", "not ASCII"),
            ("enabled-yes", "enabled: yes", "enabled", "true or false"),
        ]
    ),
    pytest.param("user_levels: {alice: high}", "user_levels.alice", "number", id="level-as-word"),
    pytest.param("group_levels: {1: 2}", "group_levels", "group name", id="numeric-group-name"),
    pytest.param(
        "namespaces: {Team_A: {group: a}}", "namespaces.Team_A", "namespace", id="bad-namespace"
    ),
    pytest.param("namespaces: {b: {}}", "namespaces.b", "a user, a group", id="empty-owner"),
    pytest.param(
        "namespaces: {c: {owner: x}}", "namespaces.c.owner", "unknown key", id="owner-typo"
    ),
    pytest.param("name: ''", "name", "non-empty", id="empty-name"),
    pytest.param("- a\n- b", "", "must be a mapping", id="document-is-a-list"),
    pytest.param("a: [1,", "", "line 1", id="yaml-syntax-error"),
    pytest.param("name: a\nname: b", "", "appears twice", id="duplicate-yaml-key"),
    pytest.param("a: !!str 1", "", "tags", id="explicit-tag"),
]


@pytest.mark.parametrize(("doc", "path", "fragment"), MISTAKES)
def test_mistake_is_named_by_its_field(doc: str, path: str, fragment: str) -> None:
    """Each mistake is a PolicyError whose errors include one at the field's path."""
    errors = errors_of(doc)
    assert path in errors, errors
    assert fragment in errors[path]


def test_every_mistake_is_reported_at_once() -> None:
    """A document with ten mistakes gets ten errors, one per field, in one PolicyError."""
    errors = errors_of((DATA / "many-mistakes.yaml").read_text())
    assert set(errors) == {
        "ordering",
        "formula",
        "levels[0].max_gpus",
        "levels[1].formula",
        "quotas.groups.team-a.users.alice.gpus",
        "reservation.enabled",
        "placement.time_limt_s",
        "placement.window",
        "node_cpu_ceiling",
        "namespaces.Alice",
    }


def test_policy_error_message_lists_every_field() -> None:
    """The exception's text (what an Event shows) names every bad path."""
    with pytest.raises(PolicyError) as caught:
        parse_policy("ordering: x\nretry: {max_attempts: 0}\n")
    assert "ordering:" in str(caught.value) and "retry.max_attempts:" in str(caught.value)


@pytest.mark.parametrize("doc", [42, ["a"], b"name: x", None], ids=repr)
def test_non_document_input_is_a_policy_error(doc: Any) -> None:
    """Input that is neither text nor a mapping is refused as a PolicyError (None = empty)."""
    if doc is None:
        assert parse_policy(doc) == QueuePolicy()
    else:
        assert "" in errors_of(doc)


# --- YAML safety ---------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_yaml_bomb_is_refused_before_expansion() -> None:
    """A billion-laughs document is refused at its first anchor, without expanding it."""
    errors = errors_of((DATA / "bomb.yaml").read_text())
    assert "anchors (&a) are not allowed" in errors[""]
    assert "line 2" in errors[""]


def test_alias_is_refused() -> None:
    """An alias alone (no anchor in sight) is refused too."""
    assert "aliases" in errors_of("name: *x\n")[""]


def test_python_tag_runs_nothing(tmp_path: Path) -> None:
    """A tag asking PyYAML to call a function is refused and nothing runs."""
    marker = tmp_path / "ran"
    text = f"name: !!python/object/apply:os.system ['touch {marker}']\n"
    assert "tags (!!python/object/apply:os.system)" in errors_of(text)[""]
    assert not marker.exists()


def test_oversized_text_is_refused() -> None:
    """Text above the size cap is refused before parsing."""
    text = "name: x\n" + "# padding\n" * (MAX_BYTES // 10 + 1)
    assert "more than the" in errors_of(text)[""]


def test_deep_nesting_is_refused() -> None:
    """Deeply nested lists are refused, not a RecursionError."""
    assert "nesting" in errors_of("name: " + "[" * 5000 + "]" * 5000)[""]


def test_yaml_1_2_scalars() -> None:
    """1e3 is a number, no/on are strings, 010 is ten (YAML 1.2, not PyYAML's 1.1)."""
    policy = parse_policy("aging: {rate: 1e3}\ngroup_levels: {no: 010, on: 1}\n")
    assert policy.aging.rate == 1000.0
    assert dict(policy.group_levels) == {"no": 10.0, "on": 1.0}


# --- ConfigMap -----------------------------------------------------------------------


def test_configmap_policy_and_version() -> None:
    """The ConfigMap's policy.yaml is parsed and its resourceVersion is the version."""
    manifest = yaml.safe_load((DATA / "configmap.yaml").read_text())
    policy = parse_policy_configmap(manifest)
    assert (policy.name, policy.version) == ("from-configmap", "48213")
    assert policy.quotas.groups["team-a"].limit.gpus == 32.0


@pytest.mark.parametrize(
    ("manifest", "path"),
    [
        pytest.param({"kind": "ConfigMap", "data": {}}, 'data["policy.yaml"]', id="missing-key"),
        pytest.param(
            {"data": {"policy.yaml": {"name": "x"}}}, 'data["policy.yaml"]', id="key-not-text"
        ),
        pytest.param({"kind": "Secret", "data": {"policy.yaml": ""}}, "kind", id="not-a-configmap"),
        pytest.param(
            {"metadata": {"resourceVersion": 5}, "data": {"policy.yaml": ""}},
            "metadata.resourceVersion",
            id="numeric-resource-version",
        ),
        pytest.param(
            {"data": {"policy.yaml": "ordering: nope"}}, "ordering", id="error-inside-the-document"
        ),
    ],
)
def test_configmap_mistakes_are_named(manifest: dict[str, Any], path: str) -> None:
    """A bad ConfigMap is a PolicyError naming the ConfigMap field or the document field."""
    with pytest.raises(PolicyError) as caught:
        parse_policy_configmap(manifest)
    assert path in {error.path for error in caught.value.errors}


# --- keys and docs stay in sync --------------------------------------------------------


def test_top_level_keys_are_the_policy_fields() -> None:
    """Each QueuePolicy field (but the version) has a key, and no key lacks a field."""
    fields = {f.name for f in dataclasses.fields(QueuePolicy)} - {"version"}
    assert set(KNOWN_KEYS[""]) == fields


def test_every_key_is_documented() -> None:
    """docs/policy.md mentions every key the parser accepts."""
    text = (ROOT / "docs" / "policy.md").read_text()
    missing = {key for keys in KNOWN_KEYS.values() for key in keys if f"`{key}`" not in text}
    assert not missing


# --- properties ----------------------------------------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["gpus", "cpn", "milp", "node", "V100", "1e3", "wait_s +", "a.b"]),
)
_ALL_KEYS = sorted({key for keys in KNOWN_KEYS.values() for key in keys})
_JUNK = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(st.sampled_from(_ALL_KEYS), st.text(max_size=6), st.integers(), st.none()),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


def _section(keys: tuple[str, ...], value: st.SearchStrategy[Any] = _JUNK) -> Any:
    return st.fixed_dictionaries({}, optional=dict.fromkeys(keys, value))


def _named(value: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[Any, Any]]:
    return st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), value, max_size=3)


_GROUP = _section(KNOWN_KEYS["quotas.groups.<group>"]).map(dict)
_SHAPED = st.fixed_dictionaries(
    {},
    optional={
        **dict.fromkeys(KNOWN_KEYS[""], _JUNK),
        "levels": st.lists(_section(KNOWN_KEYS["levels[]"]), max_size=3),
        "aging": _section(KNOWN_KEYS["aging"]),
        "placement": _section(KNOWN_KEYS["placement"]),
        "reservation": _section(KNOWN_KEYS["reservation"]),
        "quotas": st.fixed_dictionaries({}, optional={"groups": _named(_GROUP), "lending": _JUNK}),
        "namespaces": _named(_section(KNOWN_KEYS["namespaces.<namespace>"])),
    },
)


def _parses_or_policy_error(doc: Any) -> None:
    try:
        policy = parse_policy(doc)
    except PolicyError as error:
        assert error.errors, "a PolicyError lists at least one field error"
        return
    assert isinstance(policy, QueuePolicy)
    assert all(math.isfinite(v) for v in policy.user_levels.values())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.one_of(_JUNK, _SHAPED))
def test_random_documents_parse_or_raise_policy_error(doc: Any) -> None:
    """Any loaded junk gives a policy or a PolicyError, never another exception."""
    _parses_or_policy_error(doc)


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(st.text(max_size=200), _SHAPED.map(lambda d: yaml.safe_dump(d))))
def test_random_text_parses_or_raises_policy_error(text: str) -> None:
    """Any text, YAML or not, gives a policy or a PolicyError, never another exception."""
    _parses_or_policy_error(text)


def test_drain_and_claim_are_read_and_null_turns_draining_off():
    """reservation.drain_after_s and claim_big are read; null turns draining off."""
    policy = parse_policy("reservation: {drain_after_s: 7200, claim_big: false, drain_ratio: 0}")
    assert (policy.reservation.drain_after_s, policy.reservation.claim_big) == (7200.0, False)
    assert policy.reservation.drain_ratio == 0.0
    assert parse_policy("reservation: {drain_after_s: null}").reservation.drain_after_s is None
    assert parse_policy("{}").reservation.drain_after_s == 300 * 3600.0


# --- data: locality and the per-member cache -------------------------------------------


def test_data_section_reads_locality_and_cache_sizes() -> None:
    """`data` sets locality, each member's cache and the default; absent, all unlimited."""
    policy = parse_policy(
        "data: {locality: false, cache_gb: {gpu-west: 2000}, default_cache_gb: 500}\n"
    )
    assert policy.data.locality is False
    assert dict(policy.data.cache_gb) == {"gpu-west": 2000.0}
    assert policy.data.default_cache_gb == 500.0
    assert parse_policy("").data.default_cache_gb is None and parse_policy("").data.locality


def test_data_section_errors_name_the_field() -> None:
    """A negative cache, a non-boolean locality and an unknown key are each reported at once."""
    found = errors_of({"data": {"cache_gb": {"a": -1}, "locality": "yes", "caches": 1}})
    assert set(found) == {"data.cache_gb.a", "data.locality", "data.caches"}
    assert "at least 0" in found["data.cache_gb.a"]
    assert "only true and false" in found["data.locality"]
