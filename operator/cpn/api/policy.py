"""Read the admins' policy document into a :class:`cpn.core.policy.QueuePolicy`.

The document (YAML, or an already-loaded mapping) mirrors ``QueuePolicy`` with
snake_case keys; docs/policy.md is the reference. Every problem is collected
and reported at once as a :class:`PolicyError` whose :class:`FieldError` paths
name the field: ``levels[2].formula``, ``quotas.groups.team-a.users.alice.gpus``,
``placement.time_limit_s``. Unknown keys are errors (with the nearest known key
as a hint), so a typo never silently falls back to a default.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from cpn.api.fields import describe_value as _kind
from cpn.api.fields import hint, join
from cpn.api.policydomains import DOMAIN_KEYS, check_domain_quotas, read_domains
from cpn.api.policyfairshare import BUDGET_FIELDS, FAIR_SHARE_KEYS, GROUP_BUDGET, read_fair_share
from cpn.api.policyfields import (
    Invalid,
    Parser,
    PolicyReader,
    absolute_path,
    boolean,
    choice,
    figure,
    formula,
    ident,
    integer,
    name_text,
    names,
    number,
)
from cpn.api.yamlsafe import MAX_BYTES, YamlError, load_yaml
from cpn.core.errors import FieldError, PolicyError
from cpn.core.fence import MEMBER_LOST_CHOICES
from cpn.core.policy import (
    BENCHMARK_MODELS,
    COPY_TOOLS,
    STAGING_SCOPES,
    Aging,
    Benchmarks,
    DataPolicy,
    GroupQuota,
    Level,
    Limit,
    Placement,
    Preemption,
    QueuePolicy,
    Quotas,
    Reservation,
    Retry,
)
from predictor.catalog import UnknownName, expand_gpu_types

ORDERINGS = ("cpn", "fifo", "sjf", "oracle", "las", "gavel")
METHODS = ("milp", "greedy", "first-fit", "fastest")
AFFINITIES = ("node", "gpu-type")
#: The ConfigMap data key that holds the document.
CONFIGMAP_KEY = "policy.yaml"

MAX_GPUS = 1_000_000.0  # any count of GPUs above this is a typo
MAX_DURATION_S = 366 * 86400.0  # a year
MAX_WEIGHT = 1e6
MAX_LEVEL = 1e9  # user/group levels and job priorities
MAX_LEVELS = 64
MAX_CACHE_GB = 1e9  # an exabyte of cache on one member is a typo
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


# --- the fields of each section ------------------------------------------------

_TOP: Mapping[str, Parser] = {
    "name": name_text,
    "ordering": choice(ORDERINGS),
    "formula": formula(),
    "node_cpu_ceiling": number(0.0, 1.0, above=True, nullable=True),
    "running_siblings": boolean,
}
_TOP_SECTIONS = (
    "levels",
    "user_levels",
    "group_levels",
    "aging",
    "quotas",
    "reservation",
    "placement",
    "preemption",
    "retry",
    "benchmarks",
    "namespaces",
    "domains",
    "data",
    "fair_share",
)
_LEVEL: Mapping[str, Parser] = {
    "name": name_text,
    "groups": names,
    "users": names,
    "queues": names,
    "min_priority": integer(-int(MAX_LEVEL), int(MAX_LEVEL), nullable=True),
    "max_gpus": number(0.0, MAX_GPUS, nullable=True),
    "min_gpus": number(0.0, MAX_GPUS, nullable=True),
    "formula": formula(nullable=True),
}
_AGING: Mapping[str, Parser] = {
    "rate": number(0.0, MAX_WEIGHT),
    "max_wait_s": number(0.0, MAX_DURATION_S, above=True, nullable=True),
    "max_wait_fifo_share": number(0.0, 1.0),
}
_RESERVATION: Mapping[str, Parser] = {
    "enabled": boolean,
    "min_gpus": number(0.0, MAX_GPUS, above=True),
    "max_reservations": integer(0, 1000),
    "backfill": boolean,
    "claim_big": boolean,
    "drain_after_s": number(0.0, MAX_DURATION_S, above=True, nullable=True),
    "drain_ratio": number(0.0, MAX_WEIGHT),
    "head": boolean,
    "drain_fifo": boolean,
    "fifo_share": number(0.0, 1.0),
    "calibrate_below_gpus": number(0.0, MAX_GPUS),
}
_PLACEMENT: Mapping[str, Parser] = {
    "method": choice(METHODS),
    "wait_for_faster": boolean,
    "wait_weight": number(0.0, MAX_WEIGHT),
    "transfer_weight": number(0.0, MAX_WEIGHT),
    "runtime_weight": number(0.0, MAX_WEIGHT),
    "time_limit_s": number(0.0, 600.0, above=True),
    "window": integer(1, 10_000),
    "affinity": choice(AFFINITIES),
    "first_of_model_alone": boolean,
}
_PREEMPTION: Mapping[str, Parser] = {
    "enabled": boolean,
    "min_priority_gap": integer(0, int(MAX_LEVEL)),
    "restart_cost_s": number(0.0, MAX_DURATION_S),
    "checkpoint_interval_s": number(0.0, MAX_DURATION_S, above=True),
    "min_run_s": number(0.0, MAX_DURATION_S),
    "shorter_by": number(1.0, 1e6),
    "for_overdue": boolean,
    "protect_waited_share": number(0.0, 1.0, above=True, nullable=True),
    "around_reservations": boolean,
    "no_bigger_victims": boolean,
    "claim": boolean,
    "gittins": boolean,
}
_RETRY: Mapping[str, Parser] = {
    "max_attempts": integer(1, 100),
    "backoff_s": number(0.0, 86400.0),
    "start_timeout_s": number(0.0, MAX_DURATION_S, above=True),
    "member_lost": choice(MEMBER_LOST_CHOICES),
    "member_timeout_s": number(0.0, MAX_DURATION_S, above=True, nullable=True),
}


def _models(value: Any) -> tuple[str, ...]:
    """A non-empty list of the benchmark workload's models, each once, in order."""
    if not isinstance(value, list) or not value:
        raise Invalid(f"expected a non-empty list of models, got {_kind(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str) or item not in BENCHMARK_MODELS:
            near = hint(item, BENCHMARK_MODELS) if isinstance(item, str) else ""
            message = f"must be one of {', '.join(BENCHMARK_MODELS)}; got {_kind(item)}{near}"
            raise Invalid(message, at=f"[{index}]")
        if item in value[:index]:
            raise Invalid(f"{item} is listed twice", at=f"[{index}]")
    return tuple(value)


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def claim_name(value: Any) -> str:
    """A PersistentVolumeClaim name: a DNS subdomain (lower-case letters, digits, '-', '.')."""
    name = ident(value)
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise Invalid(f"{name!a}: not a claim name (lower-case letters, digits, '-', '.'; ≤ 253)")
    return name


def _image(value: Any) -> str:
    """A container image reference: printable ASCII, no spaces."""
    name = ident(value)
    if len(name) > 1024:
        raise Invalid("is longer than 1024 characters")
    return name


_BENCHMARKS: Mapping[str, Parser] = {
    "enabled": boolean,
    "max_age_days": number(0.0, 3660.0, above=True),
    "models": _models,
    "budget_s": number(1.0, 86400.0),
    "image": _image,
}
_DATA: Mapping[str, Parser] = {
    "locality": boolean,
    "default_cache_gb": number(0.0, MAX_CACHE_GB, nullable=True),
    "copy_tool": choice(COPY_TOOLS),
    "copy_dest": absolute_path,
    "staging_image": _image,
    "staging_attempts": integer(1, 20),
    "staging_backoff_s": number(0.0, 86400.0),
    "staging_timeout_s": number(1.0, 7 * 86400.0),
    "prepull": boolean,
    "staging_scope": choice(STAGING_SCOPES),
    "shared_claim": claim_name,
}
_DATA_KEYS = (*_DATA, "cache_gb")
_QUOTAS = ("groups", "lending", "max_priority", *BUDGET_FIELDS)
_MAX_PRIORITY = integer(-int(MAX_LEVEL), int(MAX_LEVEL), nullable=True)
MAX_JOBS = 1_000_000  # any count of concurrent jobs above this is a typo
_LIMIT: Mapping[str, Parser] = {
    "gpus": number(0.0, MAX_GPUS, nullable=True),
    "jobs": integer(0, MAX_JOBS, nullable=True),
}
_LIMIT_KEYS = ("gpus", "per_type", "jobs")
_GROUP_KEYS = (*_LIMIT_KEYS, "users", "default_user", "max_priority", "domains", *GROUP_BUDGET)
_NAMESPACE = ("user", "group")

#: Every key the document may hold, by section (for docs and tests).
KNOWN_KEYS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "": (*_TOP, *_TOP_SECTIONS),
        "levels[]": tuple(_LEVEL),
        "aging": tuple(_AGING),
        "quotas": _QUOTAS,
        "quotas.groups.<group>": _GROUP_KEYS,
        "quotas.groups.<group>.users.<user>": _LIMIT_KEYS,
        "quotas.groups.<group>.domains.<domain>": _LIMIT_KEYS,
        "reservation": tuple(_RESERVATION),
        "placement": tuple(_PLACEMENT),
        "preemption": tuple(_PREEMPTION),
        "retry": tuple(_RETRY),
        "benchmarks": tuple(_BENCHMARKS),
        "namespaces.<namespace>": _NAMESPACE,
        "domains.<domain>": DOMAIN_KEYS,
        "data": _DATA_KEYS,
        "fair_share": FAIR_SHARE_KEYS,
    }
)


# --- sections with structure -----------------------------------------------------


def _is_catch_all(level: Level) -> bool:
    rules = (level.groups, level.users, level.queues)
    bounds = (level.min_priority, level.max_gpus, level.min_gpus)
    return not any(rules) and all(bound is None for bound in bounds)


def _data(reader: PolicyReader, value: Any) -> DataPolicy:
    section = reader.mapping(value, "data", _DATA_KEYS)
    fields = reader.fields(section, "data", _DATA)
    sizes = reader.table(
        section.get("cache_gb"), "data.cache_gb", "cluster", number(0.0, MAX_CACHE_GB)
    )
    if fields.get("staging_scope") == "cluster" and not fields.get("shared_claim"):
        reader.error(
            "data.shared_claim",
            "required when data.staging_scope is cluster: the PersistentVolumeClaim (in each "
            "member's job namespace) that stagings copy into and training Jobs mount",
        )
    return DataPolicy(cache_gb=MappingProxyType(sizes), **fields)


def _levels(reader: PolicyReader, value: Any) -> tuple[Level, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        reader.error("levels", f"expected a list of levels, got {_kind(value)}")
        return ()
    if len(value) > MAX_LEVELS:
        reader.error("levels", f"at most {MAX_LEVELS} levels, got {len(value)}")
    levels: list[Level] = []
    first_index: dict[str, int] = {}
    catch_all: int | None = None
    for index, item in enumerate(value):
        path = f"levels[{index}]"
        errors_before = len(reader.errors)
        fields = reader.section(item, path, _LEVEL)
        if isinstance(item, Mapping) and "name" not in item:
            reader.error(f"{path}.name", "is required")
        name = fields.pop("name", path)
        if name in first_index:
            reader.error(f"{path}.name", f"'{name}' is also levels[{first_index[name]}]")
        first_index.setdefault(name, index)
        low, high = fields.get("min_gpus"), fields.get("max_gpus")
        if low is not None and high is not None and low > high:
            reader.error(f"{path}.min_gpus", f"{figure(low)} is more than max_gpus {figure(high)}")
        level = Level(name=name, **fields)
        if catch_all is not None:
            reader.error(
                path,
                f"never used: levels[{catch_all}] before it has no rules and takes every job",
            )
        elif _is_catch_all(level) and len(reader.errors) == errors_before:  # not for a bad rule
            catch_all = index
        levels.append(level)
    return tuple(levels)


def _per_type(reader: PolicyReader, value: Any, path: str) -> Mapping[str, float]:
    written: dict[str, str] = {}
    limits: dict[str, float] = {}
    parse = number(0.0, MAX_GPUS)
    for name, item, item_path in reader.entries(value, path, "GPU type"):
        try:
            types = sorted(expand_gpu_types(name))
        except UnknownName as err:
            reader.error(item_path, str(err))
            continue
        if len(types) > 1:  # a family: the ledger counts exact types, it would match none
            reader.error(
                item_path,
                f"'{name}' names {len(types)} GPU types ({', '.join(types)}): "
                "give a quota for each one you mean",
            )
            continue
        canonical = types[0]  # the name nodes report: a100-80gb -> A100-80GB
        if canonical in written:
            reader.error(item_path, f"same GPU type as '{written[canonical]}'")
            continue
        written[canonical] = name
        try:
            limits[canonical] = parse(item)
        except Invalid as invalid:
            reader.error(item_path, str(invalid))
    return MappingProxyType(limits)


def _limit(reader: PolicyReader, section: Mapping[str, Any], path: str) -> Limit:
    fields = reader.fields(section, path, _LIMIT)
    per_type = _per_type(reader, section.get("per_type"), join(path, "per_type"))
    return Limit(gpus=fields.get("gpus"), per_type=per_type, jobs=fields.get("jobs"))


def _check_within(reader: PolicyReader, inner: Limit, outer: Limit, path: str) -> None:
    """Report where a user's limit exceeds its group's (the group's is the ceiling)."""
    why = "(the group's quota is the ceiling)"
    if inner.gpus is not None and outer.gpus is not None and inner.gpus > outer.gpus:
        reader.error(
            join(path, "gpus"),
            f"{figure(inner.gpus)} GPUs exceeds the group's {figure(outer.gpus)} {why}",
        )
    for gpu_type, gpus in inner.per_type.items():
        ceiling = outer.per_type.get(gpu_type, outer.gpus)
        if ceiling is not None and gpus > ceiling:
            reader.error(
                join(join(path, "per_type"), gpu_type),
                f"{figure(gpus)} {gpu_type} GPUs exceeds the group's {figure(ceiling)} {why}",
            )
    if inner.jobs is not None and outer.jobs is not None and inner.jobs > outer.jobs:
        reader.error(
            join(path, "jobs"),
            f"{inner.jobs} concurrent jobs exceeds the group's {outer.jobs} {why}",
        )


def _group_quota(reader: PolicyReader, value: Any, path: str) -> GroupQuota:
    section = reader.mapping(value, path, _GROUP_KEYS)
    limit = _limit(reader, section, path)
    users: dict[str, Limit] = {}
    users_path = join(path, "users")
    for user, item, user_path in reader.entries(section.get("users"), users_path, "user"):
        users[user] = _limit(reader, reader.mapping(item, user_path, _LIMIT_KEYS), user_path)
        _check_within(reader, users[user], limit, user_path)
    default_user = None
    if section.get("default_user") is not None:
        default_path = join(path, "default_user")
        default_section = reader.mapping(section["default_user"], default_path, _LIMIT_KEYS)
        default_user = _limit(reader, default_section, default_path)
        _check_within(reader, default_user, limit, default_path)
    domains: dict[str, Limit] = {}
    domains_path = join(path, "domains")
    for domain, item, domain_path in reader.entries(section.get("domains"), domains_path, "domain"):
        domains[domain] = _limit(
            reader, reader.mapping(item, domain_path, _LIMIT_KEYS), domain_path
        )
        _check_within(reader, domains[domain], limit, domain_path)
    cap = reader.fields(section, path, {"max_priority": _MAX_PRIORITY, **GROUP_BUDGET})
    return GroupQuota(
        limit=limit,
        users=MappingProxyType(users),
        default_user=default_user,
        domains=MappingProxyType(domains),
        **cap,
    )


def _quotas(reader: PolicyReader, value: Any) -> Quotas:
    section = reader.mapping(value, "quotas", _QUOTAS)
    fields = reader.fields(
        section, "quotas", {"lending": boolean, "max_priority": _MAX_PRIORITY, **BUDGET_FIELDS}
    )
    groups = {
        group: _group_quota(reader, item, path)
        for group, item, path in reader.entries(section.get("groups"), "quotas.groups", "group")
    }
    return Quotas(groups=MappingProxyType(groups), **fields)


def _namespaces(reader: PolicyReader, value: Any) -> Mapping[str, tuple[str, str]]:
    owners: dict[str, tuple[str, str]] = {}
    for namespace, item, path in reader.entries(value, "namespaces", "namespace"):
        if not _DNS_LABEL.fullmatch(namespace):
            reader.error(path, "not a namespace name (lower-case letters, digits, '-'; ≤ 63)")
        fields = reader.section(item, path, {"user": ident, "group": ident})
        if item is None or (isinstance(item, Mapping) and not item):
            reader.error(path, "give a user, a group or both")
        owners[namespace] = (fields.get("user", ""), fields.get("group", ""))
    return MappingProxyType(owners)


def _check_placement(reader: PolicyReader, placement: Placement) -> None:
    weights = (placement.wait_weight, placement.transfer_weight, placement.runtime_weight)
    if not any(weights):
        reader.error("placement", "at least one of the *_weight fields must be above 0")


# --- public API ------------------------------------------------------------------


def parse_policy(doc: Mapping[str, Any] | str, *, version: str = "") -> QueuePolicy:
    """Read a policy document (YAML text or a loaded mapping); raise PolicyError listing
    every problem. Text without a ``version`` gets ``sha256:<first 16 hex digits>``."""
    data: Any = doc
    if isinstance(doc, str):
        try:
            data = load_yaml(doc, max_bytes=MAX_BYTES)
        except YamlError as error:
            raise PolicyError([FieldError("", f"not accepted as YAML: {error}")]) from None
        digest = hashlib.sha256(doc.encode("utf-8", "surrogatepass")).hexdigest()
        version = version or f"sha256:{digest[:16]}"
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise PolicyError([FieldError("", f"the policy must be a mapping, got {_kind(data)}")])
    reader = PolicyReader()
    top = reader.mapping(data, "", (*_TOP, *_TOP_SECTIONS))
    fields = reader.fields(top, "", _TOP)
    level_parse = number(-MAX_LEVEL, MAX_LEVEL)
    policy = QueuePolicy(
        version=version,
        levels=_levels(reader, top.get("levels")),
        user_levels=MappingProxyType(
            reader.table(top.get("user_levels"), "user_levels", "user", level_parse)
        ),
        group_levels=MappingProxyType(
            reader.table(top.get("group_levels"), "group_levels", "group", level_parse)
        ),
        aging=Aging(**reader.section(top.get("aging"), "aging", _AGING)),
        quotas=_quotas(reader, top.get("quotas")),
        reservation=Reservation(
            **reader.section(top.get("reservation"), "reservation", _RESERVATION)
        ),
        placement=Placement(**reader.section(top.get("placement"), "placement", _PLACEMENT)),
        preemption=Preemption(**reader.section(top.get("preemption"), "preemption", _PREEMPTION)),
        retry=Retry(**reader.section(top.get("retry"), "retry", _RETRY)),
        benchmarks=Benchmarks(**reader.section(top.get("benchmarks"), "benchmarks", _BENCHMARKS)),
        namespaces=_namespaces(reader, top.get("namespaces")),
        domains=read_domains(reader, top.get("domains")),
        data=_data(reader, top.get("data")),
        fair_share=read_fair_share(reader, top.get("fair_share")),
        **fields,
    )
    _check_placement(reader, policy.placement)
    check_domain_quotas(reader, policy)
    if reader.errors:
        raise PolicyError(reader.errors)
    return policy


def parse_policy_configmap(manifest: Mapping[str, Any]) -> QueuePolicy:
    """Read the policy from a ConfigMap's ``data["policy.yaml"]``; its version is the
    ConfigMap's ``metadata.resourceVersion``. Paths in errors are relative to the document."""
    if not isinstance(manifest, Mapping):
        raise PolicyError([FieldError("", f"expected a ConfigMap, got {_kind(manifest)}")])
    errors: list[FieldError] = []
    kind = manifest.get("kind", "ConfigMap")
    if kind != "ConfigMap":
        errors.append(FieldError("kind", f"expected ConfigMap, got {_kind(kind)}"))
    metadata = manifest.get("metadata") or {}
    version = metadata.get("resourceVersion", "") if isinstance(metadata, Mapping) else ""
    if not isinstance(version, str):
        errors.append(
            FieldError("metadata.resourceVersion", f"expected a string, got {_kind(version)}")
        )
    data = manifest.get("data")
    text = data.get(CONFIGMAP_KEY) if isinstance(data, Mapping) else None
    if not isinstance(text, str):
        found = ", ".join(map(str, data)) if isinstance(data, Mapping) else _kind(data)
        message = f"missing or not a string (data holds: {found or 'nothing'})"
        errors.append(FieldError(join("data", CONFIGMAP_KEY), message))
    if errors or not isinstance(text, str) or not isinstance(version, str):
        raise PolicyError(errors)
    return parse_policy(text, version=version)
