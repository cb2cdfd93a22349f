"""Speed-ratio transfer: a model's throughput on a GPU type it was not measured on, from
other models that were measured there (issue 17, a few reference models benchmarked on a
new type).

For a query (model ``m``, type ``T``, batch ``b``, ``n`` GPUs, precision class ``p``):

1. For every known type ``K`` other than ``T``, the **observed speed ratio** of ``T`` over
   ``K`` is taken from the other models measured on both (``g``): each row of ``g`` on
   ``T`` at ``n`` GPUs in class ``p`` is divided by ``g``'s throughput on ``K`` on the same
   input (the same benchmark: Gavel's ResNet-50 on ImageNet is not compared with Lambda's
   rows, measured on other hosts), GPU count, class and batch size (log-log interpolated
   over ``K``'s batch sizes, clamped to the measured range); per model the mean log
   ratio, then the weighted mean over the models (below). Same GPU count: the ratio
   carries how the new type's server scales.
   **The reference models are weighted by how alike their speed profile is to ``m``'s**:
   for each reference ``g``, the mean gap ``d_g`` between ``m``'s and ``g``'s log ratio
   over ``K`` on the other known types (both measured there, same GPU count and class),
   weight ``1 / (0.05 + d_g)^2`` (a reference never measured with ``m`` elsewhere: ``d_g
   = 0.5``). A reference that tracked ``m`` from ``K`` to every other type is the better
   guide to ``T``.
2. That ratio is moved from the reference models to ``m`` by the spec sheet: plus ``m``'s
   own log speed-up ``K -> T`` minus the reference models' (weighted) mean (each speed-up
   the catalog blend ``compute^a x bandwidth^(1-a)`` with the model's own fitted compute
   share ``a``): a compute-bound model gains more from a type that is faster in compute.
3. The prediction from ``K`` is ``m``'s measured throughput on ``K`` (same GPU count,
   class, batch) times that ratio: ``m``'s own multi-GPU scaling comes from ``K``.
4. In FP32, a known type is skipped when exactly one of it and ``T`` runs FP32 on TF32
   tensor cores (Ampere and later, catalog ``tf32_tflops``): how much TF32 speeds a
   model up depends on its share of matrix products, so a V100's or RTX 8000's FP32
   ratio over an A100 differs from model to model (BERT-base 0.18x, SSD 0.34x).
   A row of unknown precision (an admin's file without the column) is compared with
   ``K``'s rows of every class (their geometric mean at each batch size), as
   :class:`predictor.benchmarks.BenchmarkTable` serves such a query.
5. The per-``K`` predictions are combined geometrically with weights ``models / (0.05 +
   spread)`` (``spread``: the range of the reference models' log ratios, 0.5 with one
   model: ratios the models agree on say more) times ``1 / (0.1 + |log speed-up K ->
   T|)^2`` (closer types say more, as in the anchor prior).
6. **Rule**: used only when at least :data:`MIN_TYPES` (3) known types give a
   prediction; otherwise None and the caller falls back (the anchor prior with the type
   offset). With fewer types a model's own per-type fit is the better guide (on Gavel's
   table, whose models were measured on 2 other types only, see docs/predictor.md).

Only the measurements it is built from are read; in leave-one-type-out evaluation those
are the training rows (the held-out type's rows of the given models, never the scored
ones).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable

from predictor.benchmarks import _interpolate, precision_class
from predictor.measurements import Measurement

#: the fewest known types a transfer must combine, else None (the caller falls back)
MIN_TYPES = 3
#: ``d`` in a reference's weight ``1 / (PROFILE_EPS + d)^2`` (d: mean log-ratio gap to the model)
PROFILE_EPS = 0.05
#: the gap assumed for a reference with no known type shared with the model besides ``K``
UNSHARED_GAP = 0.5
#: the precision "class" of every row: what a row of unknown precision is compared with
ANY = "*"


#: speed-up of ``target`` over ``anchor`` for ``model`` in ``precision`` (spec sheet)
Speedup = Callable[[str, str, str, str], float]

_Key = tuple[str, str, str, str, int]  # model, input, GPU type, precision class, GPUs


class RatioTransfer:
    """See the module docstring. ``speedup(anchor, target, precision, model)`` is the spec
    sheet's speed-up (:meth:`predictor.priors.Priors.speedup`)."""

    def __init__(
        self,
        measurements: Iterable[Measurement],
        speedup: Speedup,
        *,
        has_tf32: Callable[[str], bool] | None = None,
        min_types: int = MIN_TYPES,
    ) -> None:
        self.speedup = speedup
        self.has_tf32 = has_tf32
        self.min_types = min_types
        cells: dict[_Key, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for m in measurements:
            for cls in {precision_class(m.precision), ANY}:
                key = (m.model, m.input, m.gpu_type, cls, m.gpus)
                cells[key][m.batch_size].append(math.log(m.samples_per_s))
        #: (model, input, type, class, GPUs) -> sorted (batch, samples/s), repeats averaged
        self._curves: dict[_Key, list[tuple[int, float]]] = {
            key: sorted((b, math.exp(sum(v) / len(v))) for b, v in by_batch.items())
            for key, by_batch in cells.items()
        }
        #: (type, class, GPUs) -> (model, input) measured there
        self._models_at: dict[tuple[str, str, int], set[tuple[str, str]]] = defaultdict(set)
        #: model -> types it was measured on
        self._types_of: dict[str, set[str]] = defaultdict(set)
        for model, input_name, gpu, cls, gpus in self._curves:
            self._models_at[(gpu, cls, gpus)].add((model, input_name))
            self._types_of[model].add(gpu)
        self._ratios: dict[tuple[str, str, str, int], dict[str, float]] = {}

    def _sps(
        self, model: str, input_name: str, gpu: str, cls: str, gpus: int, batch: int
    ) -> float | None:
        points = self._curves.get((model, input_name, gpu, cls, gpus))
        return _interpolate(points, batch) if points else None

    def ratios(self, target: str, anchor: str, cls: str, gpus: int) -> dict[str, float]:
        """Per reference model measured on both types (on the same input, i.e. the same
        benchmark): mean log(samples/s on ``target`` / samples/s on ``anchor``) over its
        ``target`` rows at ``gpus`` in ``cls``, the mean over its inputs."""
        key = (target, anchor, cls, gpus)
        if key not in self._ratios:
            found: dict[str, list[float]] = defaultdict(list)
            known = cls or ANY  # unknown precision: the known type's rows of any class
            both = self._models_at.get((target, cls, gpus), set()) & self._models_at.get(
                (anchor, known, gpus), set()
            )
            for g, input_name in sorted(both):
                logs = []
                for batch, sps in self._curves[(g, input_name, target, cls, gpus)]:
                    ref = self._sps(g, input_name, anchor, known, gpus, batch)
                    if ref:
                        logs.append(math.log(sps / ref))
                if logs:
                    found[g].append(sum(logs) / len(logs))
            self._ratios[key] = {g: sum(v) / len(v) for g, v in found.items()}
        return self._ratios[key]

    def _across_tf32(self, anchor: str, target: str) -> bool:
        """True when one of the two types runs FP32 on TF32 tensor cores and the other
        does not: how much a model gains from TF32 is its own (its share of matmuls), so
        other models' FP32 ratio across that break says little about it."""
        if self.has_tf32 is None:
            return False
        return self.has_tf32(anchor) != self.has_tf32(target)

    def reference_weights(
        self,
        model: str,
        target: str,
        anchor: str,
        cls: str,
        gpus: int,
        references: Iterable[str],
    ) -> dict[str, float]:
        """Per reference model, ``1 / (PROFILE_EPS + d)^2``: ``d`` is the mean absolute gap
        between ``model``'s and the reference's log ratio over ``anchor`` on every other
        known type (not ``target``; in FP32 not across the TF32 break) where both were
        measured at ``gpus`` in ``cls``; :data:`UNSHARED_GAP` where there is none."""
        gaps: dict[str, list[float]] = {g: [] for g in references}
        for other in sorted(self._types_of.get(model, ())):
            if other in (anchor, target):
                continue
            if cls == "fp32" and self._across_tf32(other, target):
                continue
            found = self.ratios(other, anchor, cls, gpus)
            own = found.get(model)
            if own is None:
                continue
            for g, seen in gaps.items():
                if g in found:
                    seen.append(abs(own - found[g]))
        return {
            g: 1.0 / (PROFILE_EPS + (sum(v) / len(v) if v else UNSHARED_GAP)) ** 2
            for g, v in gaps.items()
        }

    def predict(
        self,
        model: str,
        gpu_type: str,
        batch_size: int,
        gpus: int,
        precision: str,
        input_name: str = "",
    ) -> tuple[float, float] | None:
        """(samples/s, log spread of the per-type predictions), or None by the rule."""
        if gpu_type in self._types_of.get(model, ()):
            return None  # measured there: served from the measurement, not transferred
        cls = precision_class(precision)
        logs: list[float] = []
        weights: list[float] = []
        for anchor in sorted(self._types_of.get(model, ())):
            if cls == "fp32" and self._across_tf32(anchor, gpu_type):
                continue
            own = self._sps(model, input_name, anchor, cls or ANY, gpus, batch_size)
            per = {g: r for g, r in self.ratios(gpu_type, anchor, cls, gpus).items() if g != model}
            if own is None or not per:
                continue
            alike = self.reference_weights(model, gpu_type, anchor, cls, gpus, per)
            total_alike = sum(alike.values())
            ref_speedup = (
                sum(alike[g] * math.log(self.speedup(anchor, gpu_type, precision, g)) for g in per)
                / total_alike
            )
            own_speedup = math.log(self.speedup(anchor, gpu_type, precision, model))
            moved = sum(alike[g] * r for g, r in per.items()) / total_alike
            ratio = moved + own_speedup - ref_speedup
            spread = max(per.values()) - min(per.values()) if len(per) > 1 else 0.5
            closeness = 1.0 / (0.1 + abs(math.log(self.speedup(anchor, gpu_type, precision, ""))))
            logs.append(math.log(own) + ratio)
            weights.append(len(per) / (0.05 + spread) * closeness**2)
        if len(logs) < self.min_types:
            return None
        total = sum(weights)
        mean = sum(w * v for w, v in zip(weights, logs, strict=True)) / total
        var = sum(w * (v - mean) ** 2 for w, v in zip(weights, logs, strict=True)) / total
        return math.exp(mean), math.sqrt(var)
