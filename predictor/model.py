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
(interpolated, :class:`predictor.benchmarks.BenchmarkTable`), not from the model.

Saved models (:mod:`predictor.artifacts`) record the scikit-learn version and the feature
schema hash; on a mismatch loading retrains from the measurements stored inside, and if
that fails it falls back to the scaling baseline on the shipped table, logging a warning.
It never raises into the caller.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from predictor import calibration_cache
from predictor.benchmarks import BenchmarkTable, precision_class
from predictor.catalog import GpuSpec, UnknownName, effective_tflops
from predictor.features import FEATURES, feature_row
from predictor.measurements import Measurement, Predictions, Query, query_of
from predictor.priors import Priors
from predictor.roofline import Specs
from predictor.transfer import RatioTransfer

log = logging.getLogger("predictor")

FAMILIES = ("rf", "hgb", "xgb", "scaling")
#: relative half-width floor of every uncertainty band (measurement noise)
MIN_BAND = 0.10
#: the residual's weights the inner cross-validation chooses from (``_calibrate``)
RESIDUAL_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: trees of each inner forest, and how many forests of different seeds score each weight
INNER_TREES = 24
INNER_REPEATS = 3
INNER_SEED_STEP = 7919  # seed, seed + step, ...: draws unrelated to the served forest's
_Z90 = 1.2816


@dataclass(frozen=True, slots=True, kw_only=True)
class _Parts:
    log_prior: np.ndarray
    mid: np.ndarray  # learned log residual (mean over trees), before shrinking
    lo: np.ndarray  # 10th percentile of the trees minus mid
    hi: np.ndarray  # 90th percentile of the trees minus mid
    kinds: tuple[str, ...]


def _spec_point(spec: GpuSpec) -> tuple[float, ...]:
    """The figures a GPU type is placed by: FP32 (TF32), tensor FP16, bandwidth."""
    return (effective_tflops(spec, "fp32"), spec.fp16_tflops, spec.bandwidth_gbs)


def spec_ranges(specs: Iterable[GpuSpec]) -> list[tuple[float, float]]:
    """Per figure of :func:`_spec_point`, the range ``specs`` span (a hair wider)."""
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
        self.transfer: RatioTransfer | None = None
        self.ranges: list[tuple[float, float]] = []
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
            anchor = self.priors.anchor(
                q.model, q.gpu_type, q.batch_size, q.gpus, q.precision, q.input
            )
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
            rows, priors, kinds = self._rows([query_of(m)], exclude_own=True)
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
        self.ranges = spec_ranges(
            self.specs.gpu(g) for g in {m.gpu_type for m in self.measurements}
        )
        self.transfer = RatioTransfer(
            self.measurements,
            self.priors.speedup,
            has_tf32=lambda gpu: self.specs.gpu(gpu).tf32_tflops > 0,
        )
        self.fitted = True
        return self

    def _inside(self, gpu_type: str) -> bool:
        """True when ``gpu_type``'s figures lie within the training types' ranges: trees
        are constant beyond the range they learned from, so a type outside it (slower or
        faster than every training type in some figure) gets the prior, not the residual."""
        if not self.ranges:
            return True
        spec = self.specs.gpu(gpu_type)
        return all(
            lo <= value <= hi
            for value, (lo, hi) in zip(_spec_point(spec), self.ranges, strict=True)
        )

    def _calibrate(self) -> dict[str, float]:
        """How much of the learned residual to trust, per prior kind, by inner CV.

        For "anchor" predictions: leave one GPU type out of *these* measurements (at
        least 3 types needed); for "roofline": leave one model out (at least 3 models).
        Each candidate weight in {0, 1/4, 1/2, 3/4, 1} of the residual is scored by the
        median absolute percentage error on the held-out rows, averaged over
        ``INNER_REPEATS`` inner forests of different seeds (repeated cross-validation: one
        small forest's draw of features flipped the choice, docs/predictor.md); the best
        wins. Without enough diversity to validate, the residual is not applied (weight
        0): the scaling prior alone is the safer bet. The answer is kept
        (:mod:`predictor.calibration_cache`): a second fit on the same inputs skips it.
        """
        table = self.table
        key = calibration_cache.key_of(
            "calibrate",
            self.family,
            self.seed,
            INNER_TREES,
            INNER_REPEATS,
            self.measurements,
            # what the table holds, not its derived indexes (sets: their order varies)
            None if table is None else (table.rows, table.extra_models, table.extra_gpus),
        )
        return calibration_cache.kept(key, self._cross_validate)

    def _cross_validate(self) -> dict[str, float]:
        """The inner cross-validation itself (:meth:`_calibrate`)."""
        result = {"anchor": 0.0, "roofline": 0.0}
        for kind, key in (("anchor", "gpu_type"), ("roofline", "model")):
            groups = sorted({getattr(m, key) for m in self.measurements})
            if len(groups) < 3:
                continue
            splits = [
                (
                    [m for m in self.measurements if getattr(m, key) != group],
                    [m for m in self.measurements if getattr(m, key) == group],
                )
                for group in groups
            ]
            scores = dict.fromkeys(RESIDUAL_WEIGHTS, 0.0)
            scored = False
            for repeat in range(INNER_REPEATS):
                seed = self.seed + INNER_SEED_STEP * repeat
                log_err: list[np.ndarray] = []
                resid: list[np.ndarray] = []
                for train, test in splits:
                    inner = ThroughputModel(self.family, n_estimators=INNER_TREES, seed=seed)
                    inner.fit(train, table=self.table, calibrate=False, shrink={kind: 1.0})
                    parts = inner._parts([query_of(m) for m in test])
                    mask = np.asarray([k == kind for k in parts.kinds])
                    if not mask.any():
                        continue
                    actual = np.log(np.asarray([m.samples_per_s for m in test]))[mask]
                    log_err.append(actual - parts.log_prior[mask])
                    resid.append(parts.mid[mask])
                if not log_err:
                    continue
                scored = True
                err, res = np.concatenate(log_err), np.concatenate(resid)
                for lam in scores:
                    scores[lam] += float(np.median(np.abs(np.expm1(lam * res - err))))
            if scored:
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
            log_prior = parts.log_prior.copy()
            for j, i in enumerate(todo):
                q = queries[i]
                # other models measured on this type: their observed speed ratio over the
                # known types, moved to this model (predictor.transfer), when 3+ types agree
                moved = (
                    self.transfer.predict(
                        q.model, q.gpu_type, q.batch_size, q.gpus, q.precision, q.input
                    )
                    if self.transfer is not None
                    else None
                )
                if moved is not None:
                    log_prior[j] = math.log(moved[0])
                    mid[j] = 0.0
                    lo[j] = min(-moved[1], -floor)
                    hi[j] = max(moved[1], floor)
                    kind_list[j] = "transfer"
                    continue
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
            point[idx] = np.exp(log_prior + mid)
            low[idx] = np.exp(log_prior + mid + lo)
            high[idx] = np.exp(log_prior + mid + hi)
            for j, i in enumerate(todo):
                kinds[i] = kind_list[j]
        return Predictions(point, low, high, tuple(kinds))

    def predict_one(self, query: Query) -> tuple[float, float, float, str]:
        """(point, low, high, kind) of one query."""
        p = self.predict([query])
        return float(p.samples_per_s[0]), float(p.low_sps[0]), float(p.high_sps[0]), p.kind[0]
