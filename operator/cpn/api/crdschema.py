"""The CRDs' structural schemas and CEL rules, checked as the hub's API server checks them.

:func:`load_crds` reads the CRD files (``crds/``); :class:`SchemaChecker` walks an object
against a version's ``openAPIV3Schema`` (required fields, types, bounds, enums, lengths, patterns,
unknown fields as ``kubectl apply``'s strict field validation refuses them) and then its
CEL rules, which are implemented here by hand (:data:`CEL_RULES`; a rule without a hand
implementation is collected in ``unchecked_rules``, and a test keeps the two in step).
:func:`check_metadata` is the API server's own ObjectMeta check. An object is first seen
as kubectl sends it (:func:`kubectl_booleans`) with its nulls pruned (:func:`prune_nulls`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from yaml.nodes import Node, ScalarNode

from cpn.api.documents import Json, read_documents
from cpn.api.fields import hint, join

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# kubectl reads manifests as YAML 1.1, where these plain scalars are booleans (cpn reads 1.2).
_YAML11_BOOL = re.compile(
    r"(?:y|Y|yes|Yes|YES|on|On|ON|true|True|TRUE)|(?P<false>n|N|no|No|NO|off|Off|OFF|false|False|FALSE)"
)


Schema = Mapping[str, Any]


def _cel_share_needs_one_gpu(spec: Mapping[str, Any]) -> bool:
    resources_ = spec.get("resources") or {}
    return (
        "gpuShare" not in resources_ or resources_["gpuShare"] >= 1.0 or resources_.get("gpus") == 1
    )


def _cel_data_size_needs_cluster(spec: Mapping[str, Any]) -> bool:
    data = spec.get("data")
    return (
        not isinstance(data, Mapping)
        or "sizeGB" not in data
        or data["sizeGB"] == 0
        or "cluster" in data
    )


def _cel_input_names_unique(spec: Mapping[str, Any]) -> bool:
    names = [item.get("name") for item in spec.get("inputs") or () if isinstance(item, Mapping)]
    return len(names) == len(set(names))


def _cel_interval_needs_checkpoint(spec: Mapping[str, Any]) -> bool:
    return "checkpointIntervalSeconds" not in spec or spec.get("checkpoint") is True


_RULE_SHARE = (
    "!has(self.resources.gpuShare) || self.resources.gpuShare >= 1.0 || self.resources.gpus == 1"
)
_RULE_DATA = (
    "!has(self.data) || !has(self.data.sizeGB) || self.data.sizeGB == 0.0 || has(self.data.cluster)"
)
_RULE_INPUTS = (
    "!has(self.inputs) || self.inputs.all(x, self.inputs.exists_one(y, y.name == x.name))"
)
#: The CRDs' CEL rules (``x-kubernetes-validations``), written by hand in Python, keyed by the
#: rule's exact text: ``self`` is the object at the rule's schema node, already schema-valid.
CEL_RULES: Mapping[str, Callable[[Mapping[str, Any]], bool]] = {
    _RULE_SHARE: _cel_share_needs_one_gpu,
    _RULE_DATA: _cel_data_size_needs_cluster,
    "!has(self.checkpointIntervalSeconds) || self.checkpoint": _cel_interval_needs_checkpoint,
    _RULE_INPUTS: _cel_input_names_unique,
    # GPUBenchmark's spec is immutable: a transition rule, which the API server checks only
    # on an update (against the old object), so a manifest checked alone always passes it
    "self == oldSelf": lambda _: True,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class CrdVersion:
    """One served version of a CRD: what identifies its objects, and its schema."""

    group: str
    version: str
    kind: str
    namespaced: bool
    schema: Schema


def crd_dir() -> Path | None:
    """Where the CRDs are: packaged beside cpn (``cpn/crds``) or the checkout's ``crds/``."""
    packaged = resources.files("cpn") / "crds"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[3] / "crds"
    return checkout if checkout.is_dir() else None


def load_crds(directory: Path) -> dict[tuple[str, str], CrdVersion]:
    """``(apiVersion, kind) -> CrdVersion`` for every served version of every CRD file."""
    found: dict[tuple[str, str], CrdVersion] = {}
    for path in sorted(directory.glob("*.yaml")):
        for doc in read_documents(path.read_text()):
            crd = doc.value
            if not isinstance(crd, Mapping) or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if not version.get("served", True):
                    continue
                entry = CrdVersion(
                    group=spec["group"],
                    version=version["name"],
                    kind=spec["names"]["kind"],
                    namespaced=spec.get("scope") == "Namespaced",
                    schema=version["schema"]["openAPIV3Schema"],
                )
                found[(f"{entry.group}/{entry.version}", entry.kind)] = entry
    return found


def cel_rules(schema: Schema) -> Iterator[str]:
    """Every CEL rule text in a schema."""
    for rule in schema.get("x-kubernetes-validations") or ():
        yield str(rule["rule"])
    for child in (schema.get("properties") or {}).values():
        yield from cel_rules(child)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            yield from cel_rules(schema[key])


def prune_nulls(value: Json) -> Json:
    """Drop null fields from mappings, as the API server prunes them (nullable is never set)."""
    if isinstance(value, Mapping):
        return {key: prune_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [prune_nulls(item) for item in value]
    return value


def kubectl_booleans(value: Json, nodes: Mapping[str, Node], path: str) -> Json:
    """``value`` as kubectl reads it: plain (unquoted) YAML 1.1 booleans become booleans."""
    if isinstance(value, Mapping):
        return {
            key: kubectl_booleans(item, nodes, join(path, str(key))) for key, item in value.items()
        }
    if isinstance(value, list):
        return [kubectl_booleans(item, nodes, f"{path}[{i}]") for i, item in enumerate(value)]
    node = nodes.get(path)
    if isinstance(value, str) and isinstance(node, ScalarNode) and node.style is None:
        match = _YAML11_BOOL.fullmatch(value)
        if match:
            return match.group("false") is None
    return value


def type_name(value: Json) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _has_type(value: Json, wanted: str) -> bool:
    actual = type_name(value)
    if wanted == "integer" and actual == "number":
        return math.isfinite(value) and float(value).is_integer()  # the API server takes 2.0
    return actual == wanted or (wanted == "number" and actual == "integer")


def _fmt(value: float) -> str:
    if isinstance(value, int) and abs(value) >= 10**16:  # float() of it may overflow
        return f"an integer of {value.bit_length()} bits"
    return f"{value:.0f}" if float(value).is_integer() and abs(value) < 1e16 else f"{value:g}"


class SchemaChecker:
    """Walks an object against a Kubernetes structural schema, collecting (path, message)."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []
        self.unchecked_rules: set[str] = set()

    def error(self, path: str, message: str) -> None:
        self.errors.append((path, message))

    def check(self, value: Json, schema: Schema, path: str) -> None:
        if schema.get("x-kubernetes-int-or-string"):
            if type_name(value) not in {"integer", "string"}:
                self.error(path, f"must be an integer or a string, got {type_name(value)}")
            elif isinstance(value, str):
                self._string(value, schema, path)
            return
        wanted = schema.get("type")
        if wanted and not _has_type(value, wanted):
            message = f"must be of type {wanted}, got {type_name(value)} {short(value)}"
            if isinstance(value, bool) and wanted == "string":
                message += " (kubectl reads a plain yes/no/on/off as a boolean: quote it)"
            self.error(path, message)
            return
        if isinstance(value, float) and not math.isfinite(value):
            self.error(path, f"must be a finite number, got {value}")
            return
        if "enum" in schema and value not in schema["enum"]:
            choices = ", ".join(json.dumps(c) for c in schema["enum"])
            self.error(path, f"unsupported value {json.dumps(value)}: supported values: {choices}")
        if isinstance(value, bool):
            return
        if isinstance(value, int | float):
            self._number(value, schema, path)
        elif isinstance(value, str):
            self._string(value, schema, path)
        elif isinstance(value, list):
            self._array(value, schema, path)
        elif isinstance(value, Mapping):
            self._object(value, schema, path)

    def _number(self, value: float, schema: Schema, path: str) -> None:
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None:
            if schema.get("exclusiveMinimum") and value <= low:
                self.error(path, f"must be greater than {_fmt(low)}, got {_fmt(value)}")
            elif value < low:
                self.error(path, f"must be at least {_fmt(low)}, got {_fmt(value)}")
        if high is not None:
            if schema.get("exclusiveMaximum") and value >= high:
                self.error(path, f"must be less than {_fmt(high)}, got {_fmt(value)}")
            elif value > high:
                self.error(path, f"must be at most {_fmt(high)}, got {_fmt(value)}")

    def _string(self, value: str, schema: Schema, path: str) -> None:
        limit = schema.get("maxLength")
        if limit is not None and len(value) > limit:
            self.error(path, f"may not be longer than {limit} characters, got {len(value)}")
        least = schema.get("minLength")
        if least is not None and len(value) < least:
            self.error(path, f"must be at least {least} characters long")
        pattern = schema.get("pattern")
        if pattern is not None and not re.search(pattern, value):
            self.error(path, f"{short(value)} does not match {pattern}")

    def _array(self, value: list[Json], schema: Schema, path: str) -> None:
        limit = schema.get("maxItems")
        if limit is not None and len(value) > limit:
            self.error(path, f"must have at most {limit} items, got {len(value)}")
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                self.check(item, items, f"{path}[{i}]")

    def _object(self, value: Mapping[str, Json], schema: Schema, path: str) -> None:
        limit = schema.get("maxProperties")
        if limit is not None and len(value) > limit:
            self.error(path, f"must have at most {limit} fields, got {len(value)}")
        for name in schema.get("required") or ():
            if name not in value:
                self.error(join(path, name), "required value")
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        open_ = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
        for key, item in value.items():
            if not isinstance(key, str):
                self.error(path, f"field names must be strings, got {short(key)}")
            elif key in properties:
                self.check(item, properties[key], join(path, key))
            elif isinstance(extra, Mapping):
                self.check(item, extra, join(path, key))
            elif not open_:
                self.error(join(path, key), f"unknown field{hint(key, properties)}")

    def rules(self, value: Json, schema: Schema, path: str) -> None:
        """The CEL rules, evaluated once the object is structurally valid."""
        if not isinstance(value, Mapping):
            return
        for rule in schema.get("x-kubernetes-validations") or ():
            text = str(rule["rule"])
            implementation = CEL_RULES.get(text)
            if implementation is None:
                self.unchecked_rules.add(text)
            elif not implementation(value):
                self.error(path, str(rule.get("message") or f"failed rule: {text}"))
        for key, child in (schema.get("properties") or {}).items():
            if key in value:
                self.rules(value[key], child, join(path, key))


def short(value: Json) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def string_map(checker: SchemaChecker, value: Json, path: str) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping):
        checker.error(path, f"must be a mapping of strings, got {type_name(value)}")
        return
    for key, item in value.items():
        if not isinstance(item, str):
            checker.error(
                join(path, str(key)),
                f"must be a string, got {type_name(item)} {short(item)} (quote it)",
            )


def check_metadata(checker: SchemaChecker, meta: Json, namespaced: bool) -> None:
    """What the API server checks of ObjectMeta on create."""
    if not isinstance(meta, Mapping):
        checker.error("metadata", "required value (at least metadata.name)")
        return
    name = meta.get("name")
    if name is None and not meta.get("generateName"):
        checker.error("metadata.name", "required value")
    elif name is not None and (
        not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name)
    ):
        checker.error(
            "metadata.name",
            f"{short(name)} is not a lowercase DNS subdomain (a-z, 0-9, '-', '.'; "
            "at most 253 characters)",
        )
    namespace = meta.get("namespace")
    if namespace is not None:
        if not namespaced:
            checker.error("metadata.namespace", "this kind is cluster-scoped: no namespace")
        elif not isinstance(namespace, str) or not _DNS_LABEL.fullmatch(namespace):
            checker.error("metadata.namespace", f"{short(namespace)} is not a DNS label")
    for field in ("labels", "annotations"):
        string_map(checker, meta.get(field), f"metadata.{field}")
