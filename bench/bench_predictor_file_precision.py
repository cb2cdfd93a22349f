"""An admin's four-column file of GPU types the shipped tables lack, each type held out.

What ``cpn predictor evaluate --benchmarks F --holdout-gpu T`` faces on a file of newer
GPU types: rows with no precision, of types nothing else measured. Made from Lambda's
one-GPU rows: for a set of types, the shipped tables lose every row of those types and
the file gets their rows in ``model, gpu_type, batch_size, samples_per_s`` (one file of
the FP32 rows, one of the mixed-precision rows). Each type of the file is held out in
turn: trained on the shipped tables (without the file's types) and the file's other rows,
scored on the held-out type's rows, twice: the rows read as of unknown precision (the
geometric mean of FP32 and tensor FP16), and read as the precision inferred for the
whole file (:mod:`predictor.file_precision`, judged without the held-out type). Prints
one JSON document::

    nice -n 19 python bench/bench_predictor_file_precision.py [--types T1,T2,...]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from typing import Any

from predictor.benchmarks import BenchmarkTable
from predictor.evaluation import evaluate
from predictor.file_precision import infer_precision, with_precision
from predictor.knowledge import combine, shipped
from predictor.measurements import measurements_from_table

#: Five of Lambda's types, standing for a file of newer GPU types
DEFAULT_TYPES = ("H100-80GB", "H100-80GB-PCIE", "RTX6000ADA", "RTX4090", "A100-80GB")


def run(types: tuple[str, ...]) -> dict[str, Any]:
    table = shipped()
    rest = table.with_rows(
        [r for r in table.rows if r.gpu_type not in types],
        source="shipped without the file's types",
    )
    out: dict[str, Any] = {"types": list(types), "files": []}
    for precision in ("fp32", "fp16"):
        own = BenchmarkTable(
            [
                replace(r, precision="", input="")
                for r in table.rows
                if r.gpu_type in types and r.gpus == 1 and r.precision == precision
            ],
            source=f"{precision} rows, precision dropped",
        )
        cells = []
        for gpu in types:
            if not any(r.gpu_type == gpu for r in own.rows):
                continue
            inferred = infer_precision(own, rest, exclude_gpu=gpu)
            cell: dict[str, Any] = {"gpu_type": gpu, "read_as": inferred.precision or "unknown"}
            for name, file in (
                ("unknown", own),
                ("inferred", with_precision(own, inferred.precision)),
            ):
                merged = combine([file, rest])
                scored = [m for m in measurements_from_table(file) if m.gpu_type == gpu]
                result = evaluate(
                    measurements_from_table(merged),
                    holdout_gpu=gpu,
                    table=merged,
                    scored=scored,
                )
                cell[name] = result["median_ape"]
            cells.append(cell)
        out["files"].append(
            {
                "measured_in": precision,
                "types": sorted(cells, key=lambda c: -c["unknown"]),
                "mean_unknown": round(statistics.mean(c["unknown"] for c in cells), 2),
                "mean_inferred": round(statistics.mean(c["inferred"] for c in cells), 2),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default=",".join(DEFAULT_TYPES))
    args = parser.parse_args()
    print(json.dumps(run(tuple(t.strip() for t in args.types.split(",") if t.strip()))))


if __name__ == "__main__":
    main()
