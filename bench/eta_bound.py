"""How close any point ETA built on the first projection could come, on a finished run.

Reads the per-job CSV of a run made with ``cpn simulate ... --eta --out DIR``
(``DIR/jobs-<policy>.csv``) and, for the jobs that waited over 10 minutes and were
projected, prints one JSON document with the median relative error
(|stated start - actual start| / actual wait) of:

- ``raw`` and ``calibrated``: the run's own first ETAs (as ``--eta`` reports them);
- ``best_factor``: the projected wait times the one factor, of a grid from 0.25 to 4,
  that does best on this very run (fitted in hindsight, so a lower bound for any
  constant calibration);
- ``best_per_bin``: with the jobs sorted by projected wait and cut into B bins of
  equal size, in each bin the one stated wait that does best there (in hindsight again:
  what any calibration that reads nothing but the projected wait could reach at best);
- ``last_to_enter_service``: the classic delay announcement (Ibrahim and Whitt,
  Operations Research 2009): the median wait of the last k jobs that had to wait and
  started before this one arrived; it needs no projection at all.

Also the share of measured jobs whose actual wait is over twice or under half the
projected one. Issue 16's aim is a median relative error of at most 0.5. Without a CSV
it simulates philly-nov-a (no job checkpointing, ``default``, the predictor, every job
projected; about a minute) and reads that run.

    python bench/eta_bound.py
    python bench/eta_bound.py out/nov-a/jobs-default.csv
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MIN_WAIT_S = 600.0


@dataclass(frozen=True, slots=True)
class Row:
    submit_s: float
    start_s: float
    told_s: float | None  # first projected start
    calibrated_s: float | None  # first stated (calibrated) start

    @property
    def wait_s(self) -> float:
        return self.start_s - self.submit_s


def read(path: Path) -> list[Row]:
    def num(text: str) -> float | None:
        return float(text) if text else None

    rows = []
    with path.open(newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            start = num(r["first_start_s"])
            if start is None:
                continue
            rows.append(
                Row(float(r["submit_s"]), start, num(r["eta_start_s"]), num(r["eta_cal_start_s"]))
            )
    return rows


def median_error(stated: list[float], waits: list[float]) -> float:
    return statistics.median(abs(s - w) / w for s, w in zip(stated, waits, strict=True))


def best_single(waits: list[float]) -> float:
    """The least median relative error one stated wait can reach on ``waits``."""
    return min(median_error([c] * len(waits), waits) for c in waits)


def last_to_enter(rows: list[Row], measured: list[Row], k: int) -> list[float]:
    queued = sorted((r for r in rows if r.wait_s > 60.0), key=lambda r: r.start_s)
    starts = [r.start_s for r in queued]
    out = []
    for r in measured:
        i = bisect.bisect_left(starts, r.submit_s)
        recent = [q.wait_s for q in queued[max(0, i - k) : i]]
        out.append(statistics.median(recent) if recent else 0.0)
    return out


def bound(rows: list[Row]) -> dict[str, object]:
    measured = [r for r in rows if r.wait_s > MIN_WAIT_S and r.told_s is not None]
    if not measured:
        return {"jobs": 0}
    waits = [r.wait_s for r in measured]
    told = [r.told_s - r.submit_s for r in measured if r.told_s is not None]
    out: dict[str, object] = {"jobs": len(measured)}
    out["raw"] = round(median_error(told, waits), 3)
    if all(r.calibrated_s is not None for r in measured):
        stated = [r.calibrated_s - r.submit_s for r in measured if r.calibrated_s is not None]
        out["calibrated"] = round(median_error(stated, waits), 3)
    grid = [0.25 * 2 ** (i / 4) for i in range(17)]  # 0.25 .. 4
    out["best_factor"] = round(min(median_error([f * t for t in told], waits) for f in grid), 3)
    per_bin = {}
    order = sorted(range(len(measured)), key=lambda i: told[i])
    for bins in (1, 4, 8):
        size = math.ceil(len(order) / bins)
        errors: list[float] = []
        for b in range(0, len(order), size):
            group = [waits[i] for i in order[b : b + size]]
            best = min(group, key=lambda c: median_error([c] * len(group), group))
            errors += [abs(best - w) / w for w in group]
        per_bin[str(bins)] = round(statistics.median(errors), 3)
    out["best_per_bin"] = per_bin
    out["last_to_enter_service"] = {
        str(k): round(median_error(last_to_enter(rows, measured, k), waits), 3) for k in (1, 3, 11)
    }
    ratio = [w / max(t, 1.0) for w, t in zip(waits, told, strict=True)]
    out["actual_over_twice_projected"] = round(sum(x > 2 for x in ratio) / len(ratio), 3)
    out["actual_under_half_projected"] = round(sum(x < 0.5 for x in ratio) / len(ratio), 3)
    return out


def simulated_window(out: Path, window: str = "nov-a") -> Path:
    """The jobs CSV of ``window`` under ``default`` with the predictor and every ETA."""
    from cpn.core.presets import preset_policy
    from cpn.sim import report
    from cpn.sim.clusters import read_clusters
    from cpn.sim.compare import DATA
    from cpn.sim.runner import simulate
    from cpn.sim.trace import read_trace

    root = DATA / "philly-windows"
    result = simulate(
        read_trace(root / f"philly-{window}.csv"),
        read_clusters(root / f"clusters-{window}.yaml"),
        preset_policy("default"),
        name="default",
        estimator="predictor",
        eta=True,
    )
    return report.write_jobs_csv(result, out / "jobs-default.csv")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", nargs="?", help="jobs CSV of a run made with --eta --out")
    args = p.parse_args(argv)
    if args.csv:
        print(json.dumps(bound(read(Path(args.csv)))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = simulated_window(Path(tmp))
        print(json.dumps({"trace": "philly-nov-a", **bound(read(path))}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
