"""Offline checks of AIJobs, MemberClusters and policies, as the hub would make them.

What ``cpn validate FILE...`` (:mod:`cpn.cli.validate`) runs before ``kubectl apply``.
Each file (``-`` is standard input, a directory means its ``*.yaml``/``*.yml``)
may hold several YAML documents. Every document is recognised and checked the
way the hub would check it:

- ``AIJob`` and ``MemberCluster`` (``cpn.io``): first the CRD's structural
  schema from ``crds/`` (required fields, types, bounds, enums, lengths,
  unknown fields as ``kubectl apply``'s strict field validation refuses them,
  nulls pruned as the API server prunes them), then the CEL rules of the CRD,
  which are implemented here by hand (:data:`CEL_RULES`; a rule without a
  hand implementation is reported on standard error, and a test keeps the two
  in step). An AIJob the schema accepts then goes through
  :func:`cpn.api.aijob.parse_aijob`, the operator's own reader, with a
  placeholder user and group (the operator takes them from the namespace), and
  through the checks the member cluster would make later on its pod template
  (string annotations and labels, named containers with images, a well-formed
  ``cpn.io/per-gpu-type`` table keyed by canonical GPU types).
- ``ConfigMap`` with the data key ``policy.yaml``:
  :func:`cpn.api.policy.parse_policy_configmap`, as the operator reads it.
- A mapping without ``kind``: a bare policy document, :func:`cpn.api.policy.parse_policy`.
- ``List``: each item.
- Anything else is reported as an unknown kind (``--ignore-unknown`` skips it).

YAML is read with the loader of :mod:`cpn.api.yamlsafe` (no aliases, tags or
duplicate keys; YAML 1.2 scalars), one document at a time. An AIJob or
MemberCluster is then seen as kubectl sends it: kubectl reads YAML 1.1, so a
plain ``yes``/``no``/``on``/``off`` is a boolean there (a policy stays YAML 1.2:
the operator reads it with the same loader). Each problem is one
:class:`Problem`, printed as ``FILE:LINE: document N (Kind name): field.path: message``.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from cpn.api import constants as k
from cpn.api.aijob import parse_aijob
from cpn.api.policy import CONFIGMAP_KEY, parse_policy, parse_policy_configmap
from cpn.api.yamlsafe import StrictLoader, YamlError
from cpn.core.errors import InvalidSpec, PolicyError
from predictor.catalog import UnknownName as UnknownGpu
from predictor.catalog import canonical_gpu, gpu_types

#: Largest file read (documents inside are bounded by the loader's depth rules; a policy
#: inside a ConfigMap also by the policy reader's own size cap).
MAX_FILE_BYTES = 16 * 1024 * 1024
PLACEHOLDER_USER = "cpn-validate"
PLACEHOLDER_GROUP = "cpn-validate"
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_OURS = ("AIJob", "MemberCluster")
# kubectl reads manifests as YAML 1.1, where these plain scalars are booleans (cpn reads 1.2).
_YAML11_BOOL = re.compile(
    r"(?:y|Y|yes|Yes|YES|on|On|ON|true|True|TRUE)|(?P<false>n|N|no|No|NO|off|Off|OFF|false|False|FALSE)"
)

Json = Any
Schema = Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One problem in one document, at one field path."""

    source: str
    line: int  # 1-based; 0 = unknown
    document: str  # "document 2 (AIJob team-a/resnet50)", or "" for the file itself
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        parts = [where, self.document, self.path, self.message]
        return ": ".join(p for p in parts if p)


def join(path: str, key: str) -> str:
    """``path.key``, or ``path["odd.key"]`` when the key is not a plain word (as policy paths)."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


# --- reading ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Document:
    """One YAML document of a file: its value and the line of every field path in it."""

    index: int  # 1-based
    line: int  # 1-based line where it starts
    value: Json
    lines: Mapping[str, int]
    nodes: Mapping[str, Node]


def _index_nodes(
    node: Node, path: str, line: int, lines: dict[str, int], nodes: dict[str, Node]
) -> None:
    """Record each path's node, and its line: a mapping entry's key line, a list item's own."""
    nodes[path] = node
    lines[path] = line
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode):
                child = join(path, str(key_node.value))
                _index_nodes(value_node, child, key_node.start_mark.line + 1, lines, nodes)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            _index_nodes(item, f"{path}[{i}]", item.start_mark.line + 1, lines, nodes)


def read_documents(text: str) -> Iterator[Document]:
    """Every non-empty document of ``text``, read safely; raises YamlError where it stops."""
    loader = StrictLoader(text)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            if node is None:
                continue
            value = loader.construct_document(node)
            if value is None:
                continue
            lines: dict[str, int] = {}
            nodes: dict[str, Node] = {}
            _index_nodes(node, "", node.start_mark.line + 1, lines, nodes)
            yield Document(index=index, line=lines[""], value=value, lines=lines, nodes=nodes)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        message = " ".join(part for part in (error.context, error.problem) if part)
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        raise YamlError(message, line=line, column=column) from None
    except yaml.YAMLError as error:
        raise YamlError(str(error)) from None
    finally:
        loader.dispose()


# --- the CRDs' structural schemas -------------------------------------------------------


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


def _cel_interval_needs_checkpoint(spec: Mapping[str, Any]) -> bool:
    return "checkpointIntervalSeconds" not in spec or spec.get("checkpoint") is True


_RULE_SHARE = (
    "!has(self.resources.gpuShare) || self.resources.gpuShare >= 1.0 || self.resources.gpus == 1"
)
_RULE_DATA = (
    "!has(self.data) || !has(self.data.sizeGB) || self.data.sizeGB == 0.0 || has(self.data.cluster)"
)
#: The CRDs' CEL rules (``x-kubernetes-validations``), written by hand in Python, keyed by the
#: rule's exact text: ``self`` is the object at the rule's schema node, already schema-valid.
CEL_RULES: Mapping[str, Callable[[Mapping[str, Any]], bool]] = {
    _RULE_SHARE: _cel_share_needs_one_gpu,
    _RULE_DATA: _cel_data_size_needs_cluster,
    "!has(self.checkpointIntervalSeconds) || self.checkpoint": _cel_interval_needs_checkpoint,
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


def _type_name(value: Json) -> str:
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
    actual = _type_name(value)
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
            if _type_name(value) not in {"integer", "string"}:
                self.error(path, f"must be an integer or a string, got {_type_name(value)}")
            elif isinstance(value, str):
                self._string(value, schema, path)
            return
        wanted = schema.get("type")
        if wanted and not _has_type(value, wanted):
            message = f"must be of type {wanted}, got {_type_name(value)} {_short(value)}"
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
                self.error(path, f"field names must be strings, got {_short(key)}")
            elif key in properties:
                self.check(item, properties[key], join(path, key))
            elif isinstance(extra, Mapping):
                self.check(item, extra, join(path, key))
            elif not open_:
                hint = _hint(key, properties)
                self.error(join(path, key), f"unknown field{hint}")

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


def _short(value: Json) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _hint(word: str, choices: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# --- documents --------------------------------------------------------------------------


class Validator:
    """Checks documents; ``problems`` collects what it finds."""

    def __init__(
        self, crds: Mapping[tuple[str, str], CrdVersion], *, ignore_unknown: bool = False
    ) -> None:
        self.crds = crds
        self.ignore_unknown = ignore_unknown
        self.problems: list[Problem] = []
        self.unchecked_rules: set[str] = set()
        self.documents = 0

    # -- files
    def validate_path(self, path: str) -> None:
        if path == "-":
            self.validate_text(sys.stdin.read(), "<stdin>")
            return
        target = Path(path)
        if target.is_dir():
            files = sorted(p for p in target.iterdir() if p.suffix in {".yaml", ".yml"})
            if not files:
                self._file_problem(path, "no *.yaml or *.yml files in this directory")
            for file in files:
                self.validate_path(str(file))
            return
        try:
            size = target.stat().st_size
            if size > MAX_FILE_BYTES:
                self._file_problem(path, f"{size} bytes, more than the {MAX_FILE_BYTES} read")
                return
            text = target.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            self._file_problem(path, f"cannot be read: {err}")
            return
        self.validate_text(text, path)

    def _file_problem(self, source: str, message: str, line: int = 0) -> None:
        self.problems.append(
            Problem(source=source, line=line, document="", path="", message=message)
        )

    def validate_text(self, text: str, source: str) -> None:
        first = len(self.problems)
        self._validate_text(text, source)
        self.problems[first:] = sorted(self.problems[first:], key=lambda p: p.line)

    def _validate_text(self, text: str, source: str) -> None:
        seen = 0
        documents: list[Document] = []
        try:
            for document in read_documents(text):
                documents.append(document)
        except YamlError as err:
            where = f"column {err.column}: " if err.column else ""
            self._file_problem(source, f"not accepted as YAML: {where}{err.message}", err.line)
        single = len(documents) == 1
        for document in documents:
            seen += 1
            self.documents += 1
            self.validate_document(document, source, text if single else None)
        if not seen and not any(p.source == source for p in self.problems):
            self._file_problem(source, "no YAML documents")

    # -- one document
    def validate_document(self, doc: Document, source: str, whole_text: str | None) -> None:
        value = doc.value
        if not isinstance(value, Mapping):
            self._add(doc, source, f"document {doc.index}", "", "a document must be a mapping")
            return
        if value.get("kind") == "List" and isinstance(value.get("items"), list):
            for i, item in enumerate(value["items"]):
                self._object(doc, source, item, f"items[{i}]", f"document {doc.index} item {i}")
            return
        if "kind" not in value and "apiVersion" not in value:
            label = f"document {doc.index} (policy {_short_name(value.get('name'))})"
            self._policy(doc, source, label, value if whole_text is None else whole_text)
            return
        self._object(doc, source, value, "", f"document {doc.index}")

    def _object(self, doc: Document, source: str, obj: Json, base: str, label: str) -> None:
        if not isinstance(obj, Mapping):
            self._add(doc, source, label, base, "an item must be a mapping")
            return
        kind = obj.get("kind")
        meta: Mapping[str, Any] = (
            obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
        )
        name = "/".join(str(p) for p in (meta.get("namespace"), meta.get("name")) if p)
        if not isinstance(kind, str) or not kind:
            self._add(doc, source, label, join(base, "kind"), "required value")
            return
        label = f"{label} ({kind} {name})" if name else f"{label} ({kind})"
        if kind in _OURS:
            self._crd_object(doc, source, label, base, obj)
        elif (
            kind == "ConfigMap"
            and isinstance(obj.get("data"), Mapping)
            and (CONFIGMAP_KEY in obj["data"])
        ):
            self._policy_configmap(doc, source, label, base, obj)
        elif not self.ignore_unknown:
            what = "a ConfigMap without data key policy.yaml" if kind == "ConfigMap" else kind
            self._add(
                doc,
                source,
                label,
                join(base, "kind"),
                f"not checked: {what} (cpn validate checks AIJob, MemberCluster, "
                "policy ConfigMaps and policy documents)",
            )

    def _crd_object(
        self, doc: Document, source: str, label: str, base: str, obj: Mapping[str, Json]
    ) -> None:
        api_version, kind = obj.get("apiVersion"), obj["kind"]
        crd = self.crds.get((str(api_version), kind))
        if crd is None:
            served = sorted(v for (v, k_), _ in self.crds.items() if k_ == kind)
            message = (
                f"unknown apiVersion {_short(api_version)} for {kind}; served: {', '.join(served)}"
                if served
                else f"no CRD for {kind} found (see --crds)"
            )
            self._add(doc, source, label, join(base, "apiVersion"), message)
            return
        as_kubectl = kubectl_booleans(obj, doc.nodes, base)
        pruned = prune_nulls({key: v for key, v in as_kubectl.items() if key != "status"})
        checker = SchemaChecker()
        # ObjectMeta is the API server's own: its checks, not the CRD's `metadata: {type: object}`.
        self._metadata(checker, pruned.get("metadata"), crd.namespaced)
        rest = {key: v for key, v in pruned.items() if key != "metadata"}
        checker.check(rest, crd.schema, "")
        if not checker.errors:
            checker.rules(rest, crd.schema, "")
        self.unchecked_rules |= checker.unchecked_rules
        for path, message in checker.errors:
            self._add(doc, source, label, _rebase(base, path), message)
        if checker.errors or kind != "AIJob":
            return
        for path, message in aijob_meaning(pruned):
            self._add(doc, source, label, _rebase(base, path), message)

    def _metadata(self, checker: SchemaChecker, meta: Json, namespaced: bool) -> None:
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
                f"{_short(name)} is not a lowercase DNS subdomain (a-z, 0-9, '-', '.'; "
                "at most 253 characters)",
            )
        namespace = meta.get("namespace")
        if namespace is not None:
            if not namespaced:
                checker.error("metadata.namespace", "this kind is cluster-scoped: no namespace")
            elif not isinstance(namespace, str) or not _DNS_LABEL.fullmatch(namespace):
                checker.error("metadata.namespace", f"{_short(namespace)} is not a DNS label")
        for field in ("labels", "annotations"):
            _string_map(checker, meta.get(field), f"metadata.{field}")

    def _policy_configmap(
        self, doc: Document, source: str, label: str, base: str, obj: Mapping[str, Json]
    ) -> None:
        key_path = join(join(base, "data"), CONFIGMAP_KEY)
        # The envelope first (the API server's checks), so that every error of the reader
        # below is a path inside the policy document.
        envelope = SchemaChecker()
        _string_map(envelope, obj["data"], "data")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version is not None and not isinstance(version, str):
            envelope.error("metadata.resourceVersion", "must be a string")
        for path, message in envelope.errors:
            self._add(doc, source, label, _rebase(base, path), message)
        if envelope.errors:
            return
        try:
            parse_policy_configmap(obj)
        except PolicyError as err:
            inner = _inner_lines(doc, key_path)
            for error in err.errors:
                path = _rebase(key_path, error.path)
                line = inner.get(error.path, 0) if error.path else 0
                self._add(doc, source, label, path, error.message, line=line)

    def _policy(self, doc: Document, source: str, label: str, policy: Json) -> None:
        try:
            parse_policy(policy)
        except PolicyError as err:
            for error in err.errors:
                self._add(doc, source, label, error.path, error.message)

    def _add(
        self, doc: Document, source: str, label: str, path: str, message: str, line: int = 0
    ) -> None:
        self.problems.append(
            Problem(
                source=source,
                line=line or _line_of(doc.lines, path) or doc.line,
                document=label,
                path=path,
                message=message,
            )
        )


def _short_name(value: Json) -> str:
    return str(value) if isinstance(value, str) and value else "unnamed"


def _rebase(base: str, path: str) -> str:
    if not base:
        return path
    if not path:
        return base
    return f"{base}{path}" if path.startswith("[") else f"{base}.{path}"


def _line_of(lines: Mapping[str, int], path: str) -> int:
    """The line of ``path`` or of its nearest ancestor that is in the document."""
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return 0


def _inner_lines(doc: Document, key_path: str) -> dict[str, int]:
    """Lines of the fields of a policy embedded as a literal block (``policy.yaml: |``)."""
    node = doc.nodes.get(key_path)
    if not isinstance(node, ScalarNode) or node.style != "|":
        return {}
    try:
        inner = list(read_documents(str(node.value)))
    except YamlError:
        return {}
    if len(inner) != 1:
        return {}
    offset = node.start_mark.line + 1  # the text starts on the line after the '|'
    return {path: line + offset for path, line in inner[0].lines.items()}


def _string_map(checker: SchemaChecker, value: Json, path: str) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping):
        checker.error(path, f"must be a mapping of strings, got {_type_name(value)}")
        return
    for key, item in value.items():
        if not isinstance(item, str):
            checker.error(
                join(path, str(key)),
                f"must be a string, got {_type_name(item)} {_short(item)} (quote it)",
            )


# --- AIJob meaning ----------------------------------------------------------------------


def aijob_meaning(body: Mapping[str, Json]) -> list[tuple[str, str]]:
    """What the operator and the member cluster refuse in a schema-valid AIJob."""
    found: list[tuple[str, str]] = []
    try:
        parse_aijob(body, user=PLACEHOLDER_USER, group=PLACEHOLDER_GROUP)
    except InvalidSpec as err:
        found += [(error.path, error.message) for error in err.errors]
    except (TypeError, ValueError) as err:  # the schema should make this impossible
        found.append(("spec", f"not readable by the operator: {err}"))
    template = body.get("spec", {}).get("template", {})
    checker = SchemaChecker()
    meta = template.get("metadata")
    if meta is not None and not isinstance(meta, Mapping):
        checker.error("spec.template.metadata", f"must be a mapping, got {_type_name(meta)}")
        meta = None
    for field in ("labels", "annotations"):
        _string_map(checker, (meta or {}).get(field), f"spec.template.metadata.{field}")
    annotations = (meta or {}).get("annotations")
    if isinstance(annotations, Mapping) and isinstance(
        annotations.get(k.ANNOTATION_PER_GPU_TYPE), str
    ):
        path = join("spec.template.metadata.annotations", k.ANNOTATION_PER_GPU_TYPE)
        for message in per_gpu_type_problems(annotations[k.ANNOTATION_PER_GPU_TYPE]):
            checker.error(path, message)
    pod = template.get("spec")
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    if isinstance(containers, list):
        for i, container in enumerate(containers):
            where = f"spec.template.spec.containers[{i}]"
            if not isinstance(container, Mapping):
                checker.error(where, f"must be a mapping, got {_type_name(container)}")
                continue
            for field in ("name", "image"):
                if not isinstance(container.get(field), str) or not container[field]:
                    checker.error(join(where, field), "required value (a non-empty string)")
    elif containers is not None:
        checker.error("spec.template.spec.containers", "must be a list")
    reported = {path for path, _ in found}  # the operator's reader already named these
    return found + [error for error in checker.errors if error[0] not in reported]


def per_gpu_type_problems(raw: str) -> list[str]:
    """Problems of a ``cpn.io/per-gpu-type`` annotation: JSON ``{annotation: {GPU type: value}}``.

    The operator silently ignores what it cannot use (bad JSON, a key that is not the canonical
    name of the chosen GPU type), so the mistake is only visible here.
    """
    try:
        table = json.loads(raw)
    except json.JSONDecodeError as err:
        return [f"not JSON: {err.msg} at character {err.pos}"]
    except RecursionError:
        return ["JSON nested too deeply"]
    if not isinstance(table, dict):
        return ['must be a JSON object {"annotation": {"GPU type": "value"}}']
    problems = []
    canonical = set(gpu_types())
    for name, values in table.items():
        if not isinstance(values, dict):
            problems.append(f"{name!r}: must be a JSON object of GPU type to value")
            continue
        for gpu, item in values.items():
            if not isinstance(item, str):
                problems.append(f"{name!r} for {gpu!r}: the value must be a JSON string")
            if gpu in canonical:
                continue
            try:
                hint = f"; write {canonical_gpu(gpu)!r}"
            except UnknownGpu:
                hint = ""
            problems.append(
                f"{name!r}: {gpu!r} is not a canonical GPU type, so it never matches{hint}"
            )
    return problems
