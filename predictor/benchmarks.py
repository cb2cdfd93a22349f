"""Measured training throughputs: the benchmark table and the speed-up it gives.

``benchmarks.csv`` (in ``predictor/data/``, Gavel's table by default, see
:mod:`predictor.gavel`) holds samples/s per model, GPU type, batch size and GPU count.
:class:`BenchmarkTable` reads and indexes it; :func:`throughput_ratio` answers "how many
times faster is GPU type B than A for this job" from it when it can, otherwise from the
catalog (:func:`predictor.catalog.catalog_ratio`; see its docstring for the formula and why).
"""

from __future__ import annotations

import csv
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from predictor.catalog import (
    GpuSpec,
    ModelSpec,
    UnknownName,
    canonical_gpu,
    canonical_model,
    canonical_precision,
    catalog_ratio,
    data_text,
    gpu_spec,
    median_model_facts,
    model_input,
    model_spec,
)

__all__ = [
    "BenchmarkError",
    "BenchmarkRow",
    "BenchmarkTable",
    "precision_class",
    "throughput_ratio",
]


class BenchmarkError(ValueError):
    """A benchmark file is malformed; the message names the file and row."""


_REQUIRED = ("model", "gpu_type", "batch_size", "samples_per_s")
#: other spellings of a column (Lambda's tables say ``num_gpus``)
_COLUMN_ALIASES = {"num_gpus": "gpus", "num_gpu": "gpus", "gpu_count": "gpus"}
_MODEL_FEATURES = ("params_m", "forward_gmacs")
#: the note of a model no catalog entry or row describes (:attr:`BenchmarkTable.imputed_models`)
_IMPUTED = "not in the model catalog and no params_m/forward_gmacs: the catalog's median facts"
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


class UnknownGpuRow(ValueError):
    """A row naming a GPU type the catalog lacks, without the columns that would let it
    stand alone (``name``: the type as the row wrote it)."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"unknown GPU type {name!r}: add it to the GPU catalog or give "
            f"{', '.join(_GPU_FEATURES)} so the row stands alone"
        )
        self.name = name


def precision_class(precision: str | None) -> str:
    """``"fp32"`` (FP32 and TF32: one setup, as Ampere and later run FP32 training on TF32
    tensor cores by default), ``"mixed"`` (FP16, BF16, AMP) or ``""`` (unknown): the
    classes :func:`effective_tflops` tells apart."""
    p = canonical_precision(precision)
    return "fp32" if p in {"fp32", "tf32"} else "mixed" if p else ""


def _count(raw: Mapping[str, str | None], column: str, default: int) -> int:
    """A whole number written as one (``64``) or as a float that is one (``64.0``, as
    pandas writes a column with gaps); ``default`` when empty; ValueError otherwise."""
    text = (raw.get(column) or "").strip()
    if not text:
        return default
    number = float(text)
    if not number.is_integer():
        raise ValueError(f"{column} must be a whole number, got {text!r}")
    return int(number)


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
        skipped: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.rows: tuple[BenchmarkRow, ...] = tuple(rows)
        self.extra_models: Mapping[str, ModelSpec] = dict(extra_models or {})
        self.extra_gpus: Mapping[str, GpuSpec] = dict(extra_gpus or {})
        self.source = source
        #: rows :meth:`parse` left out for a GPU type the catalog lacks: (where, type)
        self.skipped: tuple[tuple[str, str], ...] = tuple(skipped)
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
    def load(cls, path: str | Path, *, skip_unknown_gpus: bool = False) -> BenchmarkTable:
        """Read and validate a benchmark CSV (raises :class:`BenchmarkError`)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise BenchmarkError(f"{path}: cannot read: {exc}") from exc
        return cls.parse(text.splitlines(), source=str(path), skip_unknown_gpus=skip_unknown_gpus)

    @classmethod
    def parse(
        cls, lines: Iterable[str], *, source: str = "<benchmarks>", skip_unknown_gpus: bool = False
    ) -> BenchmarkTable:
        """Parse CSV lines (a header, then rows; ``#`` lines are comments).

        A row naming a GPU type the catalog lacks (and giving no specs of its own) is an
        error, or with ``skip_unknown_gpus`` left out and listed in the table's
        ``skipped`` (where, as the row wrote the type); a file with no other row is an
        error either way."""
        numbered = [
            (number, line)
            for number, line in enumerate(lines, start=1)
            if line.strip() and not line.lstrip().startswith("#")
        ]
        if not numbered:
            raise BenchmarkError(f"{source}: empty benchmark file")
        reader = csv.DictReader(line for _, line in numbered)
        # a spreadsheet's byte-order mark, capitals or spaces do not make another column
        header = [c.lstrip("\ufeff").strip().lower() for c in reader.fieldnames or []]
        reader.fieldnames = header = [_COLUMN_ALIASES.get(c, c) for c in header]
        missing = [c for c in _REQUIRED if c not in header]
        if missing:
            raise BenchmarkError(f"{source}: missing column(s) {', '.join(missing)}")
        rows: list[BenchmarkRow] = []
        extra_models: dict[str, ModelSpec] = {}
        extra_gpus: dict[str, GpuSpec] = {}
        skipped: list[tuple[str, str]] = []
        for (number, _), raw in zip(numbered[1:], reader, strict=True):
            where = f"{source} line {number}"
            try:
                row = cls._row(raw, extra_models, extra_gpus)
            except UnknownGpuRow as exc:
                if not skip_unknown_gpus:
                    raise BenchmarkError(f"{where}: {exc}") from exc
                skipped.append((where, exc.name))
                continue
            except (ValueError, TypeError) as exc:
                raise BenchmarkError(f"{where}: {exc}") from exc
            system = (raw.get("system") or "").strip()
            rows.append(replace(row, origin=f"{where} ({system})" if system else where))
        if skipped and not rows:
            where, name = skipped[0]
            raise BenchmarkError(
                f"{where}: {UnknownGpuRow(name)}; no row of the file names a GPU type it knows"
            )
        return cls(
            rows, extra_models=extra_models, extra_gpus=extra_gpus, source=source, skipped=skipped
        )

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
            gpu = canonical_gpu(gpu_name)
        except UnknownName:
            gfeats = {c: _float(raw, c) for c in _GPU_FEATURES}
            if any(v is None for v in gfeats.values()):
                raise UnknownGpuRow(gpu_name) from None
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
        try:
            model = canonical_model(model_name)
        except UnknownName:
            feats = {c: _float(raw, c) for c in _MODEL_FEATURES}
            given = all(v is not None for v in feats.values())
            params_m, gmacs = (
                (feats["params_m"] or 0.0, feats["forward_gmacs"] or 0.0)
                if given
                else median_model_facts()
            )
            model = model_name
            extra_models[model] = ModelSpec(
                name=model,
                domain=(raw.get("domain") or "").strip() or "unknown",
                params_m=params_m,
                forward_gmacs=gmacs,
                input=(raw.get("input") or "").strip(),
                estimated=not given,
                note="" if given else _IMPUTED,
            )
        batch = _count(raw, "batch_size", 0)
        value = float((raw.get("samples_per_s") or "").strip())
        gpus = _count(raw, "gpus", 1)
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
            precision=canonical_precision(raw.get("precision")),
            input=(raw.get("input") or "").strip() or model_input(model_name),
        )

    @property
    def imputed_models(self) -> tuple[str, ...]:
        """Models of these rows that neither the catalog nor the rows describe: they are
        kept, with the catalog's median facts, and predicted from their own rows."""
        return tuple(sorted(n for n, m in self.extra_models.items() if m.estimated))

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

    def with_rows(self, rows: Iterable[BenchmarkRow], source: str | None = None) -> BenchmarkTable:
        """A table of ``rows`` knowing this one's stand-alone models and GPUs and the rows
        it left out (its source unless ``source`` is given)."""
        return BenchmarkTable(
            rows,
            extra_models=self.extra_models,
            extra_gpus=self.extra_gpus,
            source=self.source if source is None else source,
            skipped=self.skipped,
        )

    def measured_batches(
        self, model: str, gpu_type: str, gpus: int = 1, precision: str | None = None
    ) -> tuple[int, ...]:
        """Batch sizes ``model`` was measured at on ``gpu_type`` (both already resolved), at
        the GPU count :meth:`samples_per_s` reads for ``gpus``; () when unmeasured. Outside
        their range :meth:`samples_per_s` returns the nearest one's throughput."""
        by_gpus = self._curves(model, gpu_type, precision)
        if not by_gpus:
            return ()
        want = max(1, int(gpus))
        measured = min(by_gpus, key=lambda g: (abs(math.log(g / want)), g))
        return tuple(b for b, _ in by_gpus[measured])

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
