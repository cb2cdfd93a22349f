"""The precision an admin's benchmark file was measured in, when it does not say.

A file in the four columns (``model, gpu_type, batch_size, samples_per_s``) says nothing of
precision, yet the same model runs 2-3x faster in mixed precision than in FP32 on tensor
cores, and a V100 (no TF32) runs FP32 at a seventh of its tensor rate. A row of unknown
precision is predicted on the geometric mean of the FP32 and tensor FP16 figures
(:func:`predictor.catalog.effective_tflops`), which is neither.

One file is one setup: whoever measured it ran every row the same way. So its precision
is chosen once for the whole file, by what the shipped tables say of the rows that may be
used: a model fitted on the shipped rows (none of a held-out type) predicts the file's
usable rows as FP32, as mixed precision and as unknown; the class whose predictions are
nearest (median absolute log error) is the file's, ties to unknown. Rows that state a
precision are left as they are.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from predictor.benchmarks import BenchmarkTable
from predictor.measurements import measurements_from_table, query_of
from predictor.model import ThroughputModel

#: The classes a file may be read as: FP32 (TF32 on Ampere and later), mixed, unknown.
CHOICES: tuple[str, ...] = ("", "fp32", "fp16")


@dataclass(frozen=True)
class Inferred:
    """What :func:`infer_precision` chose, and the median absolute log error of each class
    on the ``rows`` rows it judged by (empty when nothing was judged)."""

    precision: str
    errors: dict[str, float]
    rows: int


def infer_precision(
    own: BenchmarkTable,
    shipped: BenchmarkTable,
    *,
    exclude_gpu: str | None = None,
    exclude_model: str | None = None,
    family: str = "rf",
    seed: int = 0,
) -> Inferred:
    """The precision ``own``'s rows of unknown precision were most likely measured in.

    Judged on those rows not of ``exclude_gpu`` nor ``exclude_model`` (what is held out is
    never read), by a model fitted on ``shipped``'s rows not of them either, nor of a model
    the catalog does not know (its prediction there says nothing of precision). ``""``
    (unknown) when no row can be judged."""
    unknown = set(own.imputed_models)

    def usable(model: str, gpu_type: str) -> bool:
        return gpu_type != exclude_gpu and model != exclude_model and model not in unknown

    judged = [
        m for m in measurements_from_table(own) if not m.precision and usable(m.model, m.gpu_type)
    ]
    train = [m for m in measurements_from_table(shipped) if usable(m.model, m.gpu_type)]
    if not judged or not train:
        return Inferred("", {}, 0)
    model = ThroughputModel(family, seed=seed).fit(train, table=shipped)
    errors: dict[str, float] = {}
    for precision in CHOICES:
        queries = [replace(query_of(m), precision=precision) for m in judged]
        predicted = model.predict(queries).samples_per_s
        logs = [
            abs(math.log(float(p) / m.samples_per_s))
            for p, m in zip(predicted, judged, strict=True)
            if math.isfinite(float(p)) and float(p) > 0
        ]
        if logs:
            errors[precision] = statistics.median(logs)
    if not errors:
        return Inferred("", {}, 0)
    best = min(errors, key=lambda p: (errors[p], CHOICES.index(p)))
    return Inferred(best, errors, len(judged))


def with_precision(own: BenchmarkTable, precision: str) -> BenchmarkTable:
    """``own`` with ``precision`` on every row that states none."""
    if not precision:
        return own
    return own.with_rows(r if r.precision else replace(r, precision=precision) for r in own.rows)
