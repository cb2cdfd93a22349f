"""What the predictor knows before it has seen a single job: GPUs, models, benchmarks.

Three data files ship in ``predictor/data/`` with their sources (see its README):

- ``gpus.yaml``: public specification facts per canonical GPU type (upper case:
  ``V100-16GB``, ``A100-80GB``, ``RTX2080TI``...), with the aliases Kubernetes nodes and
  ``nvidia-smi`` use;
- ``models.yaml``: parameters and forward MACs per sample of common training workloads;
- ``benchmarks.csv``: measured training throughput (samples/s) per model, GPU type,
  batch size and GPU count; Gavel's table by default (see :mod:`predictor.gavel`).

Names are matched case-insensitively, ignoring spaces, dashes, underscores (and dots for
models). A GPU name may carry a leading ``NVIDIA``/``Tesla``/``GeForce``/``Quadro`` word
and GFD's ``-SHARED`` suffix; a model name may carry Gavel's ``(batch size N)`` suffix.
A bare family name resolves to one documented default variant (``V100`` -> ``V100-16GB``,
because Gavel's V100 numbers were measured on 16 GB cards; ``A100`` -> ``A100-40GB``);
:func:`expand_gpu_types` gives every variant of a family instead.

:func:`throughput_ratio` answers "how many times faster is GPU type B than A for this
job": from measured benchmarks when it can, otherwise from the catalog (see its
docstring for the formula and why).
"""

from __future__ import annotations

import csv
import itertools
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "BenchmarkError",
    "BenchmarkRow",
    "BenchmarkTable",
    "GpuSpec",
    "ModelSpec",
    "UnknownName",
    "canonical_gpu",
    "canonical_model",
    "catalog_ratio",
    "expand_gpu_types",
    "gpu_spec",
    "gpu_types",
    "model_input",
    "model_names",
    "model_spec",
    "precision_class",
    "throughput_ratio",
]


class UnknownName(ValueError):
    """A GPU type or model name that no catalog entry or alias matches."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"unknown {kind} {name!r}")
        self.kind = kind
        self.name = name


class BenchmarkError(ValueError):
    """A benchmark file is malformed; the message names the file and row."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """Public specification facts of one GPU type (per Kubernetes GPU device)."""

    name: str
    family: str
    arch: str
    fp32_tflops: float
    fp16_tflops: float  # dense tensor-core FP16 with FP32 accumulate where available
    memory_gib: float
    bandwidth_gbs: float
    #: dense TF32 tensor-core TFLOPS (Ampere and later); 0 where the GPU has none
    tf32_tflops: float = 0.0
    #: GPU-to-GPU bandwidth inside one server, GB/s each way (NVLink or the PCIe slot);
    #: 0 when unknown (multi-GPU predictions then assume the anchors' scaling)
    link_gbs: float = 0.0
    interconnect: str = ""
    aliases: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """Public facts of one training workload."""

    name: str
    domain: str
    params_m: float
    forward_gmacs: float  # forward multiply-accumulates per sample at `input`
    input: str = ""
    estimated: bool = False
    aliases: tuple[str, ...] = ()
    note: str = ""
    #: other inputs this model is commonly trained on: (input, params_m, forward_gmacs)
    variants: tuple[tuple[str, float, float], ...] = ()

    def for_input(self, input_name: str) -> ModelSpec:
        """These facts for ``input_name`` (a key of ``variants``), else unchanged."""
        wanted = input_name.strip().lower()
        for name, params_m, gmacs in self.variants:
            if name == wanted:
                return replace(self, input=name, params_m=params_m, forward_gmacs=gmacs)
        return self

    @property
    def train_gflops_per_sample(self) -> float:
        """Training FLOPs per sample: 2 FLOPs per MAC, backward twice the forward."""
        return 6.0 * self.forward_gmacs


# --------------------------------------------------------------------------- names

_GPU_PREFIXES = ("nvidia", "tesla", "geforce", "quadro")
_BATCH_SUFFIX = re.compile(r"\(\s*batch\s*size\s*\d+\s*\)\s*$", re.IGNORECASE)
_NON_ALNUM = re.compile(r"[^a-z0-9]")


def gpu_key(name: str) -> str:
    """Normalised matching key of a GPU name (lower case, alphanumerics, no vendor words)."""
    key = _NON_ALNUM.sub("", name.lower())
    if key.endswith("shared") and len(key) > len("shared"):
        key = key[: -len("shared")]
    changed = True
    while changed:
        changed = False
        for prefix in _GPU_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key = key[len(prefix) :]
                changed = True
    return key


def model_key(name: str) -> str:
    """Normalised matching key of a model name (drops Gavel's "(batch size N)")."""
    return _NON_ALNUM.sub("", _BATCH_SUFFIX.sub("", name).lower())


def batch_size_in_name(name: str) -> int | None:
    """The N of a Gavel job-type name like ``"ResNet-50 (batch size 64)"``, else None."""
    match = re.search(r"\(\s*batch\s*size\s*(\d+)\s*\)\s*$", name, re.IGNORECASE)
    return int(match.group(1)) if match else None


# --------------------------------------------------------------------------- catalogs


def data_text(filename: str) -> str:
    """The text of ``filename`` in the predictor's packaged data directory."""
    return resources.files("predictor").joinpath("data", filename).read_text(encoding="utf-8")


def _aliases(entry: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(alias) for alias in entry.get("aliases") or ())


@dataclass(frozen=True, slots=True)
class _Catalogs:
    gpus: Mapping[str, GpuSpec]
    models: Mapping[str, ModelSpec]
    gpu_index: Mapping[str, str]  # normalised key -> canonical GPU type
    model_index: Mapping[str, str]  # normalised key -> canonical model
    variant_index: Mapping[str, str]  # normalised key of a variant's alias -> its input
    families: Mapping[str, frozenset[str]]  # normalised family key -> variants


def _index(kind: str, names: Iterable[tuple[str, Iterable[str]]], keyf: Any) -> dict[str, str]:
    index: dict[str, str] = {}
    for canonical, aliases in names:
        for alias in (canonical, *aliases):
            key = keyf(alias)
            if not key:
                raise ValueError(f"{kind} alias {alias!r} of {canonical} is empty once normalised")
            if index.get(key, canonical) != canonical:
                raise ValueError(
                    f"{kind} alias {alias!r} maps to both {index[key]} and {canonical}"
                )
            index[key] = canonical
    return index


@cache
def _catalogs() -> _Catalogs:
    gdoc = yaml.safe_load(data_text("gpus.yaml"))["gpus"]
    gpus = {
        name: GpuSpec(
            name=name,
            family=str(e["family"]),
            arch=str(e["arch"]),
            fp32_tflops=float(e["fp32_tflops"]),
            fp16_tflops=float(e["fp16_tflops"]),
            memory_gib=float(e["memory_gib"]),
            bandwidth_gbs=float(e["bandwidth_gbs"]),
            tf32_tflops=float(e.get("tf32_tflops", 0.0)),
            link_gbs=float(e.get("link_gbs", 0.0)),
            interconnect=str(e.get("interconnect", "")),
            aliases=_aliases(e),
            note=str(e.get("note", "")),
        )
        for name, e in gdoc.items()
    }
    mdoc = yaml.safe_load(data_text("models.yaml"))["models"]
    models = {
        name: ModelSpec(
            name=name,
            domain=str(e["domain"]),
            params_m=float(e["params_m"]),
            forward_gmacs=float(e["forward_gmacs"]),
            input=str(e.get("input", "")),
            estimated=bool(e.get("estimated", False)),
            aliases=_aliases(e),
            note=str(e.get("note", "")),
            variants=tuple(
                (str(k).lower(), float(v["params_m"]), float(v["forward_gmacs"]))
                for k, v in (e.get("variants") or {}).items()
            ),
        )
        for name, e in mdoc.items()
    }
    families: dict[str, set[str]] = defaultdict(set)
    for spec in gpus.values():
        families[gpu_key(spec.family)].add(spec.name)
    # a variant's alias names the model on that input (Lambda's bert_base_squad)
    variant_aliases = {
        model_key(str(alias)): (name, str(k).lower())
        for name, e in mdoc.items()
        for k, v in (e.get("variants") or {}).items()
        for alias in v.get("aliases") or ()
    }
    model_aliases = [
        (m.name, (*m.aliases, *(a for a, (n, _) in variant_aliases.items() if n == m.name)))
        for m in models.values()
    ]
    return _Catalogs(
        gpus=gpus,
        models=models,
        gpu_index=_index("GPU", ((g.name, g.aliases) for g in gpus.values()), gpu_key),
        model_index=_index("model", model_aliases, model_key),
        variant_index={key: input_name for key, (_, input_name) in variant_aliases.items()},
        families={key: frozenset(names) for key, names in families.items()},
    )


def gpu_types() -> tuple[str, ...]:
    """Every canonical GPU type of the catalog, in catalog order."""
    return tuple(_catalogs().gpus)


def model_names() -> tuple[str, ...]:
    """Every canonical model name of the catalog, in catalog order."""
    return tuple(_catalogs().models)


def canonical_gpu(name: str) -> str:
    """Canonical GPU type of ``name`` (an alias, a GFD label value, an nvidia-smi name).

    Raises :class:`UnknownName` naming the input when nothing matches.
    """
    found = _catalogs().gpu_index.get(gpu_key(name))
    if found is None:
        raise UnknownName("GPU type", name)
    return found


def canonical_model(name: str) -> str:
    """Canonical model name of ``name``; raises :class:`UnknownName` naming the input."""
    found = _catalogs().model_index.get(model_key(name))
    if found is None:
        raise UnknownName("model", name)
    return found


def model_input(name: str) -> str:
    """The input a model name implies: a variant's alias names one (``bert_base_squad`` ->
    ``"squad"``), any other name none (``""``)."""
    return _catalogs().variant_index.get(model_key(name), "")


def expand_gpu_types(name: str) -> frozenset[str]:
    """Every canonical type ``name`` allows: a family name gives all its variants.

    ``"V100"`` -> ``{"V100-16GB", "V100-32GB", "V100S-32GB"}``; ``"A100-80GB"`` ->
    ``{"A100-80GB"}``. Raises :class:`UnknownName` when ``name`` matches nothing.
    """
    variants = _catalogs().families.get(gpu_key(name))
    if variants is not None:
        return variants
    return frozenset({canonical_gpu(name)})


def gpu_spec(gpu_type: str) -> GpuSpec:
    """Specification of ``gpu_type`` (any alias)."""
    return _catalogs().gpus[canonical_gpu(gpu_type)]


def model_spec(model: str) -> ModelSpec:
    """Catalog facts of ``model`` (any alias)."""
    return _catalogs().models[canonical_model(model)]


# --------------------------------------------------------------------------- benchmarks

_REQUIRED = ("model", "gpu_type", "batch_size", "samples_per_s")
_MODEL_FEATURES = ("params_m", "forward_gmacs")
_GPU_FEATURES = ("fp32_tflops", "bandwidth_gbs", "memory_gib")


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchmarkRow:
    """One measured throughput: ``samples_per_s`` of ``model`` on ``gpus`` x ``gpu_type``.

    ``batch_size`` is per GPU (each data-parallel worker's batch). ``model`` and
    ``gpu_type`` are canonical, or the row's own name when it stands alone.
    """

    model: str
    gpu_type: str
    batch_size: int
    samples_per_s: float
    gpus: int = 1
    precision: str = ""
    input: str = ""
    #: where the row comes from ("FILE line N", and who measured it when the file says)
    origin: str = field(default="", compare=False)


def precision_class(precision: str | None) -> str:
    """``"fp32"``, ``"mixed"`` (FP16, BF16, AMP, TF32: tensor cores) or ``""`` (unknown):
    the classes :func:`effective_tflops` tells apart."""
    p = (precision or "").strip().lower()
    if p == "fp32":
        return "fp32"
    return "mixed" if p in {"fp16", "bf16", "amp", "mixed", "tf32"} else ""


def _float(raw: Mapping[str, str | None], column: str) -> float | None:
    value = (raw.get(column) or "").strip()
    return float(value) if value else None


class BenchmarkTable:
    """Measured throughputs, indexed by (model, GPU type).

    Lookup rules of :meth:`samples_per_s`:

    - GPU count: the measured count nearest to ``gpus`` in ratio (ties: the smaller);
      when it differs, the value is scaled linearly by ``gpus / measured`` (ideal
      data-parallel scaling, an optimistic assumption).
    - Batch size: interpolated linearly in log(batch)-log(samples/s) between the two
      nearest measured batch sizes at that count, clamped to the measured range;
      ``None`` gives the median over the measured batch sizes.
    - Precision: a query's precision class (FP32 or mixed) is served from that class's
      rows when the type was measured in it; otherwise (or without a precision) from
      every row.
    - Several rows with the same key (e.g. two systems) are averaged geometrically.

    Rows for a model or GPU type that the catalogs do not know are an error naming the
    row, unless the row stands alone: a model row stands alone with ``params_m`` and
    ``forward_gmacs`` (``domain`` optional), a GPU row with ``fp32_tflops``,
    ``bandwidth_gbs`` and ``memory_gib`` (``fp16_tflops`` optional, defaults to FP32;
    ``link_gbs`` optional, the GPU-to-GPU bandwidth; unknown when missing).
    """

    def __init__(
        self,
        rows: Iterable[BenchmarkRow],
        *,
        extra_models: Mapping[str, ModelSpec] | None = None,
        extra_gpus: Mapping[str, GpuSpec] | None = None,
        source: str = "",
    ) -> None:
        self.rows: tuple[BenchmarkRow, ...] = tuple(rows)
        self.extra_models: Mapping[str, ModelSpec] = dict(extra_models or {})
        self.extra_gpus: Mapping[str, GpuSpec] = dict(extra_gpus or {})
        self.source = source
        # (model, GPU type, precision class or None for every row) -> (GPUs, batch) -> values
        grouped: dict[tuple[str, str, str | None], dict[tuple[int, int], list[float]]] = (
            defaultdict(lambda: defaultdict(list))
        )
        for row in self.rows:
            cell = (row.gpus, row.batch_size)
            grouped[(row.model, row.gpu_type, None)][cell].append(row.samples_per_s)
            if precision_class(row.precision):
                cls = precision_class(row.precision)
                grouped[(row.model, row.gpu_type, cls)][cell].append(row.samples_per_s)
        self._index: dict[tuple[str, str, str | None], dict[int, list[tuple[int, float]]]] = {}
        for key, cells in grouped.items():
            by_gpus: dict[int, list[tuple[int, float]]] = defaultdict(list)
            for (gpus, batch), values in cells.items():
                mean = (
                    values[0]
                    if len(values) == 1
                    else math.exp(sum(math.log(v) for v in values) / len(values))
                )
                by_gpus[gpus].append((batch, mean))
            self._index[key] = {g: sorted(v) for g, v in by_gpus.items()}
        self._gpus_by_model: dict[str, set[str]] = defaultdict(set)
        for model, gpu, _ in self._index:
            self._gpus_by_model[model].add(gpu)

    # -- construction

    @classmethod
    @cache
    def default(cls) -> BenchmarkTable:
        """The shipped table (Gavel's measured throughputs, see ``data/README.md``)."""
        text = data_text("benchmarks.csv")
        return cls.parse(text.splitlines(), source="predictor/data/benchmarks.csv")

    @classmethod
    def load(cls, path: str | Path) -> BenchmarkTable:
        """Read and validate a benchmark CSV (raises :class:`BenchmarkError`)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise BenchmarkError(f"{path}: cannot read: {exc}") from exc
        return cls.parse(text.splitlines(), source=str(path))

    @classmethod
    def parse(cls, lines: Iterable[str], *, source: str = "<benchmarks>") -> BenchmarkTable:
        """Parse CSV lines (a header, then rows; ``#`` lines are comments)."""
        numbered = [
            (number, line)
            for number, line in enumerate(lines, start=1)
            if line.strip() and not line.lstrip().startswith("#")
        ]
        if not numbered:
            raise BenchmarkError(f"{source}: empty benchmark file")
        reader = csv.DictReader(line for _, line in numbered)
        header = reader.fieldnames or []
        missing = [c for c in _REQUIRED if c not in header]
        if missing:
            raise BenchmarkError(f"{source}: missing column(s) {', '.join(missing)}")
        rows: list[BenchmarkRow] = []
        extra_models: dict[str, ModelSpec] = {}
        extra_gpus: dict[str, GpuSpec] = {}
        for (number, _), raw in zip(numbered[1:], reader, strict=True):
            where = f"{source} line {number}"
            try:
                row = cls._row(raw, extra_models, extra_gpus)
            except (ValueError, TypeError) as exc:
                raise BenchmarkError(f"{where}: {exc}") from exc
            system = (raw.get("system") or "").strip()
            rows.append(replace(row, origin=f"{where} ({system})" if system else where))
        return cls(rows, extra_models=extra_models, extra_gpus=extra_gpus, source=source)

    @staticmethod
    def _row(
        raw: Mapping[str, str | None],
        extra_models: dict[str, ModelSpec],
        extra_gpus: dict[str, GpuSpec],
    ) -> BenchmarkRow:
        model_name = (raw.get("model") or "").strip()
        gpu_name = (raw.get("gpu_type") or "").strip()
        if not model_name or not gpu_name:
            raise ValueError("model and gpu_type must not be empty")
        try:
            model = canonical_model(model_name)
        except UnknownName:
            feats = {c: _float(raw, c) for c in _MODEL_FEATURES}
            if any(v is None for v in feats.values()):
                raise ValueError(
                    f"unknown model {model_name!r}: add it to the model catalog or give "
                    f"{' and '.join(_MODEL_FEATURES)} so the row stands alone"
                ) from None
            model = model_name
            extra_models[model] = ModelSpec(
                name=model,
                domain=(raw.get("domain") or "").strip() or "unknown",
                params_m=feats["params_m"] or 0.0,
                forward_gmacs=feats["forward_gmacs"] or 0.0,
                input=(raw.get("input") or "").strip(),
            )
        try:
            gpu = canonical_gpu(gpu_name)
        except UnknownName:
            gfeats = {c: _float(raw, c) for c in _GPU_FEATURES}
            if any(v is None for v in gfeats.values()):
                raise ValueError(
                    f"unknown GPU type {gpu_name!r}: add it to the GPU catalog or give "
                    f"{', '.join(_GPU_FEATURES)} so the row stands alone"
                ) from None
            gpu = gpu_name.upper()
            fp32 = gfeats["fp32_tflops"] or 0.0
            extra_gpus[gpu] = GpuSpec(
                name=gpu,
                family=gpu,
                arch="unknown",
                fp32_tflops=fp32,
                fp16_tflops=_float(raw, "fp16_tflops") or fp32,
                memory_gib=gfeats["memory_gib"] or 0.0,
                bandwidth_gbs=gfeats["bandwidth_gbs"] or 0.0,
                link_gbs=_float(raw, "link_gbs") or 0.0,
                tf32_tflops=_float(raw, "tf32_tflops") or 0.0,
            )
        batch = int((raw.get("batch_size") or "").strip() or "0")
        value = float((raw.get("samples_per_s") or "").strip())
        gpus = int((raw.get("gpus") or "").strip() or "1")
        if batch < 1:
            raise ValueError(
                f"batch_size must be a positive integer, got {raw.get('batch_size')!r}"
            )
        if not value > 0 or not math.isfinite(value):
            raise ValueError(f"samples_per_s must be positive and finite, got {value}")
        if gpus < 1:
            raise ValueError(f"gpus must be a positive integer, got {gpus}")
        return BenchmarkRow(
            model=model,
            gpu_type=gpu,
            batch_size=batch,
            samples_per_s=value,
            gpus=gpus,
            precision=(raw.get("precision") or "").strip(),
            input=(raw.get("input") or "").strip() or model_input(model_name),
        )

    # -- names and specs (catalog first, then the table's stand-alone rows)

    def resolve_model(self, name: str) -> str:
        """Canonical model name, or the name of a stand-alone row; raises UnknownName."""
        if name in self.extra_models:
            return name
        return canonical_model(name)

    def resolve_gpu(self, name: str) -> str:
        """Canonical GPU type, or the name of a stand-alone row; raises UnknownName."""
        if name.upper() in self.extra_gpus:
            return name.upper()
        return canonical_gpu(name)

    def model_spec(self, name: str) -> ModelSpec:
        """Facts of ``name`` from the catalog or the table's stand-alone rows."""
        resolved = self.resolve_model(name)
        return self.extra_models.get(resolved) or model_spec(resolved)

    def gpu_spec(self, name: str) -> GpuSpec:
        """Specification of ``name`` from the catalog or the table's stand-alone rows."""
        resolved = self.resolve_gpu(name)
        return self.extra_gpus.get(resolved) or gpu_spec(resolved)

    # -- lookups

    def models(self) -> frozenset[str]:
        """Models with at least one row."""
        return frozenset(self._gpus_by_model)

    def measured_gpu_types(self, model: str) -> frozenset[str]:
        """GPU types ``model`` (already resolved) was measured on."""
        return frozenset(self._gpus_by_model.get(model, ()))

    def _curves(
        self, model: str, gpu_type: str, precision: str | None
    ) -> dict[int, list[tuple[int, float]]] | None:
        """The rows of one precision class when it was measured, else every row."""
        cls = precision_class(precision)
        found = self._index.get((model, gpu_type, cls)) if cls else None
        return found if found is not None else self._index.get((model, gpu_type, None))

    def measured_gpu_counts(
        self, model: str, gpu_type: str, precision: str | None = None
    ) -> frozenset[int]:
        """GPU counts ``model`` was measured at on ``gpu_type`` (both already resolved), in
        ``precision``'s class when it was measured in it."""
        return frozenset(self._curves(model, gpu_type, precision) or {})

    def samples_per_s(
        self,
        model: str,
        gpu_type: str,
        batch_size: int | None = None,
        gpus: int = 1,
        precision: str | None = None,
    ) -> float | None:
        """Measured (or interpolated, see the class doc) samples/s; None when unmeasured.

        With a ``precision``, only the rows of its class (:func:`precision_class`) when
        there are any; otherwise every row of the model on the type.
        """
        try:
            model, gpu_type = self.resolve_model(model), self.resolve_gpu(gpu_type)
        except UnknownName:
            return None
        by_gpus = self._curves(model, gpu_type, precision)
        if not by_gpus:
            return None
        want = max(1, int(gpus))
        measured = min(by_gpus, key=lambda g: (abs(math.log(g / want)), g))
        points = by_gpus[measured]
        value = _interpolate(points, batch_size)
        return value * want / measured


def _interpolate(points: list[tuple[int, float]], batch_size: int | None) -> float:
    """Log-log interpolation of (batch, samples/s) points sorted by batch."""
    if batch_size is None:
        values = sorted(v for _, v in points)
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else math.sqrt(values[mid - 1] * values[mid])
    if batch_size <= points[0][0]:
        return points[0][1]
    if batch_size >= points[-1][0]:
        return points[-1][1]
    for (b0, v0), (b1, v1) in itertools.pairwise(points):
        if b0 <= batch_size <= b1:
            t = math.log(batch_size / b0) / math.log(b1 / b0)
            return math.exp(math.log(v0) + t * (math.log(v1) - math.log(v0)))
    return points[-1][1]  # pragma: no cover - unreachable, points are sorted


# --------------------------------------------------------------------------- ratios


def effective_tflops(spec: GpuSpec, precision: str | None = None) -> float:
    """The compute figure a job can use: FP32 (TF32), tensor FP16, or their geometric mean.

    ``precision`` "fp32" and "tf32" use the TF32 tensor figure where the GPU has one
    (Ampere and later: PyTorch's cuDNN convolutions run FP32 training on TF32 by default,
    NVIDIA's containers its matmuls too), else FP32; "fp16", "bf16", "amp" or "mixed"
    use the tensor FP16 figure; unknown (None or "") uses the geometric mean of FP32 and
    FP16, because most training today mixes both (tensor-core matmuls, FP32 reductions
    and optimizer).
    """
    p = (precision or "").lower()
    if p in {"fp32", "tf32"}:
        return max(spec.fp32_tflops, spec.tf32_tflops)
    if p in {"fp16", "bf16", "amp", "mixed"}:
        return spec.fp16_tflops
    return math.sqrt(spec.fp32_tflops * spec.fp16_tflops)


def catalog_ratio(src: GpuSpec, dst: GpuSpec, precision: str | None = None) -> float:
    """Speed-up of ``dst`` over ``src`` from specifications alone.

    A roofline-ish blend: a training step is partly compute-bound (large matmuls and
    convolutions) and partly memory-bound (normalisation, element-wise ops, optimizer
    updates, embeddings), so the speed-up is the geometric mean of the compute ratio and
    the memory-bandwidth ratio: sqrt(C_dst/C_src * B_dst/B_src). On Gavel's table it gives
    V100/K80 = 3.6 (FP32) against measured 2.1-8.8 (median ~4), and on public AMP
    results A100/V100 ~ 2 and H100/A100 ~ 2.3, the vendor-reported range.
    """
    compute = effective_tflops(dst, precision) / effective_tflops(src, precision)
    bandwidth = dst.bandwidth_gbs / src.bandwidth_gbs
    return math.sqrt(compute * bandwidth)


def throughput_ratio(
    model: str | None,
    batch_size: int | None,
    src_gpu: str,
    dst_gpu: str,
    gpus: int = 1,
    table: BenchmarkTable | None = None,
    *,
    precision: str | None = None,
) -> float:
    """How many times faster ``dst_gpu`` runs the job than ``src_gpu`` (runtime / ratio).

    1. Both types measured for ``model`` in ``table`` (default: the shipped one): the
       ratio of their :meth:`BenchmarkTable.samples_per_s` at ``batch_size``/``gpus``.
    2. Only one measured: anchor on the measured type whose specification is closest to
       the unmeasured one, i.e. measured(src -> anchor) x catalog(anchor -> dst).
    3. Otherwise (model None or unmeasured): :func:`catalog_ratio`.

    Raises :class:`UnknownName` for GPU types neither catalog nor table knows.
    """
    tbl = table if table is not None else BenchmarkTable.default()
    src = tbl.resolve_gpu(src_gpu)
    dst = tbl.resolve_gpu(dst_gpu)
    if src == dst:
        return 1.0
    src_spec, dst_spec = tbl.gpu_spec(src), tbl.gpu_spec(dst)
    fallback = catalog_ratio(src_spec, dst_spec, precision)
    if model is None:
        return fallback
    try:
        resolved = tbl.resolve_model(model)
    except UnknownName:
        return fallback
    measured = tbl.measured_gpu_types(resolved)
    if not measured:
        return fallback

    def speed(gpu: str) -> float | None:
        return tbl.samples_per_s(resolved, gpu, batch_size, gpus)

    def nearest(to: GpuSpec) -> str:
        return min(
            sorted(measured),
            key=lambda g: abs(math.log(catalog_ratio(tbl.gpu_spec(g), to, precision))),
        )

    s_src, s_dst = speed(src), speed(dst)
    if s_src is not None and s_dst is not None:
        return s_dst / s_src
    if s_src is not None:
        anchor = nearest(dst_spec)
        s_anchor = speed(anchor)
        assert s_anchor is not None
        return s_anchor / s_src * catalog_ratio(tbl.gpu_spec(anchor), dst_spec, precision)
    if s_dst is not None:
        anchor = nearest(src_spec)
        s_anchor = speed(anchor)
        assert s_anchor is not None
        return catalog_ratio(src_spec, tbl.gpu_spec(anchor), precision) * s_dst / s_anchor
    return fallback
