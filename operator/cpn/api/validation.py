"""Offline checks of AIJobs, MemberClusters and policies, as the hub would make them.

What ``cpn validate FILE...`` (:mod:`cpn.cli.validate`) runs before ``kubectl apply``.
Each file (``-`` is standard input, a directory means its ``*.yaml``/``*.yml``)
may hold several YAML documents. Every document is recognised and checked the
way the hub would check it:

- ``AIJob`` and ``MemberCluster`` (``cpn.io``): first the CRD's structural
  schema from ``crds/`` (required fields, types, bounds, enums, lengths,
  unknown fields as ``kubectl apply``'s strict field validation refuses them,
  nulls pruned as the API server prunes them), then the CEL rules of the CRD
  (both in :mod:`cpn.api.crdschema`; a rule without a hand implementation is
  reported on standard error). An AIJob the schema accepts then goes through
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

YAML is read as :mod:`cpn.api.documents` reads it. An AIJob or
MemberCluster is then seen as kubectl sends it: kubectl reads YAML 1.1, so a
plain ``yes``/``no``/``on``/``off`` is a boolean there (a policy stays YAML 1.2:
the operator reads it with the same loader). Each problem is one
:class:`Problem`, printed as ``FILE:LINE: document N (Kind name): field.path: message``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yaml.nodes import ScalarNode

from cpn.api import constants as k
from cpn.api.aijob import parse_aijob
from cpn.api.crdschema import (
    CrdVersion,
    SchemaChecker,
    check_metadata,
    kubectl_booleans,
    prune_nulls,
    short,
    string_map,
    type_name,
)
from cpn.api.documents import Document, Json, line_of, read_documents
from cpn.api.fields import join
from cpn.api.policy import CONFIGMAP_KEY, parse_policy, parse_policy_configmap
from cpn.api.policydomains import domain_notes
from cpn.api.yamlsafe import YamlError
from cpn.core.errors import InvalidSpec, PolicyError
from cpn.core.policy import QueuePolicy
from predictor.catalog import UnknownName as UnknownGpu
from predictor.catalog import canonical_gpu, gpu_types

#: Largest file read (documents inside are bounded by the loader's depth rules; a policy
#: inside a ConfigMap also by the policy reader's own size cap).
MAX_FILE_BYTES = 16 * 1024 * 1024
PLACEHOLDER_USER = "cpn-validate"
PLACEHOLDER_GROUP = "cpn-validate"
_OURS = ("AIJob", "MemberCluster")


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


# --- documents --------------------------------------------------------------------------


class Validator:
    """Checks documents; ``problems`` collects what it finds."""

    def __init__(
        self, crds: Mapping[tuple[str, str], CrdVersion], *, ignore_unknown: bool = False
    ) -> None:
        self.crds = crds
        self.ignore_unknown = ignore_unknown
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []  # worth a look, not a refusal
        self.domains_seen = False  # a valid policy with domains: the rest is run-time
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
                f"unknown apiVersion {short(api_version)} for {kind}; served: {', '.join(served)}"
                if served
                else f"no CRD for {kind} found (see --crds)"
            )
            self._add(doc, source, label, join(base, "apiVersion"), message)
            return
        as_kubectl = kubectl_booleans(obj, doc.nodes, base)
        pruned = prune_nulls({key: v for key, v in as_kubectl.items() if key != "status"})
        checker = SchemaChecker()
        # ObjectMeta is the API server's own: its checks, not the CRD's `metadata: {type: object}`.
        check_metadata(checker, pruned.get("metadata"), crd.namespaced)
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

    def _policy_configmap(
        self, doc: Document, source: str, label: str, base: str, obj: Mapping[str, Json]
    ) -> None:
        key_path = join(join(base, "data"), CONFIGMAP_KEY)
        # The envelope first (the API server's checks), so that every error of the reader
        # below is a path inside the policy document.
        envelope = SchemaChecker()
        string_map(envelope, obj["data"], "data")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version is not None and not isinstance(version, str):
            envelope.error("metadata.resourceVersion", "must be a string")
        for path, message in envelope.errors:
            self._add(doc, source, label, _rebase(base, path), message)
        if envelope.errors:
            return
        inner = _inner_lines(doc, key_path)
        try:
            policy = parse_policy_configmap(obj)
        except PolicyError as err:
            for error in err.errors:
                path = _rebase(key_path, error.path)
                line = inner.get(error.path, 0) if error.path else 0
                self._add(doc, source, label, path, error.message, line=line)
            return
        for path, message in self._notes(policy):
            line = inner.get(path, 0)
            self._add(doc, source, label, _rebase(key_path, path), message, line=line, warn=True)

    def _policy(self, doc: Document, source: str, label: str, policy: Json) -> None:
        try:
            parsed = parse_policy(policy)
        except PolicyError as err:
            for error in err.errors:
                self._add(doc, source, label, error.path, error.message)
            return
        for path, message in self._notes(parsed):
            self._add(doc, source, label, path, message, warn=True)

    def _notes(self, policy: QueuePolicy) -> list[tuple[str, str]]:
        self.domains_seen = self.domains_seen or bool(policy.domains)
        return [(path, f"warning: {message}") for path, message in domain_notes(policy)]

    def _add(
        self,
        doc: Document,
        source: str,
        label: str,
        path: str,
        message: str,
        line: int = 0,
        *,
        warn: bool = False,
    ) -> None:
        (self.warnings if warn else self.problems).append(
            Problem(
                source=source,
                line=line or line_of(doc.lines, path) or doc.line,
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
        checker.error("spec.template.metadata", f"must be a mapping, got {type_name(meta)}")
        meta = None
    for field in ("labels", "annotations"):
        string_map(checker, (meta or {}).get(field), f"spec.template.metadata.{field}")
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
                checker.error(where, f"must be a mapping, got {type_name(container)}")
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
