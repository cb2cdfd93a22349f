"""Leave one GPU type out of the shipped tables (Gavel's and Lambda's), every type in turn.

For each held-out type the predictor is trained on every other type's rows (the absurd-row
rule applied first) and scored on the held-out type's rows, twice: with no row of that
type, and with the rows of the reference models given (what benchmarking a new GPU type
with a few models teaches; their rows are then not scored). Prints one JSON document,
the types sorted worst first (by the error with nothing given)::

    nice -n 19 python bench/bench_predictor_logo.py [--family rf] [--given resnet50,...]

The same figure for one type and one setting is ``cpn predictor evaluate --holdout-gpu T
[--given-models ...] --json``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from predictor.evaluation import evaluate
from predictor.knowledge import RULE, shipped, shipped_rejected
from predictor.measurements import measurements_from_table
from predictor.model import FAMILIES

#: resnet50, a detector (SSD, Lambda's) and a transformer (Gavel's Transformer, BERT-base
#: in Lambda's); a type gets the ones measured on it
REFERENCE_MODELS = ("resnet50", "ssd", "transformer", "bert-base")


def run(family: str, given: tuple[str, ...]) -> dict[str, Any]:
    """The full leave-one-GPU-type-out table."""
    table = shipped()
    rows = measurements_from_table(table)
    types = sorted({m.gpu_type for m in rows})
    out: list[dict[str, Any]] = []
    for gpu in types:
        started = time.perf_counter()
        none = evaluate(rows, family=family, holdout_gpu=gpu, table=table)
        present = sorted({m.model for m in rows if m.gpu_type == gpu} & set(given))
        with_given = evaluate(
            rows, family=family, holdout_gpu=gpu, table=table, given_models=present
        )
        out.append(
            {
                "gpu_type": gpu,
                "none": none,
                "given": {**with_given, "given_models": present},
                "wall_s": round(time.perf_counter() - started, 1),
            }
        )
    out.sort(key=lambda r: -r["none"]["median_ape"])
    return {
        "family": family,
        "reference_models": list(given),
        "rule": RULE,
        "rows": len(rows),
        "rows_rejected": len(shipped_rejected()),
        "worst_none": max(r["none"]["median_ape"] for r in out),
        "worst_given": max(r["given"]["median_ape"] for r in out),
        "types": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", choices=FAMILIES, default="rf")
    parser.add_argument("--given", default=",".join(REFERENCE_MODELS))
    args = parser.parse_args()
    given = tuple(m.strip() for m in args.given.split(",") if m.strip())
    print(json.dumps(run(args.family, given)))


if __name__ == "__main__":
    main()
