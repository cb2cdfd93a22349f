"""Convert Gavel's isolated throughputs into cpn's benchmark format.

Source: ``gavel_isolated_throughputs.csv`` (derived from Gavel's
``scheduler/simulation_throughputs.json``, stanford-futuredata/gavel, MIT License).
Cite: D. Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep
Learning Workloads", OSDI 2020.

Conversion rules (the shipped ``predictor/data/benchmarks.csv`` is this function's output):

- only ``consolidated`` placement rows (all workers on one server), the usual case;
- ``samples_per_s = isolated_steps_per_sec x batch_size``: Gavel's steps/s of a
  multi-GPU job already add up every worker's steps, so no further factor of ``gpus``;
  ``batch_size`` is each worker's batch;
- ``gpus`` = Gavel's scale factor (1, 2, 4, 8);
- A3C and CycleGAN have no batch size in Gavel: one A3C step is one update over 20
  environment steps of one worker, one CycleGAN step is one image pair (CycleGAN's
  batch size is 1), so both are written with ``batch_size = 1`` (samples = steps);
- rows with zero throughput (ResNet-50 at batch 128 on 2-8 K80s: did not run) are dropped;
- ``precision = fp32`` (Gavel's workloads train in FP32), ``input`` names the dataset.

Known flaw kept as measured: Recommendation runs slower on V100 than on K80 at batch
sizes 512-4096 in Gavel's table (it is CPU/input bound), so a GPU-spec-based predictor
cannot reproduce it.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from predictor.catalog import canonical_gpu, canonical_model

HEADER = ("model", "gpu_type", "batch_size", "samples_per_s", "gpus", "precision", "input")

#: dataset each Gavel workload trains on (Narayanan et al. 2020, Table 2)
GAVEL_INPUT = {
    "resnet18": "cifar10",
    "resnet50": "imagenet",
    "transformer": "multi30k",
    "lstm-lm": "wikitext2",
    "recommendation": "ml-20m",
    "a3c": "pong",
    "cyclegan": "monet2photo",
}


def convert(lines: Iterable[str]) -> list[tuple[str, str, int, float, int, str, str]]:
    """Rows of the benchmark CSV from the lines of Gavel's isolated-throughput CSV."""
    out: list[tuple[str, str, int, float, int, str, str]] = []
    for raw in csv.DictReader(lines):
        if raw["placement"] != "consolidated":
            continue
        steps = float(raw["isolated_steps_per_sec"])
        if steps <= 0:
            continue
        model = canonical_model(raw["model"])
        gpu = canonical_gpu(raw["gpu_type"])  # the catalog's aliases: Gavel's v100 is 16 GB
        batch = int(raw["batch_size"]) if raw["batch_size"] else 1
        out.append(
            (
                model,
                gpu,
                batch,
                round(steps * batch, 6),
                int(raw["scale_factor"]),
                "fp32",
                GAVEL_INPUT.get(model, ""),
            )
        )
    return out


def write(rows: Iterable[tuple[object, ...]], path: Path, header: tuple[str, ...] = HEADER) -> None:
    """Write ``rows`` under ``header`` as CSV."""
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def main(
    converter: Callable[[Iterable[str]], Sequence[tuple[object, ...]]] = convert,
    header: tuple[str, ...] = HEADER,
) -> None:  # pragma: no cover - regenerates a shipped file by hand
    """``python -m predictor.gavel SRC.csv DST.csv`` (and :mod:`predictor.lambdalabs`)."""
    import sys

    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    write(converter(src.read_text(encoding="utf-8").splitlines()), dst, header)


if __name__ == "__main__":  # pragma: no cover
    main()
