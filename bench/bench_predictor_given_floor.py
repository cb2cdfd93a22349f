"""Experiment: how far a type-level correction can take the reference models' rows.

Issue 17 asks, with three reference models benchmarked on a new GPU type, at most 10%
median APE on that type's other models. For each held-out type this scores, on the same
rows (the type's rows of the models not given):

- ``none``: trained without any row of the type;
- ``given``: the references' rows given (today's predictor: the speed-ratio transfer);
- ``calibrated``: ``none`` times the references' median log error on the type, per
  precision class and GPU count where the references have rows of it (else per class,
  else over all): a correction an admin's benchmark run could make;
- ``floor_none`` and ``floor_given``: ``none`` and ``given`` corrected by the scored rows'
  *own* median log error per precision class and GPU count. They cheat on purpose: no
  correction that is one number per (type, class, GPU count) can do better, so what is
  left is the model-to-model spread on the type, which the references cannot tell.

Prints one JSON document::

    nice -n 19 python bench/bench_predictor_given_floor.py [--types V100-16GB,K80,...]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from bench_predictor_logo import REFERENCE_MODELS  # the script's directory is on sys.path

from predictor.benchmarks import precision_class
from predictor.knowledge import shipped
from predictor.measurements import Measurement, measurements_from_table, query_of
from predictor.model import ThroughputModel


def _key(m: Measurement) -> tuple[str, int]:
    return precision_class(m.precision), m.gpus


def _median_ape(pred: np.ndarray, actual: np.ndarray) -> float:
    return round(float(np.median(np.abs(pred - actual) / actual * 100.0)), 2)


def _corrected(
    pred: np.ndarray, rows: Sequence[Measurement], by: Sequence[Measurement], by_pred: np.ndarray
) -> np.ndarray:
    """``pred`` times the median log error of ``by_pred`` on ``by``, per (class, GPUs),
    falling back to per class, then to all of ``by``."""
    errors = np.log(np.asarray([m.samples_per_s for m in by]) / by_pred)
    per_key: dict[tuple[str, int], list[float]] = defaultdict(list)
    per_class: dict[str, list[float]] = defaultdict(list)
    for m, e in zip(by, errors, strict=True):
        per_key[_key(m)].append(float(e))
        per_class[_key(m)[0]].append(float(e))
    overall = float(np.median(errors))

    def shift(m: Measurement) -> float:
        if _key(m) in per_key:
            return float(np.median(per_key[_key(m)]))
        if _key(m)[0] in per_class:
            return float(np.median(per_class[_key(m)[0]]))
        return overall

    return pred * np.exp([shift(m) for m in rows])


def run(types: Sequence[str]) -> dict[str, object]:
    table = shipped()
    rows = measurements_from_table(table)
    out = []
    for gpu in types or sorted({m.gpu_type for m in rows}):
        given = set(REFERENCE_MODELS) & {m.model for m in rows if m.gpu_type == gpu}
        others = [m for m in rows if m.gpu_type != gpu]
        scored = [m for m in rows if m.gpu_type == gpu and m.model not in given]
        refs = [m for m in rows if m.gpu_type == gpu and m.model in given]
        actual = np.asarray([m.samples_per_s for m in scored])
        alone = ThroughputModel("rf", seed=0).fit(others, table=table)
        none = alone.predict([query_of(m) for m in scored]).samples_per_s
        none_refs = alone.predict([query_of(m) for m in refs]).samples_per_s
        with_refs = ThroughputModel("rf", seed=0).fit(others + refs, table=table)
        given_pred = with_refs.predict([query_of(m) for m in scored]).samples_per_s
        out.append(
            {
                "gpu_type": gpu,
                "given_models": sorted(given),
                "n": len(scored),
                "none": _median_ape(none, actual),
                "given": _median_ape(given_pred, actual),
                "calibrated": _median_ape(_corrected(none, scored, refs, none_refs), actual),
                "floor_none": _median_ape(_corrected(none, scored, scored, none), actual),
                "floor_given": _median_ape(
                    _corrected(given_pred, scored, scored, given_pred), actual
                ),
                "references_log_error_spread": round(
                    float(np.std(np.log(np.asarray([m.samples_per_s for m in refs]) / none_refs))),
                    3,
                )
                if refs
                else None,  # no reference model measured on the type
            }
        )
    out.sort(key=lambda r: -float(r["floor_given"]))  # type: ignore[arg-type]
    return {"reference_models": list(REFERENCE_MODELS), "types": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--types", default="", help="comma-separated GPU types (default: all)")
    args = parser.parse_args()
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    print(json.dumps(run(types)))


if __name__ == "__main__":
    main()
