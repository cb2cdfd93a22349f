"""GPU and model facts, and the physics the priors are built on: the speed blend of compute
and bandwidth (:func:`blend_ratio`, its alpha fitted by :func:`fit_alpha`) and the
latency-aware roofline (:class:`Roofline`, fitted by :func:`fit_roofline`)."""

from __future__ import annotations

import logging
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from predictor.benchmarks import BenchmarkTable
from predictor.catalog import (
    GpuSpec,
    ModelSpec,
    UnknownName,
    effective_tflops,
    median_model_facts,
)
from predictor.measurements import Measurement

log = logging.getLogger("predictor")


class Specs:
    """Model and GPU facts: the catalogs, a table's stand-alone rows, then imputation.

    A model nobody describes gets the median parameters and MACs of the catalog models
    (domain "unknown"); a GPU type nobody describes raises :class:`UnknownName`.
    """

    def __init__(self, table: BenchmarkTable | None = None) -> None:
        self.table = table if table is not None else BenchmarkTable.default()
        self._models: dict[str, ModelSpec] = {}
        self._gpus: dict[str, GpuSpec] = {}
        self._median_params, self._median_gmacs = median_model_facts()

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
    """:class:`Roofline` fitted by robust (soft-L1) least squares on log throughput.

    Needs rows of at least two models; otherwise (or if the fit fails) the efficiency
    alone is fitted (median), with no latency term and the exchange at link peak. Four
    numbers do not need more than :data:`ROOFLINE_MAX_ROWS` rows: beyond that an evenly
    spaced subset is used (retraining on raw history stays fast).

    The same rows give the same roofline whatever BLAS kernels and vector instructions
    the CPU has: the residuals are computed one row at a time with ``math`` (numpy's
    vector maths differs in its last bits with the CPU's SIMD), MINPACK's
    Levenberg-Marquardt uses no BLAS (``least_squares``' default method runs on BLAS,
    whose kernels OpenBLAS picks by CPU), and the soft-L1 loss is reached by
    reweighting. It matters because the fit has flat directions (a compute
    share near 0, a latency term no row needs) where two CPUs' fits stopped apart in the
    sixth digit, and every schedule learned on top of it followed (docs/results.md,
    "One run is one sample").
    """
    if len(measurements) > ROOFLINE_MAX_ROWS:
        step = math.ceil(len(measurements) / ROOFLINE_MAX_ROWS)
        measurements = measurements[::step]
    # per row: FLOPs per sample, log compute and log bandwidth (both as FLOP/s), batch,
    # GPUs, the exchange's time at link peak, log samples/s, square root of the weight
    rows = [
        (
            max(specs.model(m.model, m.input).train_gflops_per_sample, 1e-6) * 1e9,
            math.log(effective_tflops(specs.gpu(m.gpu_type), m.precision or None) * 1e12),
            math.log(specs.gpu(m.gpu_type).bandwidth_gbs * 1e9 * FLOPS_PER_BYTE),
            float(max(m.batch_size, 1)),
            float(max(m.gpus, 1)),
            exchange_volume_s(specs.model(m.model, m.input), specs.gpu(m.gpu_type), m.gpus),
            math.log(m.samples_per_s),
            math.sqrt(m.weight),
        )
        for m in measurements
    ]
    # log efficiency of each row at the midpoint of compute and bandwidth, no latency
    middle = statistics.median(
        y - math.log(n) - 0.5 * (compute + memory) + math.log(flops)
        for flops, compute, memory, _, n, _, y, _ in rows
    )
    fallback = Roofline(
        t0_s=0.0, efficiency=float(kept_digits([math.exp(middle)])[0]), exchange=1.0, alpha=0.5
    )
    if len({m.model for m in measurements}) < 2 or len(rows) < 4:
        return fallback

    def errors(p: Sequence[float]) -> list[float]:
        """Weighted log error of each row under parameters ``p`` (clipped to the box)."""
        q = [min(max(v, lo), hi) for v, lo, hi in zip(p, *_ROOFLINE_BOX, strict=True)]
        alpha = 1.0 / (1.0 + math.exp(-q[3]))
        t0, eff, exch = math.exp(q[0]), math.exp(q[1]), math.exp(q[2])
        return [
            (math.log(n * b / (t0 + b * flops / (eff * speed) + exch * volume)) - y) * root_w
            for flops, compute, memory, b, n, volume, y, root_w in rows
            for speed in (math.exp(alpha * compute + (1 - alpha) * memory),)
        ]

    from scipy.optimize import least_squares  # type: ignore[import-untyped]

    p = [math.log(0.01), math.log(0.3), 0.0, 0.0]
    scale = [1.0] * len(rows)
    try:
        for _ in range(_REWEIGHTS):
            fit = least_squares(
                lambda x, k: np.asarray([e * ki for e, ki in zip(errors(x), k, strict=True)]),
                np.asarray(p),
                method="lm",
                args=(scale,),
            )
            p = [
                min(max(float(v), lo), hi) for v, lo, hi in zip(fit.x, *_ROOFLINE_BOX, strict=True)
            ]
            # soft-L1: each row's squared error weighted by 1 / sqrt(1 + error^2)
            scale = [(1.0 + e * e) ** -0.25 for e in errors(p)]
    except (ValueError, np.linalg.LinAlgError) as exc:  # pragma: no cover - defensive
        log.warning("roofline fit failed (%s); median efficiency only", exc)
        return fallback
    t0, efficiency, exchange = kept_digits([math.exp(v) for v in p[:3]])
    return Roofline(
        t0_s=float(t0),
        efficiency=float(efficiency),
        exchange=float(exchange),
        alpha=round(1.0 / (1.0 + math.exp(-p[3])), 6),  # in [0, 1]: six decimals
    )


#: the box the roofline's parameters (log t0, log efficiency, log exchange, the compute
#: share's logit) are kept in: lower bounds, upper bounds
_ROOFLINE_BOX = ((-20.0, -12.0, -20.0, -30.0), (3.0, 3.0, 10.0, 30.0))
#: reweighting rounds of the soft-L1 fit
_REWEIGHTS = 6


def kept_digits(values: Sequence[float] | np.ndarray, floor: float = 0.0) -> np.ndarray:
    """``values`` to six significant digits, those under ``floor`` in size to 0. A fit's
    last digits depend on the BLAS kernels the CPU runs (OpenBLAS picks them by CPU),
    and what is learned on top of it (the forest's splits, so every schedule) amplifies
    them; rounded, the same rows give the same fit on any of them."""
    return np.asarray(
        [0.0 if abs(v) < floor else float(f"{v:.6g}") for v in np.asarray(values, dtype=np.float64)]
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
