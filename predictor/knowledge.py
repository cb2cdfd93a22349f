"""The benchmark knowledge the predictor ships, and the rule that keeps absurd rows out.

Two published tables ship in ``predictor/data/`` (origins and citations in its README):

- ``benchmarks.csv``: Gavel's measurements (K80, P100, V100; :mod:`predictor.gavel`);
- ``lambda.csv``: Lambda's PyTorch training throughputs (12 GPU types from V100 to H100,
  1-8 GPUs, FP32 and FP16; :mod:`predictor.lambdalabs`).

Their model and GPU names are reconciled by the catalogs' aliases alone
(``predictor/data/models.yaml``, ``gpus.yaml``): ``bert_base_squad`` is ``bert-base`` on
SQuAD, ``H100 80GB SXM5`` is ``H100-80GB``, ``H100 80GB PCIe Gen5`` is
``H100-80GB-PCIE``.

**The absurd-row rule** (:func:`screen`), applied to every table before it trains the
predictor (the shipped ones and an admin's ``--benchmarks`` file alike). It compares a
row measured on ``n > 1`` GPUs with the one-GPU rows of the same model, input, GPU type,
precision class and per-GPU batch size (their median, any system):

- **super-linear**: its per-GPU throughput is more than :data:`SUPERLINEAR` (2) times
  one GPU's. With the same batch per GPU, a data-parallel worker does one GPU's step
  plus the gradient exchange; it cannot run twice as fast as the GPU alone.
- **collapse**: the whole job's throughput is below :data:`COLLAPSE` (1/2) of one GPU's:
  adding GPUs halved what one GPU does alone.

The factors are wide on purpose: they reject what cannot be a measurement of training
(Lambda's NCF on 4 and 8 H100s at billions of samples/s), not rows that are merely noisy
or slow (third-party systems 10-30% off Lambda's own; Gavel's ResNet-18 on 2 V100s at
1.6 times one V100's rate per GPU, kept as measured). A row without such a one-GPU
reference is not judged. ``cpn predictor screen --json`` prints the rule and every
rejected row with its origin, ratio and reference.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from predictor.benchmarks import BenchmarkRow, BenchmarkTable, precision_class
from predictor.catalog import data_text

__all__ = [
    "COLLAPSE",
    "RULE",
    "SUPERLINEAR",
    "Rejected",
    "combine",
    "screen",
    "screened",
    "shipped",
    "shipped_rejected",
    "with_shipped",
]

#: a multi-GPU row's per-GPU throughput may be at most this many times one GPU's
SUPERLINEAR = 2.0
#: a multi-GPU row's whole throughput must be at least this fraction of one GPU's
COLLAPSE = 0.5

RULE = (
    f"A row on n > 1 GPUs is compared with the median of the one-GPU rows of the same model, "
    f"input, GPU type, precision class and per-GPU batch size. It is rejected when its "
    f"per-GPU throughput exceeds {SUPERLINEAR:g} x one GPU's (super-linear: a data-parallel "
    f"worker does one GPU's step plus the gradient exchange), or when its whole throughput "
    f"is below {COLLAPSE:g} x one GPU's (collapse: adding GPUs halved the throughput). Rows "
    f"without such a one-GPU reference are not judged."
)

_SHIPPED = (
    ("benchmarks.csv", "predictor/data/benchmarks.csv"),
    ("lambda.csv", "predictor/data/lambda.csv"),
)


@dataclass(frozen=True, slots=True)
class Rejected:
    """A row the rule rejected: which check, the ratio it found, the one-GPU reference."""

    row: BenchmarkRow
    check: str  # "super-linear" or "collapse"
    ratio: float  # per-GPU / one GPU's (super-linear) or whole / one GPU's (collapse)
    reference_sps: float  # median one-GPU samples/s it was compared with
    references: int  # how many one-GPU rows that median is of

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready description."""
        r = self.row
        return {
            "origin": r.origin,
            "model": r.model,
            "input": r.input,
            "gpu_type": r.gpu_type,
            "gpus": r.gpus,
            "precision": r.precision,
            "batch_size": r.batch_size,
            "samples_per_s": r.samples_per_s,
            "check": self.check,
            "ratio": round(self.ratio, 3),
            "one_gpu_samples_per_s": round(self.reference_sps, 3),
            "one_gpu_rows": self.references,
        }


def _key(row: BenchmarkRow) -> tuple[str, str, str, str, int]:
    return (row.model, row.input, row.gpu_type, precision_class(row.precision), row.batch_size)


def screen(rows: Iterable[BenchmarkRow]) -> tuple[list[BenchmarkRow], list[Rejected]]:
    """(kept rows, rejected rows) by the rule of the module docstring; order kept."""
    rows = list(rows)
    singles: dict[tuple[str, str, str, str, int], list[float]] = defaultdict(list)
    for row in rows:
        if row.gpus == 1:
            singles[_key(row)].append(row.samples_per_s)
    kept: list[BenchmarkRow] = []
    rejected: list[Rejected] = []
    for row in rows:
        refs = singles.get(_key(row)) if row.gpus > 1 else None
        if not refs:
            kept.append(row)
            continue
        one = statistics.median(refs)
        per_gpu = row.samples_per_s / row.gpus / one
        whole = row.samples_per_s / one
        if per_gpu > SUPERLINEAR:
            rejected.append(Rejected(row, "super-linear", per_gpu, one, len(refs)))
        elif whole < COLLAPSE:
            rejected.append(Rejected(row, "collapse", whole, one, len(refs)))
        else:
            kept.append(row)
    return kept, rejected


def combine(tables: Sequence[BenchmarkTable], *, source: str = "") -> BenchmarkTable:
    """One table of every row of ``tables`` (their stand-alone models and GPUs merged)."""
    return BenchmarkTable(
        [row for table in tables for row in table.rows],
        extra_models={k: v for t in tables for k, v in t.extra_models.items()},
        extra_gpus={k: v for t in tables for k, v in t.extra_gpus.items()},
        source=source or " + ".join(t.source for t in tables),
    )


def screened(table: BenchmarkTable) -> tuple[BenchmarkTable, list[Rejected]]:
    """``table`` without the rows :func:`screen` rejects, and those rows."""
    kept, rejected = screen(table.rows)
    if not rejected:
        return table, []
    return table.with_rows(kept), rejected


@cache
def _raw() -> tuple[BenchmarkTable, ...]:
    return tuple(
        BenchmarkTable.parse(data_text(name).splitlines(), source=source)
        for name, source in _SHIPPED
    )


@cache
def _shipped() -> tuple[BenchmarkTable, tuple[Rejected, ...]]:
    table, rejected = screened(combine(_raw()))
    return table, tuple(rejected)


def with_shipped(table: BenchmarkTable | None) -> tuple[BenchmarkTable, list[Rejected]]:
    """``table`` (an admin's file) and the shipped tables, screened together; the shipped
    tables alone when ``table`` is None."""
    if table is None:
        return shipped(), list(shipped_rejected())
    return screened(combine([table, *_raw()]))


def shipped() -> BenchmarkTable:
    """Every shipped table (Gavel's and Lambda's), screened: what the predictor knows."""
    return _shipped()[0]


def shipped_rejected() -> tuple[Rejected, ...]:
    """The shipped rows :func:`screen` rejected."""
    return _shipped()[1]
