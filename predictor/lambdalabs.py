"""Convert Lambda's published PyTorch training throughputs into cpn's benchmark format.

Source: ``lambda-pytorch-train.csv`` (``model, gpu_type, num_gpus, precision,
batch_size, samples_per_s, system``), reshaped from ``pytorch/pytorch-train-throughput-
{fp32,fp16}.csv`` and ``pytorch/pytorch-train-bs-{fp32,fp16}.csv`` of
lambdal/deeplearning-benchmark (commit aa5addb6a536). Cite: Lambda, "Deep Learning GPU
Benchmarks", lambdal/deeplearning-benchmark. Published figures, used as facts with this
citation (the repository carries no licence file).

Conversion rules (the shipped ``predictor/data/lambda.csv`` is this function's output):

- names are kept as Lambda writes them (``bert_base_squad``, ``H100 80GB SXM5``): the
  catalogs' aliases are the one place that maps them to canonical names (a variant's
  alias also names the input: ``bert_base_squad`` is bert-base on SQuAD);
- ``batch_size`` is each GPU's: Lambda's is the whole job's (``num_gpus`` x per GPU);
  ``samples_per_s`` stays the whole job's, as in every benchmark row;
- ``gpus`` = ``num_gpus``; ``precision`` as given (``fp32``, ``fp16``: mixed precision);
- ``system`` names who measured (Lambda's own servers, LambdaCloud, or a third party's
  system); rows of the same key from several systems are all kept.

Absurd rows (e.g. ``ncf`` on several H100s at billions of samples/s) are not removed here:
every table goes through :mod:`predictor.screen` when it is loaded, by a stated rule.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable

HEADER = ("model", "gpu_type", "batch_size", "samples_per_s", "gpus", "precision", "system")


def convert(lines: Iterable[str]) -> list[tuple[str, str, int, float, int, str, str]]:
    """Rows of the benchmark CSV from the lines of Lambda's reshaped CSV."""
    out: list[tuple[str, str, int, float, int, str, str]] = []
    for raw in csv.DictReader(lines):
        gpus = int(raw["num_gpus"])
        batch = int(raw["batch_size"])
        if gpus < 1 or batch % gpus:
            raise ValueError(f"batch {batch} does not split over {gpus} GPUs: {raw}")
        out.append(
            (
                raw["model"],
                raw["gpu_type"],
                batch // gpus,
                float(raw["samples_per_s"]),
                gpus,
                raw["precision"],
                raw["system"],
            )
        )
    return out


def main() -> None:  # pragma: no cover - regenerates the shipped file by hand
    """``python -m predictor.lambdalabs SRC.csv DST.csv``."""
    from predictor import gavel

    gavel.main(convert, HEADER)


if __name__ == "__main__":  # pragma: no cover
    main()
