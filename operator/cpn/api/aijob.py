"""Read an AIJob object into a core :class:`~cpn.core.model.Job`.

The CRD's schema checks structure on the API server; this reader checks it
again (``cpn validate`` reads files no server has seen, and nothing here may
trust its input) and then checks meaning: GPU types that exist, quantities that
parse, sizes that make sense. Every problem is collected and raised at once as
:class:`~cpn.core.errors.InvalidSpec` whose errors name the field path
(``spec.resources.gpus``, ``spec.resources.gpuTypes[1]``,
``spec.model.features["lr\\u200b"]``). Nothing else is ever raised, whatever
the body holds: wrong types, huge or non-finite numbers, unknown keys,
invisible or look-alike Unicode in names, hostile annotations.

User and group are passed in by the caller, who takes them from the
namespace: nothing a user writes in the AIJob can set them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from cpn.api import constants as k
from cpn.api.fields import FieldReader, describe_value, join, short_repr
from cpn.api.quantity import parse_quantity
from cpn.core.errors import FieldError, InvalidSpec
from cpn.core.model import DataInput, Job, frozen_map
from predictor.catalog import UnknownName, expand_gpu_types

_GIB = float(1 << 30)
_MODEL_FEATURES = {
    "datasetSamples": "dataset_samples",
    "epochs": "epochs",
    "batchSize": "batch_size",
    "steps": "steps",
}

# Bounds: the CRD's where it has them, else far above any real job (a typo, not a job).
MAX_GPUS_PER_WORKER = 64
MAX_WORKERS = 512
MAX_PRIORITY = 1000
MAX_CPU = 100_000.0  # cores per worker
MAX_MEMORY_GIB = 1 << 20  # 1 PiB per worker
MAX_GPU_MEMORY_GIB = 1024.0
MAX_RUNTIME_S = 31_536_000.0  # a year
MAX_COUNT = 10**15  # samples, steps
MAX_FEATURE = 1e15
MAX_FEATURES = 32
MAX_GPU_TYPES = 32
MAX_DATA_GB = 1e6
MAX_IMAGE_GB = 1e4
MAX_INPUTS = 32
MAX_INPUT_BYTES = 10**15
_BYTES_PER_GB = 1e9
MAX_ANNOTATION_BYTES = 16 * 1024
#: What a member's API server takes: all annotations of an object together (keys and
#: values, in bytes: Kubernetes' TotalAnnotationSizeLimitB), and one request's body (etcd
#: stores objects up to 1.5 MiB by default). cpn keeps room for what it adds to the pod
#: template: the per-GPU-type values (at most MAX_ANNOTATION_BYTES) and its own few.
MEMBER_ANNOTATIONS_BYTES = 256 * 1024
TEMPLATE_ANNOTATIONS_BYTES = MEMBER_ANNOTATIONS_BYTES - MAX_ANNOTATION_BYTES - 1024
MAX_TEMPLATE_BYTES = 1 << 20

#: The keys of each section the CRD defines (a test checks they match crds/aijob.yaml).
KNOWN_KEYS: Mapping[str, tuple[str, ...]] = {
    "spec": (
        "queue",
        "priority",
        "suspend",
        "workers",
        "checkpoint",
        "checkpointIntervalSeconds",
        "runtimeEstimateSeconds",
        "resources",
        "model",
        "inputs",
        "data",
        "image",
        "template",
    ),
    "spec.resources": ("gpus", "gpuShare", "gpuMemoryGiB", "cpu", "memory", "gpuTypes"),
    "spec.model": ("name", "datasetSamples", "epochs", "batchSize", "steps", "features"),
    "spec.inputs[]": ("name", "version", "uri", "sizeBytes", "location"),
    "spec.data": ("cluster", "sizeGB"),
    "spec.image": ("sizeGB",),
}

# Names a person types: printable ASCII only, so no homoglyph, zero-width or bidi control
# can make two different names look the same (or one name look like another).
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/+:-]*")
_PLAIN_TEXT = re.compile(r"[!-~]+")  # printable ASCII, no spaces
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")
_KEY = re.compile(r"[A-Za-z0-9_-]+")
# An input's string fields: what each may hold (the CRD's patterns) and how to say it.
_INPUT_NAME = (
    re.compile(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?"),
    "lower-case letters, digits, '-' and '.', a letter or digit at each end",
)
_INPUT_FORMS = {
    "name": (63, *_INPUT_NAME),
    "version": (
        128,
        re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:-]*"),
        "letters, digits and . _ + : - (a version or a digest such as sha256:...)",
    ),
    "uri": (
        2048,
        re.compile(r"[a-z][a-z0-9+.-]*://[!-~]+"),
        "a URI with its scheme (s3://bucket/path, pvc://volume/path)",
    ),
    "location": (253, *_INPUT_NAME),
}
# Label and annotation keys ([prefix/]name) and label values, as Kubernetes checks them.
_QUALIFIED_NAME = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    dict: "object",
    list: "array",
    type(None): "null",
}


def job_key(body: Mapping[str, Any]) -> str:
    """The key of an AIJob in the core: ``namespace/name``."""
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def parse_time(value: str | None) -> float | None:
    """RFC 3339 timestamp to epoch seconds (None stays None)."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _odd_character(text: str) -> str:
    """Why ``text`` is not plain ASCII ("" when it is)."""
    for index, char in enumerate(text):
        if not " " < char < "\x7f":
            return f"character U+{ord(char):04X} at index {index} is not printable ASCII"
    return ""


class _Reader(FieldReader):
    """Typed access to one AIJob body, collecting a FieldError for each bad field."""

    def integer(self, value: Any, path: str, low: int, high: int, default: int) -> int:
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer() and low <= value <= high:
            return int(value)  # JSON has one number type: 2.0 is 2
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"expected an integer, got {describe_value(value)}")
            return default
        if not low <= value <= high:
            self.error(path, f"must be between {low} and {high}, got {short_repr(value)}")
            return default
        return value

    def number(
        self, value: Any, path: str, low: float, high: float, default: float, *, above: bool = False
    ) -> float:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(path, f"expected a number, got {describe_value(value)}")
            return default
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number) or number > high or number < low or (above and number <= low):
            side = f"above {low:g}" if above else f"at least {low:g}"
            self.error(path, f"must be a finite number {side} and at most {high:g}, got {value!r}")
            return default
        return number

    def boolean(self, value: Any, path: str) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            self.error(path, f"expected true or false, got {describe_value(value)}")
            return False
        return value

    def string(self, value: Any, path: str, max_len: int, pattern: re.Pattern[str]) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            self.error(path, f"expected a string, got {describe_value(value)}")
            return ""
        if len(value) > max_len:
            self.error(path, f"is longer than {max_len} characters")
            return ""
        odd = _odd_character(value)
        if odd:
            self.error(path, f"{short_repr(value)}: {odd}")
            return ""
        if value and not pattern.fullmatch(value):
            self.error(
                path, f"{short_repr(value)}: only letters, digits and . _ / + : - are allowed"
            )
            return ""
        return value

    def quantity(self, value: Any, path: str, high: float, scale: float = 1.0) -> float:
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            self.error(path, f"expected a Kubernetes quantity, got {describe_value(value)}")
            return 0.0
        if isinstance(value, str) and (len(value) > 64 or _odd_character(value)):
            self.error(path, f"not a Kubernetes quantity: {short_repr(value)}")
            return 0.0
        try:
            exact: Decimal = parse_quantity(value)
            number = float(exact) / scale
        except (ValueError, TypeError, ArithmeticError, InvalidOperation):
            self.error(path, f"not a Kubernetes quantity: {short_repr(value)}")
            return 0.0
        if not math.isfinite(number) or number < 0 or number > high:
            self.error(path, f"must be a non-negative quantity of at most {high:g}, got {value!r}")
            return 0.0
        return number

    def time(self, value: Any, path: str) -> float | None:
        if value is None or value == "":
            return None
        if not isinstance(value, str) or len(value) > 64:
            self.error(path, f"expected an RFC 3339 time, got {describe_value(value)}")
            return None
        try:
            return parse_time(value)
        except (ValueError, OverflowError):
            self.error(path, f"not an RFC 3339 time: {short_repr(value)}")
            return None


def _gpu_types(reader: _Reader, names: Any) -> frozenset[str]:
    path = "spec.resources.gpuTypes"
    if names is None:
        return frozenset()
    if not isinstance(names, list):
        reader.error(path, f"expected a list of GPU type names, got {describe_value(names)}")
        return frozenset()
    if len(names) > MAX_GPU_TYPES:
        reader.error(path, f"at most {MAX_GPU_TYPES} GPU types, got {len(names)}")
        return frozenset()
    allowed: set[str] = set()
    for index, name in enumerate(names):
        where = f"{path}[{index}]"
        if not isinstance(name, str):
            reader.error(where, f"expected a GPU type name, got {describe_value(name)}")
            continue
        if len(name) > 64 or _odd_character(name):
            why = _odd_character(name) or "is longer than 64 characters"
            reader.error(where, f"GPU type {short_repr(name)}: {why}")
            continue
        try:
            allowed |= expand_gpu_types(name)
        except UnknownName as err:
            reader.error(where, str(err))
    return frozenset(allowed)


def _features(reader: _Reader, model: Mapping[str, Any]) -> dict[str, float]:
    features: dict[str, float] = {}
    for source, target in _MODEL_FEATURES.items():
        path = f"spec.model.{source}"
        value = model.get(source)
        if value is None:
            continue
        if source == "epochs":
            features[target] = reader.number(value, path, 0.0, 100_000.0, 0.0)
        elif source == "batchSize":
            features[target] = float(reader.integer(value, path, 1, 1_048_576, 1))
        else:
            features[target] = float(reader.integer(value, path, 0, MAX_COUNT, 0))
    extra = reader.mapping(model.get("features"), "spec.model.features", None)
    if len(extra) > MAX_FEATURES:
        reader.error("spec.model.features", f"at most {MAX_FEATURES} features, got {len(extra)}")
        return features
    for name, value in extra.items():
        path = join("spec.model.features", name)
        if len(name) > 63 or not _KEY.fullmatch(name):
            reader.error(path, "a feature name is letters, digits, '_' and '-' (at most 63)")
            continue
        features[name] = reader.number(value, path, -MAX_FEATURE, MAX_FEATURE, 0.0)
    return features


def _inputs(reader: _Reader, value: Any) -> tuple[DataInput, ...]:
    """``spec.inputs``: each input's fields checked, names unique."""
    path = "spec.inputs"
    if value is None:
        return ()
    if not isinstance(value, list):
        reader.error(path, f"expected a list of inputs, got {describe_value(value)}")
        return ()
    if len(value) > MAX_INPUTS:
        reader.error(path, f"at most {MAX_INPUTS} inputs, got {len(value)}")
        return ()
    found: list[DataInput] = []
    first: dict[str, int] = {}
    for index, item in enumerate(value):
        where = f"{path}[{index}]"
        fields = reader.mapping(item, where, KNOWN_KEYS["spec.inputs[]"])
        if not isinstance(item, Mapping):
            continue
        for required in ("name", "uri"):
            if required not in fields:
                reader.error(f"{where}.{required}", "is required")
        text = {key: _input_text(reader, fields, where, key) for key in _INPUT_FORMS}
        name = text["name"]
        if name and name in first:
            reader.error(f"{where}.name", f"{name!r} is also {path}[{first[name]}].name")
        first.setdefault(name, index)
        size = reader.integer(fields.get("sizeBytes"), f"{where}.sizeBytes", 0, MAX_INPUT_BYTES, 0)
        found.append(
            DataInput(
                name=name,
                version=text["version"],
                size_gb=size / _BYTES_PER_GB,
                location=text["location"] or None,
            )
        )
    return tuple(found)


def _input_text(reader: _Reader, fields: Mapping[str, Any], where: str, key: str) -> str:
    """The string field ``key`` of an input: plain ASCII (the reader's check), then its form."""
    path = f"{where}.{key}"
    max_len, form, what = _INPUT_FORMS[key]
    text = reader.string(fields.get(key), path, max_len, _PLAIN_TEXT)
    if text and not form.fullmatch(text):
        reader.error(path, f"{short_repr(text)}: expected {what}")
        return ""
    return text


def _template(reader: _Reader, template: Any) -> None:
    if not isinstance(template, Mapping):
        reader.error("spec.template", f"a pod template is required, got {describe_value(template)}")
        return
    pod = template.get("spec")
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    if not isinstance(containers, list) or not containers:
        reader.error("spec.template.spec.containers", "at least one container")
    else:
        for index, container in enumerate(containers):
            where = f"spec.template.spec.containers[{index}]"
            if not isinstance(container, Mapping):
                reader.error(where, f"expected a mapping, got {describe_value(container)}")
                continue
            for field in ("name", "image"):  # the member's API server refuses a Job without
                if not isinstance(container.get(field), str) or not container[field]:
                    reader.error(f"{where}.{field}", "required value (a non-empty string)")
    meta = template.get("metadata")
    if isinstance(meta, Mapping):
        for field in ("labels", "annotations"):
            _string_map(reader, meta.get(field), f"spec.template.metadata.{field}")
        _member_limits(reader, meta)
    size = len(json.dumps(template, default=str).encode())
    if size > MAX_TEMPLATE_BYTES:
        reader.error(
            "spec.template",
            f"is {size} bytes as JSON; a member cluster stores at most {MAX_TEMPLATE_BYTES}"
            " (keep large data in a volume or ConfigMap, not in the pod template)",
        )
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    raw = annotations.get(k.ANNOTATION_PER_GPU_TYPE) if isinstance(annotations, Mapping) else None
    if raw is not None:
        _per_gpu_type(reader, raw)


def _string_map(reader: _Reader, value: Any, path: str) -> None:
    """Labels and annotations: the member's API server takes only strings (checked here, so
    the job is refused at once instead of failing at every dispatch)."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        reader.error(path, f"expected a mapping of strings, got {describe_value(value)}")
        return
    for key, item in value.items():
        if not isinstance(item, str):
            kind = _JSON_TYPES.get(type(item), type(item).__name__)
            reader.error(
                join(path, str(key)), f"must be a string, got {kind} {short_repr(item)} (quote it)"
            )


def _member_limits(reader: _Reader, meta: Mapping[str, Any]) -> None:
    """What the member's API server would refuse on every create (422), refused here:
    keys that are not qualified names, label values that are not, annotations too big."""
    for field in ("labels", "annotations"):
        items = meta.get(field)
        if not isinstance(items, Mapping):
            continue
        path = f"spec.template.metadata.{field}"
        for key, value in items.items():
            if not _qualified_key(key):
                reader.error(
                    join(path, str(key)),
                    "not a valid key: [prefix/]name, name ≤ 63 letters, digits, '-', '_', '.'"
                    " (starting and ending with a letter or digit), prefix a DNS name",
                )
            elif field == "labels" and isinstance(value, str) and not _LABEL_VALUE.fullmatch(value):
                reader.error(
                    join(path, key),
                    f"{short_repr(value)} is not a label value (≤ 63 letters, digits, '-', "
                    "'_', '.', starting and ending with a letter or digit)",
                )
        if field == "annotations":
            total = sum(
                len(str(key).encode()) + len(value.encode())
                for key, value in items.items()
                if isinstance(value, str)
            )
            if total > TEMPLATE_ANNOTATIONS_BYTES:
                reader.error(
                    path,
                    f"{total} bytes in all; a member cluster takes at most "
                    f"{MEMBER_ANNOTATIONS_BYTES} bytes of annotations, of which cpn keeps "
                    f"{MEMBER_ANNOTATIONS_BYTES - TEMPLATE_ANNOTATIONS_BYTES} for its own: at most "
                    f"{TEMPLATE_ANNOTATIONS_BYTES}",
                )


def _qualified_key(key: Any) -> bool:
    if not isinstance(key, str):
        return False
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and bool(_QUALIFIED_NAME.fullmatch(name))


def _per_gpu_type(reader: _Reader, raw: Any) -> None:
    """The operator reads this annotation at dispatch: refuse what it could not read safely.

    Bad JSON or a wrong shape is ignored at dispatch (``cpn validate`` reports it); a huge
    or deeply nested value would stop the dispatch, so the job is refused here.
    """
    path = join("spec.template.metadata.annotations", k.ANNOTATION_PER_GPU_TYPE)
    if not isinstance(raw, str):
        return
    if len(raw) > MAX_ANNOTATION_BYTES:
        reader.error(path, f"is longer than {MAX_ANNOTATION_BYTES} characters")
        return
    try:
        json.loads(raw)
    except RecursionError:
        reader.error(path, "JSON nested too deeply")
    except ValueError:
        pass


def _metadata(reader: _Reader, meta: Mapping[str, Any]) -> tuple[str, float]:
    for field in ("name", "namespace"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, str) or not _DNS_SUBDOMAIN.fullmatch(value):
            why = _odd_character(value) if isinstance(value, str) else ""
            reader.error(
                f"metadata.{field}",
                f"{short_repr(value)} is not a DNS name (lower-case letters, digits, '-', '.')"
                + (f": {why}" if why else ""),
            )
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    submit = reader.time(meta.get("creationTimestamp"), "metadata.creationTimestamp")
    return key, submit or 0.0


def parse_aijob(body: Mapping[str, Any], *, user: str, group: str) -> Job:
    """The core view of an AIJob; raises InvalidSpec naming each bad field (and nothing else).

    The returned job has no estimate yet: the caller attaches one.
    """
    if not isinstance(body, Mapping):
        raise InvalidSpec(
            [FieldError("", f"an AIJob must be a mapping, got {describe_value(body)}")]
        )
    reader = _Reader()
    meta = reader.mapping(body.get("metadata"), "metadata", None)
    key, submit_s = _metadata(reader, meta)
    spec = reader.mapping(body.get("spec"), "spec", KNOWN_KEYS["spec"])
    status = reader.mapping(body.get("status"), "status", None)
    res = reader.mapping(spec.get("resources"), "spec.resources", KNOWN_KEYS["spec.resources"])
    model = reader.mapping(spec.get("model"), "spec.model", KNOWN_KEYS["spec.model"])
    data = reader.mapping(spec.get("data"), "spec.data", KNOWN_KEYS["spec.data"])
    image = reader.mapping(spec.get("image"), "spec.image", KNOWN_KEYS["spec.image"])
    if isinstance(spec.get("resources"), Mapping) and "gpus" not in res:
        reader.error("spec.resources.gpus", "is required (GPUs per worker, 0 for none)")
    elif "resources" not in spec and isinstance(body.get("spec"), Mapping):
        reader.error("spec.resources", "is required (at least resources.gpus)")
    gpus = reader.integer(res.get("gpus"), "spec.resources.gpus", 0, MAX_GPUS_PER_WORKER, 0)
    share = reader.number(res.get("gpuShare"), "spec.resources.gpuShare", 0.0, 1.0, 1.0, above=True)
    if share < 1.0 and gpus != 1:
        reader.error("spec.resources.gpuShare", "sharing a GPU needs gpus: 1")
    _template(reader, spec.get("template"))
    data_gb = reader.number(data.get("sizeGB"), "spec.data.sizeGB", 0.0, MAX_DATA_GB, 0.0)
    errors_before = len(reader.errors)
    data_cluster = reader.string(data.get("cluster"), "spec.data.cluster", 253, _DNS_SUBDOMAIN)
    if data_gb and not data_cluster and len(reader.errors) == errors_before:
        reader.error("spec.data.cluster", "where the data is must be given")
    estimate = reader.number(
        spec.get("runtimeEstimateSeconds"), "spec.runtimeEstimateSeconds", 1.0, MAX_RUNTIME_S, 0.0
    )
    checkpoint = reader.boolean(spec.get("checkpoint"), "spec.checkpoint")
    interval = reader.number(
        spec.get("checkpointIntervalSeconds"),
        "spec.checkpointIntervalSeconds",
        1.0,
        MAX_RUNTIME_S,
        0.0,
    )
    if interval and not checkpoint:
        reader.error("spec.checkpointIntervalSeconds", "needs checkpoint: true")
    job = Job(
        key=key,
        submit_s=submit_s,
        gpus_per_worker=gpus,
        workers=reader.integer(spec.get("workers"), "spec.workers", 1, MAX_WORKERS, 1),
        gpu_share=share,
        gpu_memory_gib=reader.number(
            res.get("gpuMemoryGiB"), "spec.resources.gpuMemoryGiB", 0.0, MAX_GPU_MEMORY_GIB, 0.0
        ),
        cpu=reader.quantity(res.get("cpu"), "spec.resources.cpu", MAX_CPU),
        memory_gib=reader.quantity(
            res.get("memory"), "spec.resources.memory", MAX_MEMORY_GIB, _GIB
        ),
        gpu_types=_gpu_types(reader, res.get("gpuTypes")),
        user=user,
        group=group,
        queue=reader.string(spec.get("queue"), "spec.queue", 63, _PLAIN),
        priority=reader.integer(
            spec.get("priority"), "spec.priority", -MAX_PRIORITY, MAX_PRIORITY, 0
        ),
        model=reader.string(model.get("name"), "spec.model.name", 128, _PLAIN),
        features=frozen_map(_features(reader, model)),
        data_cluster=data_cluster or None,
        data_gb=data_gb,
        image_gb=reader.number(image.get("sizeGB"), "spec.image.sizeGB", 0.0, MAX_IMAGE_GB, 0.0),
        inputs=_inputs(reader, spec.get("inputs")),
        user_estimate_s=estimate or None,
        attempts=reader.integer(status.get("attempts"), "status.attempts", 0, 1_000_000, 0),
        not_before_s=reader.time(status.get("notBefore"), "status.notBefore") or 0.0,
        suspended=reader.boolean(spec.get("suspend"), "spec.suspend"),
        checkpoint=checkpoint,
        checkpoint_interval_s=interval or None,
    )
    if reader.errors:
        raise InvalidSpec(reader.errors, where=key)
    return job
