"""What the throughput model learns from and answers: measurements, queries, predictions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from predictor.benchmarks import BenchmarkTable


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


def query_of(m: Measurement) -> Query:
    """The query ``m`` answers (its model, GPU type, batch size, GPUs, precision, input)."""
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
