"""The scaling baseline (:class:`Priors`): a model's throughput on a GPU type from its
measurements on other types (the "anchor" prior), else from the roofline (see
:mod:`predictor.model`)."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from predictor.benchmarks import BenchmarkRow, BenchmarkTable, precision_class
from predictor.catalog import effective_tflops
from predictor.measurements import Measurement
from predictor.roofline import (
    Specs,
    blend_ratio,
    fit_alpha,
    fit_roofline,
    kept_digits,
    time_terms,
)

log = logging.getLogger("predictor")

#: a time fit's coefficient under this is 0: noise around a term the rows do not need
_COEF_FLOOR = 1e-12


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
        by_input: dict[tuple[str, str], set[str]] = defaultdict(set)
        for m in measurements:
            by_model[m.model].add(m.gpu_type)
            by_input[(m.model, m.input)].add(m.gpu_type)
        self._measured = {k: frozenset(v) for k, v in by_model.items()}
        #: (model, input) -> GPU types that benchmark (the model on that input) was run on
        self._measured_input = {k: frozenset(v) for k, v in by_input.items()}
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

    def speedup(self, anchor: str, target: str, precision: str, model: str = "") -> float:
        """The spec sheet's speed-up of ``target`` over ``anchor`` (:func:`blend_ratio`)
        with ``model``'s compute share (:meth:`model_alpha`), the shared one without."""
        return self._ratio(anchor, target, precision, model)

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
        self,
        model: str,
        gpu_type: str,
        batch_size: int,
        gpus: int,
        precision: str,
        input_name: str = "",
    ) -> tuple[float, float] | None:
        """(prior samples/s, distance) scaled from the model's *other* GPU types, or None.

        The anchors are the types the same benchmark (``model`` on ``input_name``) was
        measured on when there are any besides ``gpu_type``, else every type the model
        was measured on: Gavel's ResNet-50 on ImageNet is not scaled from Lambda's
        ResNet-50 rows when Gavel measured it elsewhere (as the speed-ratio transfer's
        rule 1, :mod:`predictor.transfer`).

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
        same = self._measured_input.get((model, input_name), frozenset()) - {gpu_type}
        anchors = tuple(sorted(same or (self.measured_types(model) - {gpu_type})))
        key = (model, gpu_type, batch_size, gpus, precision, anchors)
        if key in self._cache:
            return self._cache[key]
        result: tuple[float, float] | None = None
        t = _Target(
            model=model,
            gpu_type=gpu_type,
            batch_size=batch_size,
            gpus=gpus,
            precision=precision,
            anchors=anchors,
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
        per_sample_s = math.fsum(terms[c] * k for c, k in zip(columns, coef, strict=True))
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
            from scipy.optimize import nnls  # type: ignore[import-untyped]

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
                result = (columns, kept_digits(coef, floor=_COEF_FLOOR))
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
        beyond its compute: the gradient exchange. Its volume is the model's, once per
        step, so per sample it scales as ``1 / batch``: read at the target's batch size
        when the anchor measured it, else at the nearest measured one ``b'`` and scaled
        by ``b' / batch`` (Lambda measured every type at the batch that fills its
        memory: V100-16GB's are 2-4x smaller than the 24-80 GB types'). On the target it
        takes that times ``link(anchor) / link(target)``.
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
            per_sample = m / sm - 1.0 / s1
            batches = self.table.measured_batches(t.model, anchor, m, t.precision)
            if batches and t.batch_size > 0:  # read at the nearest measured batch size
                per_sample *= min(max(t.batch_size, min(batches)), max(batches)) / t.batch_size
            total += weight * per_sample * ratio
            total_w += weight
        if total_w <= 0:
            return None
        one_key = (t.model, t.gpu_type, t.batch_size, 1, t.precision, "singles", singles)
        if one_key not in self._cache:
            self._cache[one_key] = self._scaled(replace(t, gpus=1, anchors=singles))
        one = self._cache[one_key]
        if one is None:
            return None
        exchange_s = max(total / total_w, 0.0)
        return t.gpus / (1.0 / one[0] + exchange_s), one[1]
