"""The learned throughput model: a scaling prior, corrected by a forest.

What it predicts: **throughput** (samples/s) of a model at a batch size on ``gpus`` GPUs of
one type. Runtime follows as ``work_samples / throughput``. Throughput rather than
log-runtime because it is what benchmarks measure, it does not depend on how long a job
is (so one benchmark row serves every job length), and an observed job turns into a
throughput measurement as ``work / actual_s``.

How (all three families share the prior and the folds):

1. **Prior** (the ``scaling`` baseline): if the model was measured on other GPU types,
   its throughput there times :func:`blend_ratio` (compute ratio^alpha x bandwidth
   ratio^(1-alpha), alpha fitted on the training rows by :func:`fit_alpha`), averaged
   geometrically over the measured types with weights favouring the types closest in
   specification ("anchor"); otherwise a latency-aware roofline (:class:`Roofline`: a
   step costs a fixed latency plus batch x training FLOPs / (efficiency x blended
   speed)), its four numbers fitted on the training rows by :func:`fit_roofline`.
2. **Residual**: a random forest (default) or HistGradientBoosting learns
   ``log(measured / prior)`` from catalog features (:mod:`predictor.features`). Every
   training row is used twice: once with its anchor prior computed *without its own GPU
   type* (what serving an unmeasured type looks like), once with its roofline prior
   (what serving an unmeasured model looks like).
3. **Uncertainty**: the 10th/90th percentiles across the forest's trees (HGB and the
   baseline: the training residuals' spread), never narrower than +-10%.

A (model, GPU type) pair that was measured is served from the measurement itself
(interpolated, :class:`predictor.catalog.BenchmarkTable`), not from the model.

Artifacts (:func:`save` / :func:`load`) record the scikit-learn version and the feature
schema hash; on a mismatch :func:`load` retrains from the measurements stored inside,
and if that fails it falls back to the scaling baseline on the shipped table, logging a
warning. It never raises into the caller.
"""

from __future__ import annotations

import logging
import math
import pickle
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import sklearn

from predictor.catalog import (
    BenchmarkRow,
    BenchmarkTable,
    GpuSpec,
    ModelSpec,
    UnknownName,
    effective_tflops,
    precision_class,
)
from predictor.features import FEATURES, SCHEMA_HASH, feature_row

log = logging.getLogger("predictor")

FAMILIES = ("rf", "hgb", "xgb", "scaling")
ARTIFACT_FORMAT = 1
#: relative half-width floor of every uncertainty band (measurement noise)
MIN_BAND = 0.10
_Z90 = 1.2816


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """One observed throughput (a benchmark row, or aggregated job history)."""

    model: str
    gpu_type: str
    batch_size: int
    gpus: int
    samples_per_s: float
    precision: str = ""
    input: str = ""
    weight: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Query:
    """What to predict: throughput of ``model`` at ``batch_size`` on ``gpus`` x ``gpu_type``."""

    model: str
    gpu_type: str
    batch_size: int
    gpus: int = 1
    precision: str = ""
    input: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Parts:
    log_prior: np.ndarray
    mid: np.ndarray  # learned log residual (mean over trees), before shrinking
    lo: np.ndarray  # 10th percentile of the trees minus mid
    hi: np.ndarray  # 90th percentile of the trees minus mid
    kinds: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Target:
    """An anchor prior to compute: ``model`` at ``batch_size`` on ``gpus`` x ``gpu_type``,
    from the model's measurements on the ``anchors`` GPU types."""

    model: str
    gpu_type: str
    batch_size: int
    gpus: int
    precision: str
    anchors: tuple[str, ...]


def _query(m: Measurement) -> Query:
    return Query(
        model=m.model,
        gpu_type=m.gpu_type,
        batch_size=m.batch_size,
        gpus=m.gpus,
        precision=m.precision,
        input=m.input,
    )


@dataclass(frozen=True, slots=True)
class Predictions:
    """Predicted samples/s per query: point, 10th and 90th percentile, and the source.

    ``kind`` is "measured", "anchor" (scaled from other GPU types), "roofline" (from
    FLOPs: a model never measured) or "unknown-gpu" (NaN throughput).
    """

    samples_per_s: np.ndarray
    low_sps: np.ndarray
    high_sps: np.ndarray
    kind: tuple[str, ...]


def measurements_from_table(table: BenchmarkTable) -> list[Measurement]:
    """Every row of ``table`` as a :class:`Measurement`."""
    return [
        Measurement(
            model=r.model,
            gpu_type=r.gpu_type,
            batch_size=r.batch_size,
            gpus=r.gpus,
            samples_per_s=r.samples_per_s,
            precision=r.precision,
            input=r.input,
        )
        for r in table.rows
    ]


class Specs:
    """Model and GPU facts: the catalogs, a table's stand-alone rows, then imputation.

    A model nobody describes gets the median parameters and MACs of the catalog models
    (domain "unknown"); a GPU type nobody describes raises :class:`UnknownName`.
    """

    def __init__(self, table: BenchmarkTable | None = None) -> None:
        self.table = table if table is not None else BenchmarkTable.default()
        self._models: dict[str, ModelSpec] = {}
        self._gpus: dict[str, GpuSpec] = {}
        from predictor.catalog import model_names, model_spec

        known = [model_spec(m) for m in model_names()]
        self._median_params = float(np.median([m.params_m for m in known]))
        self._median_gmacs = float(np.median([m.forward_gmacs for m in known]))

    def model(self, name: str, input_name: str = "") -> ModelSpec:
        """Facts of model ``name`` trained on ``input_name`` (imputed when unknown)."""
        spec = self._models.get(name)
        if spec is not None:
            return spec.for_input(input_name) if input_name else spec
        else:
            try:
                spec = self.table.model_spec(name)
            except UnknownName:
                spec = ModelSpec(
                    name=name,
                    domain="unknown",
                    params_m=self._median_params,
                    forward_gmacs=self._median_gmacs,
                )
            self._models[name] = spec
        return spec.for_input(input_name) if input_name else spec

    def known_model(self, name: str) -> bool:
        """True when a catalog or the table describes ``name``."""
        try:
            self.table.resolve_model(name)
        except UnknownName:
            return False
        return True

    def gpu(self, name: str) -> GpuSpec:
        """Facts of GPU type ``name``; UnknownName when nobody describes it."""
        spec = self._gpus.get(name)
        if spec is None:
            spec = self.table.gpu_spec(name)
            self._gpus[name] = spec
        return spec


#: bytes of memory traffic per FLOP that make a GPU's bandwidth comparable to its FLOPS
#: in :func:`gpu_speed` (only sets the scale of the roofline's fitted efficiency)
FLOPS_PER_BYTE = 10.0


def gpu_speed(gpu: GpuSpec, precision: str, alpha: float) -> float:
    """Blended spec speed (FLOP/s): compute^alpha x (bandwidth x FLOPS_PER_BYTE)^(1-alpha).

    ``alpha`` = 1: compute-bound; 0: memory-bound. The compute figure follows the row's
    precision (FP32, tensor FP16, or their geometric mean when unknown).
    """
    compute = effective_tflops(gpu, precision or None) * 1e12
    memory = gpu.bandwidth_gbs * 1e9 * FLOPS_PER_BYTE
    return math.exp(alpha * math.log(compute) + (1 - alpha) * math.log(memory))


def blend_ratio(src: GpuSpec, dst: GpuSpec, precision: str, alpha: float) -> float:
    """Speed-up of ``dst`` over ``src``: compute ratio^alpha x bandwidth ratio^(1-alpha).

    With ``alpha`` = 0.5 it is :func:`predictor.catalog.catalog_ratio`.
    """
    return gpu_speed(dst, precision, alpha) / gpu_speed(src, precision, alpha)


def fit_alpha(measurements: Sequence[Measurement], specs: Specs, default: float = 0.5) -> float:
    """The compute share ``alpha`` of :func:`blend_ratio` that fits the measurements.

    Every (model, input, batch, GPUs, precision) measured on two GPU types gives one
    equation ``log(s_B / s_A) = alpha log(C_B / C_A) + (1 - alpha) log(W_B / W_A)``
    (C compute, W bandwidth); alpha is the median of their solutions weighted by
    ``|log(C_B/C_A) - log(W_B/W_A)|`` (pairs whose two ratios agree say nothing about
    alpha), clipped to [0, 1]. ``default`` when no pair is informative.
    """
    groups: dict[tuple[Any, ...], dict[str, float]] = defaultdict(dict)
    for m in measurements:
        key = (m.model, m.input, m.batch_size, m.gpus, m.precision)
        groups[key][m.gpu_type] = m.samples_per_s
    values: list[float] = []
    weights: list[float] = []
    for (_, _, _, _, precision), by_type in groups.items():
        types = sorted(by_type)
        for i, a in enumerate(types):
            ga = specs.gpu(a)
            for b in types[i + 1 :]:
                gb = specs.gpu(b)
                f = math.log(gpu_speed(gb, precision, 1.0) / gpu_speed(ga, precision, 1.0))
                w = math.log(gpu_speed(gb, precision, 0.0) / gpu_speed(ga, precision, 0.0))
                if abs(f - w) < 0.05:
                    continue
                r = math.log(by_type[b] / by_type[a])
                values.append((r - w) / (f - w))
                weights.append(abs(f - w))
    if not values:
        return default
    order = np.argsort(values)
    v = np.asarray(values)[order]
    cw = np.cumsum(np.asarray(weights)[order])
    median = float(v[int(np.searchsorted(cw, cw[-1] / 2.0))])
    return min(max(median, 0.0), 1.0)


#: GPU-to-GPU link assumed when the catalog has none (GB/s each way: PCIe 3.0 x16)
DEFAULT_LINK_GBS = 16.0


def exchange_volume_s(model: ModelSpec, gpu: GpuSpec, gpus: int) -> float:
    """Seconds one ring all-reduce of the FP32 gradients takes at the link's peak.

    Each of ``gpus`` workers sends and receives ``2 (gpus - 1) / gpus`` times the
    gradients' bytes (4 per parameter) over its GPU-to-GPU link (``link_gbs``; PCIe 3.0
    x16 when unknown). 0 on one GPU.
    """
    if gpus <= 1:
        return 0.0
    link = gpu.link_gbs if gpu.link_gbs > 0 else DEFAULT_LINK_GBS
    return model.params_m * 4e6 * 2.0 * (gpus - 1) / gpus / (link * 1e9)


@dataclass(frozen=True, slots=True, kw_only=True)
class Roofline:
    """Throughput of a model from its facts alone: latency, compute, gradient exchange.

    One worker's step takes ``t0_s + batch x training FLOPs per sample / (efficiency x
    gpu_speed(alpha))``; on several GPUs each step also exchanges the gradients,
    ``exchange x`` :func:`exchange_volume_s` (the ring all-reduce's time at the link's
    peak; ``exchange`` > 1 when it is slower than peak or not overlapped with the
    backward pass). ``samples/s = gpus x batch / step``. The fixed ``t0_s`` (kernel
    launches, framework, input pipeline) is why small batches and tiny models are far
    below their FLOPs bound. The four numbers are fitted on the training rows.
    ``batch_size`` 0 (unknown) drops the latency term.
    """

    t0_s: float = 0.0
    efficiency: float = 0.3
    exchange: float = 1.0
    alpha: float = 0.5

    def samples_per_s(
        self, model: ModelSpec, gpu: GpuSpec, batch_size: int, gpus: int, precision: str
    ) -> float:
        """Predicted samples/s of ``model`` at ``batch_size`` on ``gpus`` x ``gpu``."""
        flops = max(model.train_gflops_per_sample, 1e-6) * 1e9
        per_sample_s = flops / (self.efficiency * gpu_speed(gpu, precision, self.alpha))
        n = max(gpus, 1)
        b = float(batch_size)
        exchange_s = self.exchange * exchange_volume_s(model, gpu, n)
        if b <= 0:  # unknown batch: per-sample compute only, exchange spread over 32
            return n / (per_sample_s + exchange_s / 32.0)
        return n * b / (self.t0_s + b * per_sample_s + exchange_s)


#: rows :func:`fit_roofline` fits on at most
ROOFLINE_MAX_ROWS = 5000


def fit_roofline(measurements: Sequence[Measurement], specs: Specs) -> Roofline:
    """:class:`Roofline` fitted by robust least squares on log throughput.

    Needs rows of at least two models; otherwise (or if the fit fails) the efficiency
    alone is fitted (median), with no latency term and the exchange at link peak. Four
    numbers do not need more than :data:`ROOFLINE_MAX_ROWS` rows: beyond that an evenly
    spaced subset is used (retraining on raw history stays fast).
    """
    if len(measurements) > ROOFLINE_MAX_ROWS:
        step = math.ceil(len(measurements) / ROOFLINE_MAX_ROWS)
        measurements = measurements[::step]
    flops = np.asarray(
        [
            max(specs.model(m.model, m.input).train_gflops_per_sample, 1e-6) * 1e9
            for m in measurements
        ]
    )
    compute = np.log(
        [effective_tflops(specs.gpu(m.gpu_type), m.precision or None) * 1e12 for m in measurements]
    )
    memory = np.log(
        [specs.gpu(m.gpu_type).bandwidth_gbs * 1e9 * FLOPS_PER_BYTE for m in measurements]
    )
    batch = np.asarray([max(m.batch_size, 1) for m in measurements], dtype=np.float64)
    gpus = np.asarray([max(m.gpus, 1) for m in measurements], dtype=np.float64)
    volume = np.asarray(
        [
            exchange_volume_s(specs.model(m.model, m.input), specs.gpu(m.gpu_type), m.gpus)
            for m in measurements
        ]
    )
    y = np.log([m.samples_per_s for m in measurements])
    w = np.sqrt(np.asarray([m.weight for m in measurements], dtype=np.float64))

    def predict(p: np.ndarray) -> np.ndarray:
        alpha = 1.0 / (1.0 + math.exp(-float(np.clip(p[3], -30, 30))))
        speed = np.exp(alpha * compute + (1 - alpha) * memory)
        step = math.exp(p[0]) + batch * flops / (math.exp(p[1]) * speed) + math.exp(p[2]) * volume
        result: np.ndarray = np.log(gpus * batch / step)
        return result

    fallback = Roofline(
        t0_s=0.0,
        efficiency=float(
            np.exp(np.median(y - np.log(gpus) - np.log(np.exp(0.5 * (compute + memory)) / flops)))
        ),
        exchange=1.0,
        alpha=0.5,
    )
    if len({m.model for m in measurements}) < 2:
        return fallback
    from scipy.optimize import least_squares  # type: ignore[import-untyped]

    try:
        fit = least_squares(
            lambda p: (predict(p) - y) * w,
            np.asarray([math.log(0.01), math.log(0.3), 0.0, 0.0]),
            loss="soft_l1",
            bounds=([-20.0, -12.0, -20.0, -30.0], [3.0, 3.0, 10.0, 30.0]),
        )
    except (ValueError, np.linalg.LinAlgError) as exc:  # pragma: no cover - defensive
        log.warning("roofline fit failed (%s); median efficiency only", exc)
        return fallback
    p = fit.x
    return Roofline(
        t0_s=float(math.exp(p[0])),
        efficiency=float(math.exp(p[1])),
        exchange=float(math.exp(p[2])),
        alpha=float(1.0 / (1.0 + math.exp(-p[3]))),
    )


def time_terms(gpu: GpuSpec, batch_size: int, gpus: int, precision: str) -> dict[str, float]:
    """The terms of the per-model time fit (:meth:`Priors._physics`) on ``gpus`` x ``gpu``,
    by coefficient name, each before its coefficient."""
    b = float(max(batch_size, 1))
    n = max(gpus, 1)
    compute = effective_tflops(gpu, precision or None)
    bandwidth = gpu.bandwidth_gbs / 1000.0
    link = gpu.link_gbs / 100.0 if gpu.link_gbs > 0 else math.inf
    return {
        "t0": 1.0 / b,
        "c": 1.0 / compute,
        "a": 1.0 / bandwidth,
        "w": 1.0 / (bandwidth * b),
        "x": 2.0 * (n - 1) / n / (link * b),
    }


class Priors:
    """The scaling baseline over a set of measurements (see the module docstring)."""

    def __init__(
        self, measurements: Sequence[Measurement], specs: Specs, *, physics: bool = True
    ) -> None:
        self.specs = specs
        #: use the per-model time fit (:meth:`_physics`) where the target lies between
        #: the model's measured GPU types; False: the blended speed-up alone
        self.physics = physics
        rows = [
            BenchmarkRow(
                model=m.model,
                gpu_type=m.gpu_type,
                batch_size=m.batch_size,
                samples_per_s=m.samples_per_s,
                gpus=m.gpus,
                precision=m.precision,
            )
            for m in measurements
        ]
        extra_models = {
            m.model: specs.model(m.model) for m in measurements if not specs.known_model(m.model)
        }
        self.table = BenchmarkTable(
            rows,
            extra_models={**specs.table.extra_models, **extra_models},
            extra_gpus=specs.table.extra_gpus,
        )
        self._measured: dict[str, frozenset[str]] = {}
        by_model: dict[str, set[str]] = defaultdict(set)
        for m in measurements:
            by_model[m.model].add(m.gpu_type)
        self._measured = {k: frozenset(v) for k, v in by_model.items()}
        self._rows_of: dict[str, list[Measurement]] = defaultdict(list)
        for m in measurements:
            self._rows_of[m.model].append(m)
        self._physics_fits: dict[tuple[Any, ...], tuple[tuple[str, ...], np.ndarray] | None] = {}
        # the compute share describes one GPU's speed-up: multi-GPU rows also carry the
        # gradient exchange, which the multi-GPU prior models on its own (link bandwidth)
        self.alpha = fit_alpha(
            [m for m in measurements if m.gpus == 1],
            specs,
            default=fit_alpha(measurements, specs),
        )
        self.roof = fit_roofline(measurements, specs)
        self._cache: dict[tuple[Any, ...], tuple[float, float] | None] = {}
        # lookups shared by many keys: (model, anchor, batch, gpus) -> samples/s, and
        # (anchor, target, precision) -> speed-up
        self._sps: dict[tuple[str, str, int, int, str], float | None] = {}
        self._ratios: dict[tuple[str, str, str, float], float] = {}
        self._alphas: dict[tuple[str, str, str], float] = {}

    def _measured_sps(
        self, model: str, anchor: str, batch_size: int, gpus: int, precision: str
    ) -> float | None:
        key = (model, anchor, batch_size, gpus, precision_class(precision))
        if key not in self._sps:
            self._sps[key] = self.table.samples_per_s(model, anchor, batch_size, gpus, precision)
        return self._sps[key]

    def _ratio(self, anchor: str, target: str, precision: str, model: str = "") -> float:
        alpha = self.model_alpha(model, target, precision) if model else self.alpha
        key = (anchor, target, precision, alpha)
        if key not in self._ratios:
            self._ratios[key] = blend_ratio(
                self.specs.gpu(anchor), self.specs.gpu(target), precision, alpha
            )
        return self._ratios[key]

    def model_alpha(self, model: str, target: str, precision: str) -> float:
        """The compute share of ``model``'s own one-GPU rows of other types than
        ``target`` in ``precision``'s class (:func:`fit_alpha`); the global one when they
        cannot tell compute from bandwidth apart."""
        cls = precision_class(precision)
        key = (model, target, cls)
        if key not in self._alphas:
            rows = [
                m
                for m in self._rows_of.get(model, ())
                if m.gpus == 1 and m.gpu_type != target and precision_class(m.precision) == cls
            ]
            self._alphas[key] = fit_alpha(rows, self.specs, default=self.alpha)
        return self._alphas[key]

    def measured_types(self, model: str) -> frozenset[str]:
        """GPU types ``model`` has measurements on."""
        return self._measured.get(model, frozenset())

    def roofline(
        self,
        model: str,
        gpu_type: str,
        gpus: int,
        precision: str,
        input_name: str = "",
        batch_size: int = 0,
    ) -> float:
        """Roofline prior of a model never measured: see :class:`Roofline`."""
        mspec = self.specs.model(model, input_name)
        return self.roof.samples_per_s(mspec, self.specs.gpu(gpu_type), batch_size, gpus, precision)

    def anchor(
        self, model: str, gpu_type: str, batch_size: int, gpus: int, precision: str
    ) -> tuple[float, float] | None:
        """(prior samples/s, distance) scaled from the model's *other* GPU types, or None.

        One GPU: each anchor type's throughput times :func:`blend_ratio`, combined in a
        geometric mean weighted by 1 / (0.1 + |log ratio|)^2 (closest types weigh most).
        The distance is the log catalog ratio to the nearest anchor type.

        Several GPUs (:meth:`_with_exchange`): a data-parallel step is one GPU's step plus
        the gradient exchange, which runs over the server's GPU-to-GPU link, not at the
        GPU's compute speed. So the one-GPU prior is combined with each anchor's measured
        exchange cost, scaled by the ratio of the link bandwidths (catalog ``link_gbs``).
        Without link figures or multi-GPU anchors: the anchors' own multi-GPU rows scaled
        like one GPU (the anchors' scaling efficiency).
        """
        key = (model, gpu_type, batch_size, gpus, precision)
        if key in self._cache:
            return self._cache[key]
        result: tuple[float, float] | None = None
        t = _Target(
            model=model,
            gpu_type=gpu_type,
            batch_size=batch_size,
            gpus=gpus,
            precision=precision,
            anchors=tuple(sorted(self.measured_types(model) - {gpu_type})),
        )
        if t.anchors and self.physics:
            result = self._physics(t)
        if t.anchors and result is None:
            if gpus > 1:
                result = self._with_exchange(t)
            if result is None:
                result = self._scaled(t)
        self._cache[key] = result
        return result

    def _physics(self, t: _Target) -> tuple[float, float] | None:
        """Prior from the model's own time per sample, fitted on its anchors' rows.

        A worker's seconds per sample are modelled as ``t0 / b + c / F + a / B + w / (B b)
        + x r / (L b)`` (``b`` batch size per worker, ``F`` compute, ``B`` memory
        bandwidth, ``L`` the GPU-to-GPU link, ``r = 2 (n - 1) / n`` the ring all-reduce's
        share on ``n`` GPUs): a fixed per-step latency, per-sample compute and memory
        traffic, the weights read once per step, and the gradient exchange per step.
        The five non-negative coefficients are fitted per model by non-negative least
        squares on relative error over every row of the anchor types (one GPU and
        several); with a single batch size only ``c``, ``a`` (and ``x``) are fitted.

        Used only when the target **lies between** the anchors, i.e. its compute,
        bandwidth and (on several GPUs) link figures are each within the range of the
        anchors' figures: fitted on two types, such a fit interpolates well (P100 from
        K80 and V100 on Gavel's table) but extrapolates badly to a slower or a faster
        type (see docs/predictor.md). None otherwise (the blended speed-up is used).
        """
        if len(t.anchors) < 2:
            return None
        target = self.specs.gpu(t.gpu_type)
        specs = [self.specs.gpu(a) for a in t.anchors]

        def within(values: list[float], value: float) -> bool:
            return min(values) * (1 - 1e-9) <= value <= max(values) * (1 + 1e-9)

        if not (
            within(
                [effective_tflops(g, t.precision or None) for g in specs],
                effective_tflops(target, t.precision or None),
            )
            and within([g.bandwidth_gbs for g in specs], target.bandwidth_gbs)
        ):
            return None
        if t.gpus > 1 and not (
            target.link_gbs > 0
            and all(g.link_gbs > 0 for g in specs)
            and within([g.link_gbs for g in specs], target.link_gbs)
        ):
            return None
        fit = self._physics_fit(t.model, t.anchors, t.precision)
        if fit is None:
            return None
        columns, coef = fit
        if t.gpus > 1 and "x" not in columns:
            return None  # no multi-GPU rows to learn the exchange from
        terms = time_terms(target, t.batch_size, t.gpus, t.precision)
        per_sample_s = float(np.dot([terms[c] for c in columns], coef))
        if not per_sample_s > 0 or not math.isfinite(per_sample_s):
            return None
        ratios = (self._ratio(a, t.gpu_type, t.precision, t.model) for a in t.anchors)
        nearest = min((math.log(r) for r in ratios), key=abs)
        return max(t.gpus, 1) / per_sample_s, nearest

    def _physics_fit(
        self, model: str, anchors: tuple[str, ...], precision: str
    ) -> tuple[tuple[str, ...], np.ndarray] | None:
        cls = precision_class(precision)
        key = (model, anchors, cls)
        if key in self._physics_fits:
            return self._physics_fits[key]
        rows = [m for m in self._rows_of.get(model, ()) if m.gpu_type in anchors]
        same = [m for m in rows if cls and precision_class(m.precision) == cls]
        rows = same or rows  # the query's precision class when the model was measured in it
        result: tuple[tuple[str, ...], np.ndarray] | None = None
        columns: tuple[str, ...] = ("c", "a")
        if len({m.batch_size for m in rows}) >= 2:
            columns = ("t0", "c", "a", "w")
        if any(m.gpus > 1 for m in rows):
            columns = (*columns, "x")
        if len({m.gpu_type for m in rows}) >= 2 and len(rows) >= len(columns):
            from scipy.optimize import nnls

            gpu = self.specs.gpu
            terms = [time_terms(gpu(m.gpu_type), m.batch_size, m.gpus, m.precision) for m in rows]
            A = np.asarray([[row[c] for c in columns] for row in terms])
            y = np.asarray([max(m.gpus, 1) / m.samples_per_s for m in rows])
            w = np.sqrt(np.asarray([m.weight for m in rows]))
            try:
                coef, _ = nnls(A / y[:, None] * w[:, None], w)
            except (ValueError, RuntimeError):  # pragma: no cover - defensive
                coef = None
            if coef is not None and np.all(np.isfinite(coef)) and coef.any():
                result = (columns, coef)
        self._physics_fits[key] = result
        return result

    def _scaled(self, t: _Target) -> tuple[float, float] | None:
        """Anchors' throughput at ``gpus`` times the catalog speed-up, combined."""
        total_w = total = 0.0
        nearest = math.inf
        for anchor in t.anchors:
            sps = self._measured_sps(t.model, anchor, t.batch_size, t.gpus, t.precision)
            if sps is None:
                continue
            ratio = self._ratio(anchor, t.gpu_type, t.precision, t.model)
            distance = abs(math.log(ratio))
            weight = 1.0 / (0.1 + distance) ** 2
            total += weight * math.log(sps * ratio)
            total_w += weight
            if distance < abs(nearest):
                nearest = math.log(ratio)
        return (math.exp(total / total_w), nearest) if total_w > 0 else None

    def _with_exchange(self, t: _Target) -> tuple[float, float] | None:
        """Multi-GPU prior: one GPU's time per sample plus the exchange's, per worker.

        For an anchor measured on one GPU (``s1``) and on ``m`` GPUs (``sm``, the count
        nearest ``gpus``), each worker spends ``m / sm - 1 / s1`` seconds per sample
        beyond its compute: the gradient exchange (its volume is the model's, so the
        batch cancels). On the target it takes that times ``link(anchor) / link(target)``.
        The anchors' costs are averaged with weights 1 / (0.1 + |log link ratio|)^2 (an
        anchor on the same kind of link says most), clipped at 0, and added to the
        one-GPU prior's time per sample: ``samples/s = gpus / (1 / one + exchange)``
        (like the table, linear in ``gpus`` beyond the nearest measured count). None when
        the target's link is unknown or no anchor was measured on 1 and 2+ GPUs.
        """
        link = self.specs.gpu(t.gpu_type).link_gbs
        if link <= 0:
            return None
        counts_of = {a: self.table.measured_gpu_counts(t.model, a, t.precision) for a in t.anchors}
        singles = tuple(a for a in t.anchors if 1 in counts_of[a])
        total_w = total = 0.0
        for anchor in singles:
            spec = self.specs.gpu(anchor)
            counts = counts_of[anchor] - {1}
            if spec.link_gbs <= 0 or not counts:
                continue
            m = min(counts, key=lambda g: (abs(math.log(g / t.gpus)), g))
            sm = self._measured_sps(t.model, anchor, t.batch_size, m, t.precision)
            s1 = self._measured_sps(t.model, anchor, t.batch_size, 1, t.precision)
            if not sm or not s1:
                continue
            ratio = spec.link_gbs / link
            weight = 1.0 / (0.1 + abs(math.log(ratio))) ** 2
            total += weight * (m / sm - 1.0 / s1) * ratio
            total_w += weight
        if total_w <= 0:
            return None
        one_key = (t.model, t.gpu_type, t.batch_size, 1, t.precision, "singles")
        if one_key not in self._cache:
            self._cache[one_key] = self._scaled(replace(t, gpus=1, anchors=singles))
        one = self._cache[one_key]
        if one is None:
            return None
        exchange_s = max(total / total_w, 0.0)
        return t.gpus / (1.0 / one[0] + exchange_s), one[1]


def _spec_point(spec: GpuSpec) -> tuple[float, ...]:
    """The figures a GPU type is placed by: FP32 (TF32), tensor FP16, bandwidth."""
    return (effective_tflops(spec, "fp32"), spec.fp16_tflops, spec.bandwidth_gbs)


def _spec_ranges(specs: Iterable[GpuSpec]) -> list[tuple[float, float]]:
    points = [_spec_point(s) for s in specs]
    if not points:
        return []
    return [(min(col) * (1 - 1e-9), max(col) * (1 + 1e-9)) for col in zip(*points, strict=True)]


class TypeOffsets:
    """How far the anchor prior misses on each GPU type, from the models measured there.

    For every training row whose model was also measured on other types, the log error
    of its anchor prior (computed without its own type: what serving an unmeasured type
    looks like) is kept. A query for a model not measured on a type that **other models
    were** measured on is then corrected by their error there: the median over those
    models of each model's median error, taken from the rows of the query's precision
    class and GPU count when there are any, else of its precision class, else all, and of
    the models of its own domain (vision, detection, nlp, ...) when any was measured
    there: models of one kind miss alike (measured: K80 held out with ResNet-50 and the
    Transformer given, 37.1% -> 16.8%; A100-80GB 13.5% -> 16.8%, see docs). This
    is what a benchmark of a few reference models on a new GPU type teaches about every
    other model: the spec sheet's speed-up is off by about as much for them. The band is
    the spread of the models' errors (half the range), at least :data:`MIN_BAND`.
    """

    def __init__(
        self,
        residuals: Iterable[tuple[Measurement, float]] = (),
        domains: Mapping[str, str] | None = None,
    ) -> None:
        #: GPU type -> (model, precision class, GPUs) -> log errors
        self._by_type: dict[str, dict[tuple[str, str, int], list[float]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for m, err in residuals:
            self._by_type[m.gpu_type][(m.model, precision_class(m.precision), m.gpus)].append(err)
        #: model -> its catalog domain (vision, detection, nlp, ...)
        self.domains: dict[str, str] = dict(domains or {})

    def to_list(self) -> list[tuple[str, str, str, int, str, list[float]]]:
        """Plain data for an artifact (:meth:`from_list` reads it back)."""
        return [
            (gpu, model, cls, gpus, self.domains.get(model, ""), list(errs))
            for gpu, cells in self._by_type.items()
            for (model, cls, gpus), errs in cells.items()
        ]

    @classmethod
    def from_list(cls, items: Iterable[Sequence[Any]]) -> TypeOffsets:
        """The offsets :meth:`to_list` wrote."""
        offsets = cls()
        for gpu, model, pcls, gpus, domain, errs in items:
            offsets._by_type[str(gpu)][(str(model), str(pcls), int(gpus))].extend(
                float(e) for e in errs
            )
            offsets.domains[str(model)] = str(domain)
        return offsets

    def offset(
        self, gpu_type: str, model: str, precision: str, gpus: int, domain: str = ""
    ) -> tuple[float, float] | None:
        """(log correction, log half-spread) for ``model`` (of catalog ``domain``) on
        ``gpu_type``, or None."""
        cells = self._by_type.get(gpu_type)
        if not cells:
            return None
        cls = precision_class(precision)
        matches = (
            lambda k: k[1] == cls and k[2] == gpus,
            lambda k: k[1] == cls,
            lambda k: True,
        )
        for match in matches:
            per_model: dict[str, list[float]] = defaultdict(list)
            for key, errs in cells.items():
                if key[0] != model and match(key):
                    per_model[key[0]].extend(errs)
            alike = {g: v for g, v in per_model.items() if domain and self.domains.get(g) == domain}
            per_model = alike or per_model
            if per_model:
                medians = [float(np.median(v)) for v in per_model.values()]
                spread = (max(medians) - min(medians)) / 2.0
                return float(np.median(medians)), spread
        return None


def _one_thread() -> Any:
    """Limit OpenMP (HistGradientBoosting) to one thread: the machine is shared, and
    spinning OpenMP workers on busy cores is far slower than one thread."""
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    return threadpool_limits(limits=1, user_api="openmp")


def _make_regressor(family: str, n_estimators: int, seed: int) -> Any:
    if family == "rf":
        from sklearn.ensemble import RandomForestRegressor

        return RandomForestRegressor(
            n_estimators=n_estimators,
            min_samples_leaf=2,
            max_features=0.5,
            random_state=seed,
            n_jobs=1,
        )
    if family == "hgb":
        from sklearn.ensemble import HistGradientBoostingRegressor

        return HistGradientBoostingRegressor(
            max_iter=100, learning_rate=0.1, min_samples_leaf=5, random_state=seed
        )
    if family == "xgb":  # optional: compared in docs/predictor.md, not a dependency
        try:
            from xgboost import XGBRegressor  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise ValueError("model family 'xgb' needs the xgboost package installed") from exc
        return XGBRegressor(
            n_estimators=100, learning_rate=0.1, max_depth=6, n_jobs=1, random_state=seed
        )
    raise ValueError(f"unknown model family {family!r}; known: {', '.join(FAMILIES)}")


class ThroughputModel:
    """Predicts samples/s of (model, GPU type, batch size, GPUs); see the module docstring."""

    def __init__(self, family: str = "rf", *, n_estimators: int = 64, seed: int = 0) -> None:
        if family not in FAMILIES:
            raise ValueError(f"unknown model family {family!r}; known: {', '.join(FAMILIES)}")
        self.family = family
        self.n_estimators = n_estimators
        self.seed = seed
        self.measurements: tuple[Measurement, ...] = ()
        self.specs = Specs()
        self.priors: Priors | None = None
        self.regressor: Any = None
        self.residual_sigma = 0.25
        self.shrink: dict[str, float] = {"anchor": 0.0, "roofline": 0.0}
        self.table: BenchmarkTable | None = None
        self.type_offsets = TypeOffsets()
        self._ranges: list[tuple[float, float]] = []
        self.fitted = False

    # -- training

    def _rows(
        self, queries: Iterable[Query], *, exclude_own: bool
    ) -> tuple[list[tuple[float, ...]], list[float], list[str]]:
        """Feature rows, their prior (samples/s) and kind, one or two per query.

        For training (``exclude_own``) each query gives an anchor row (when other types
        were measured) and a roofline row; for serving, the anchor row when possible,
        else the roofline row.
        """
        assert self.priors is not None
        rows: list[tuple[float, ...]] = []
        priors: list[float] = []
        kinds: list[str] = []
        for q in queries:
            mspec = self.specs.model(q.model, q.input)
            gspec = self.specs.gpu(q.gpu_type)
            anchor = self.priors.anchor(q.model, q.gpu_type, q.batch_size, q.gpus, q.precision)
            options: list[tuple[float, bool, float]] = []
            if anchor is not None:
                options.append((anchor[0], True, anchor[1]))
            if exclude_own or anchor is None:
                options.append(
                    (
                        self.priors.roofline(
                            q.model, q.gpu_type, q.gpus, q.precision, q.input, q.batch_size
                        ),
                        False,
                        0.0,
                    )
                )
            for prior, is_anchor, distance in options:
                rows.append(
                    feature_row(
                        model=mspec,
                        gpu=gspec,
                        batch_size=q.batch_size,
                        gpus=q.gpus,
                        precision=q.precision,
                        prior_sps=prior,
                        prior_is_anchor=is_anchor,
                        anchor_log_ratio=distance,
                    )
                )
                priors.append(prior)
                kinds.append("anchor" if is_anchor else "roofline")
        return rows, priors, kinds

    def fit(
        self,
        measurements: Iterable[Measurement],
        *,
        table: BenchmarkTable | None = None,
        calibrate: bool = True,
        shrink: Mapping[str, float] | None = None,
    ) -> ThroughputModel:
        """Fit on ``measurements`` (specs from ``table``'s catalogs and stand-alone rows).

        ``calibrate`` chooses how much of the learned residual to apply per prior kind
        (see :meth:`_calibrate`); otherwise ``shrink`` (or the current values) is kept.
        """
        self.measurements = tuple(measurements)
        if not self.measurements:
            raise ValueError("no measurements to train on")
        self.table = table
        self.specs = Specs(table)
        self.priors = Priors(self.measurements, self.specs)
        X_rows: list[tuple[float, ...]] = []
        targets: list[float] = []
        weights: list[float] = []
        residuals: list[tuple[Measurement, float]] = []
        for m in self.measurements:
            # Priors.anchor never anchors on the target type, i.e. the row's own type
            rows, priors, kinds = self._rows([_query(m)], exclude_own=True)
            if kinds[0] == "anchor":
                residuals.append((m, math.log(m.samples_per_s / priors[0])))
            for row, prior in zip(rows, priors, strict=True):
                X_rows.append(row)
                targets.append(math.log(m.samples_per_s / prior))
                weights.append(m.weight)
        X = np.asarray(X_rows, dtype=np.float32)
        y = np.asarray(targets, dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        anchor_mask = X[:, FEATURES.index("prior_is_anchor")] > 0.5
        base = y[anchor_mask] if anchor_mask.any() else y
        self.residual_sigma = float(np.sqrt(np.average(base**2))) if base.size else 0.25
        if shrink is not None:
            self.shrink = dict(shrink)
        if self.family != "scaling":
            self.regressor = _make_regressor(self.family, self.n_estimators, self.seed)
            with _one_thread():
                self.regressor.fit(X, y, sample_weight=w)
            if calibrate:
                self.shrink = self._calibrate()
        self.type_offsets = TypeOffsets(
            residuals, {m.model: self.specs.model(m.model).domain for m, _ in residuals}
        )
        self._ranges = _spec_ranges(
            self.specs.gpu(g) for g in {m.gpu_type for m in self.measurements}
        )
        self.fitted = True
        return self

    def _inside(self, gpu_type: str) -> bool:
        """True when ``gpu_type``'s figures lie within the training types' ranges: trees
        are constant beyond the range they learned from, so a type outside it (slower or
        faster than every training type in some figure) gets the prior, not the residual."""
        if not self._ranges:
            return True
        spec = self.specs.gpu(gpu_type)
        return all(
            lo <= value <= hi
            for value, (lo, hi) in zip(_spec_point(spec), self._ranges, strict=True)
        )

    def _calibrate(self) -> dict[str, float]:
        """How much of the learned residual to trust, per prior kind, by inner CV.

        For "anchor" predictions: leave one GPU type out of *these* measurements (at
        least 3 types needed); for "roofline": leave one model out (at least 3 models).
        Each candidate weight in {0, 1/4, 1/2, 3/4, 1} of the residual is scored by the
        median absolute percentage error on the held-out rows; the best wins. Without
        enough diversity to validate, the residual is not applied (weight 0): the
        scaling prior alone is the safer bet.
        """
        result = {"anchor": 0.0, "roofline": 0.0}
        for kind, key in (("anchor", "gpu_type"), ("roofline", "model")):
            groups = sorted({getattr(m, key) for m in self.measurements})
            if len(groups) < 3:
                continue
            log_err: list[np.ndarray] = []
            resid: list[np.ndarray] = []
            for group in groups:
                train = [m for m in self.measurements if getattr(m, key) != group]
                test = [m for m in self.measurements if getattr(m, key) == group]
                inner = ThroughputModel(self.family, n_estimators=24, seed=self.seed)
                inner.fit(train, table=self.table, calibrate=False, shrink={kind: 1.0})
                parts = inner._parts([_query(m) for m in test])
                mask = np.asarray([k == kind for k in parts.kinds])
                if not mask.any():
                    continue
                actual = np.log(np.asarray([m.samples_per_s for m in test]))[mask]
                log_err.append(actual - parts.log_prior[mask])
                resid.append(parts.mid[mask])
            if not log_err:
                continue
            err, res = np.concatenate(log_err), np.concatenate(resid)
            scores = {
                lam: float(np.median(np.abs(np.expm1(lam * res - err))))
                for lam in (0.0, 0.25, 0.5, 0.75, 1.0)
            }
            result[kind] = min(scores, key=lambda lam: (scores[lam], lam))
        return result

    # -- serving

    def _parts(self, queries: Sequence[Query]) -> _Parts:
        """Prior, raw learned residual and its tree spread for queries of known GPU types."""
        rows, priors, kinds = self._rows(queries, exclude_own=False)
        X = np.asarray(rows, dtype=np.float32).reshape(len(rows), len(FEATURES))
        log_prior = np.log(np.asarray(priors, dtype=np.float64))
        n = len(rows)
        if self.family == "rf" and n:
            per_tree = np.stack(
                [t.predict(X, check_input=False) for t in self.regressor.estimators_]
            )
            mid = per_tree.mean(axis=0)
            q10, q90 = np.quantile(per_tree, [0.1, 0.9], axis=0)
            lo, hi = q10 - mid, q90 - mid
        else:
            with _one_thread():
                boosted = self.family in {"hgb", "xgb"} and n
                mid = self.regressor.predict(X) if boosted else np.zeros(n)
            band = _Z90 * self.residual_sigma
            lo, hi = np.full(n, -band), np.full(n, band)
        return _Parts(log_prior=log_prior, mid=mid, lo=lo, hi=hi, kinds=tuple(kinds))

    def predict(self, queries: Sequence[Query], *, use_measured: bool = True) -> Predictions:
        """Predicted samples/s (point, 10th and 90th percentile) for each query.

        A (model, GPU type) measured in training is served from the measurement when
        ``use_measured``; a GPU type nobody describes gives NaN ("unknown-gpu").
        """
        if self.priors is None:
            raise RuntimeError("ThroughputModel.predict before fit")
        n = len(queries)
        point = np.full(n, np.nan)
        low = np.full(n, np.nan)
        high = np.full(n, np.nan)
        kinds = ["unknown-gpu"] * n
        todo: list[int] = []
        for i, q in enumerate(queries):
            try:
                self.specs.gpu(q.gpu_type)
            except UnknownName:
                continue
            if use_measured and q.gpu_type in self.priors.measured_types(q.model):
                value = self.priors.table.samples_per_s(
                    q.model, q.gpu_type, q.batch_size, q.gpus, q.precision
                )
                if value is not None:
                    point[i] = value
                    low[i] = value * (1 - MIN_BAND)
                    high[i] = value * (1 + MIN_BAND)
                    kinds[i] = "measured"
                    continue
            todo.append(i)
        if todo:
            parts = self._parts([queries[i] for i in todo])
            lam = np.asarray(
                [
                    self.shrink.get(k, 0.0) if self._inside(queries[i].gpu_type) else 0.0
                    for k, i in zip(parts.kinds, todo, strict=True)
                ]
            )
            mid = lam * parts.mid
            floor = math.log1p(MIN_BAND)
            # the band: the trees' spread, never below the prior's own error when the
            # residual is not trusted, never below measurement noise
            spread = np.where(lam > 0, 1.0, 0.0)
            prior_band = _Z90 * self.residual_sigma * (1 - lam)
            lo = np.minimum(spread * parts.lo - prior_band, -floor)
            hi = np.maximum(spread * parts.hi + prior_band, floor)
            # a type measured on other models: their error there replaces the residual
            kind_list = list(parts.kinds)
            for j, i in enumerate(todo):
                q = queries[i]
                found = (
                    self.type_offsets.offset(
                        q.gpu_type,
                        q.model,
                        q.precision,
                        q.gpus,
                        self.specs.model(q.model).domain,
                    )
                    if parts.kinds[j] == "anchor"
                    else None
                )
                if found is not None:
                    offset, half = found
                    mid[j] = offset
                    lo[j] = min(-half, -floor)
                    hi[j] = max(half, floor)
                    kind_list[j] = "anchor+type"
            idx = np.asarray(todo)
            point[idx] = np.exp(parts.log_prior + mid)
            low[idx] = np.exp(parts.log_prior + mid + lo)
            high[idx] = np.exp(parts.log_prior + mid + hi)
            for j, i in enumerate(todo):
                kinds[i] = kind_list[j]
        return Predictions(point, low, high, tuple(kinds))

    def predict_one(self, query: Query) -> tuple[float, float, float, str]:
        """(point, low, high, kind) of one query."""
        p = self.predict([query])
        return float(p.samples_per_s[0]), float(p.low_sps[0]), float(p.high_sps[0]), p.kind[0]


# --------------------------------------------------------------------------- evaluation


def holdout_predictions(
    measurements: Sequence[Measurement],
    *,
    family: str = "rf",
    holdout_gpu: str | None = None,
    holdout_model: str | None = None,
    table: BenchmarkTable | None = None,
    seed: int = 0,
    calibrate: bool = True,
    given_models: Collection[str] = (),
    scored: Collection[Measurement] | None = None,
) -> tuple[list[Measurement], np.ndarray]:
    """(held-out rows, predicted samples/s) of a model fitted on every other row.

    With ``holdout_gpu``, the held-out type's rows of ``given_models`` go to training (as
    a benchmark run of those models on the new type would) and are not scored; only
    rows in ``scored`` are scored when it is given (an admin's file among the shipped
    tables). Everything fitted (prior's alpha and roofline, forest, calibration) sees
    only the training rows; the held-out rows' throughputs are read only to score.
    """
    if (holdout_gpu is None) == (holdout_model is None):
        raise ValueError("give exactly one of holdout_gpu and holdout_model")
    if given_models and holdout_gpu is None:
        raise ValueError("given models need a held-out GPU type")
    given = frozenset(given_models)

    def held(m: Measurement) -> bool:
        if holdout_gpu is not None:
            return m.gpu_type == holdout_gpu and m.model not in given
        return m.model == holdout_model

    train = [m for m in measurements if not held(m)]
    test = [m for m in measurements if held(m)]
    if scored is not None:
        keep = set(scored)
        test = [m for m in test if m in keep]
    if not test:
        what = holdout_gpu or holdout_model
        raise ValueError(f"no rows to score for {what!r} (besides the given models')")
    if not train:
        raise ValueError("nothing left to train on")
    model = ThroughputModel(family, seed=seed)
    if calibrate:
        model.fit(train, table=table)
    else:  # apply the learned residual in full (what calibration protects against)
        model.fit(train, table=table, calibrate=False, shrink={"anchor": 1.0, "roofline": 1.0})
    return test, model.predict([_query(m) for m in test]).samples_per_s


def evaluate(
    measurements: Sequence[Measurement],
    *,
    family: str = "rf",
    holdout_gpu: str | None = None,
    holdout_model: str | None = None,
    table: BenchmarkTable | None = None,
    seed: int = 0,
    calibrate: bool = True,
    given_models: Collection[str] = (),
    scored: Collection[Measurement] | None = None,
) -> dict[str, float]:
    """Train on every row but the held-out GPU type (or model); score the held-out rows.

    Returns ``{"n", "mape", "median_ape"}``: absolute percentage error of predicted vs
    measured throughput, in percent. ``calibrate=False`` applies the learned residual in
    full instead of the inner-CV weight. ``given_models`` and ``scored``: see
    :func:`holdout_predictions`.
    """
    test, pred = holdout_predictions(
        measurements,
        family=family,
        holdout_gpu=holdout_gpu,
        holdout_model=holdout_model,
        table=table,
        seed=seed,
        calibrate=calibrate,
        given_models=given_models,
        scored=scored,
    )
    actual = np.asarray([m.samples_per_s for m in test])
    ape = np.abs(pred - actual) / actual * 100.0
    return {
        "n": len(test),
        "mape": round(float(np.mean(ape)), 2),
        "median_ape": round(float(np.median(ape)), 2),
    }


# --------------------------------------------------------------------------- artifacts


def save(model: ThroughputModel, path: str | Path) -> None:
    """Write ``model`` with its metadata and training measurements (joblib)."""
    import joblib

    if not model.fitted:
        raise ValueError("cannot save an unfitted model")
    payload = {
        "format": ARTIFACT_FORMAT,
        "sklearn_version": sklearn.__version__,
        "schema_hash": SCHEMA_HASH,
        "family": model.family,
        "n_estimators": model.n_estimators,
        "seed": model.seed,
        "residual_sigma": model.residual_sigma,
        "shrink": dict(model.shrink),
        "type_offsets": model.type_offsets.to_list(),
        "measurements": [asdict(m) for m in model.measurements],
        "extra_models": [asdict(spec) for spec in model.specs.table.extra_models.values()],
        "extra_gpus": [asdict(spec) for spec in model.specs.table.extra_gpus.values()],
        # pickled separately so the metadata can be checked without unpickling sklearn
        "regressor": pickle.dumps(model.regressor) if model.regressor is not None else None,
    }
    joblib.dump(payload, Path(path))


def fallback_model() -> ThroughputModel:
    """The scaling baseline on the shipped table: what :func:`load` falls back to."""
    table = BenchmarkTable.default()
    return ThroughputModel("scaling").fit(measurements_from_table(table), table=table)


def load(path: str | Path) -> ThroughputModel:
    """Read an artifact; retrain or fall back (logging a warning) instead of raising."""
    import joblib

    try:
        payload = joblib.load(Path(path))
        if not isinstance(payload, dict) or payload.get("format") != ARTIFACT_FORMAT:
            raise ValueError("not a predictor artifact (format)")
        measurements = [Measurement(**m) for m in payload["measurements"]]
        table = _table_with_specs(payload.get("extra_models", []), payload.get("extra_gpus", []))
        family = str(payload["family"])
        model = ThroughputModel(
            family,
            n_estimators=int(payload.get("n_estimators", 64)),
            seed=int(payload.get("seed", 0)),
        )
    except Exception as exc:
        log.warning("predictor artifact %s unusable (%s); using the scaling baseline", path, exc)
        return fallback_model()
    reasons = []
    if payload.get("sklearn_version") != sklearn.__version__:
        reasons.append(
            f"scikit-learn {payload.get('sklearn_version')} != installed {sklearn.__version__}"
        )
    if payload.get("schema_hash") != SCHEMA_HASH:
        reasons.append(f"feature schema {payload.get('schema_hash')} != {SCHEMA_HASH}")
    try:
        if reasons:
            log.warning(
                "predictor artifact %s: %s; retraining from its %d measurements",
                path,
                "; ".join(reasons),
                len(measurements),
            )
            return model.fit(measurements, table=table)
        model.measurements = tuple(measurements)
        model.table = table
        model.specs = Specs(table)
        model.priors = Priors(model.measurements, model.specs)
        model.residual_sigma = float(payload.get("residual_sigma", 0.25))
        model.shrink = {str(k): float(v) for k, v in dict(payload.get("shrink", {})).items()}
        model.type_offsets = TypeOffsets.from_list(payload.get("type_offsets", ()))
        model._ranges = _spec_ranges(
            model.specs.gpu(g) for g in {m.gpu_type for m in model.measurements}
        )
        blob = payload.get("regressor")
        model.regressor = pickle.loads(blob) if blob is not None else None
        if model.family != "scaling" and model.regressor is None:
            raise ValueError("artifact has no regressor")
        model.fitted = True
        return model
    except Exception as exc:
        log.warning("predictor artifact %s: retraining failed (%s); scaling baseline", path, exc)
        return fallback_model()


def _table_with_specs(
    models: Iterable[Mapping[str, Any]], gpus: Iterable[Mapping[str, Any]]
) -> BenchmarkTable | None:
    """An empty table carrying stand-alone specs (None when there are none)."""
    extra_models = {}
    for raw in models:
        fields = dict(raw)
        fields["aliases"] = tuple(fields.get("aliases", ()))
        fields["variants"] = tuple(tuple(v) for v in fields.get("variants", ()))
        extra_models[str(fields["name"])] = ModelSpec(**fields)
    extra_gpus = {}
    for raw in gpus:
        fields = dict(raw)
        fields["aliases"] = tuple(fields.get("aliases", ()))
        extra_gpus[str(fields["name"])] = GpuSpec(**fields)
    if not extra_models and not extra_gpus:
        return None
    return BenchmarkTable([], extra_models=extra_models, extra_gpus=extra_gpus)
