"""bench/eta_bound.py: how close a point ETA built on the first projection could come."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import eta_bound as bench

HEADER = "job_id,submit_s,first_start_s,eta_start_s,eta_cal_start_s\n"


def _write(tmp: Path, rows: list[tuple[float, float, float | None]]) -> Path:
    """rows: (submit, actual wait, projected wait or None); calibrated = projected x 2."""
    path = tmp / "jobs-default.csv"
    lines = [HEADER]
    for i, (submit, wait, told) in enumerate(rows):
        eta = "" if told is None else f"{submit + told}"
        cal = "" if told is None else f"{submit + 2 * told}"
        lines.append(f"j{i},{submit},{submit + wait},{eta},{cal}\n")
    path.write_text("".join(lines))
    return path


def test_a_projection_off_by_a_constant_factor_is_fixed_by_the_best_factor(tmp_path: Path):
    """Every job waited twice what it was told: raw error 0.5, the calibrated (x2) 0, and
    the best factor of the grid (2 is on it) 0; jobs that waited under 10 minutes or were
    never projected are left out."""
    rows = [(1000.0 * i, 7200.0 * (i + 1), 3600.0 * (i + 1)) for i in range(9)]
    rows += [(50.0, 300.0, 100.0), (60.0, 9000.0, None)]
    got = bench.bound(bench.read(_write(tmp_path, rows)))
    assert got["jobs"] == 9
    assert got["raw"] == pytest.approx(0.5)
    assert got["calibrated"] == pytest.approx(0.0)
    assert got["best_factor"] == pytest.approx(0.0)
    assert got["actual_over_twice_projected"] == 0.0
    assert got["actual_under_half_projected"] == 0.0


def test_waits_the_projection_does_not_order_leave_every_calibration_far_off(tmp_path: Path):
    """Actual waits of 1 h, 16 h and 256 h in runs of ten, whatever was projected: no one
    stated wait does better than a median error of 15/16, while the wait of the last job
    that had to wait tells the next one exactly within a run."""
    rows = []
    for i in range(30):
        wait = 3600.0 * 16 ** ((i // 10) % 3)
        rows.append((1e7 * i, wait, 7200.0 if i % 2 else 3600.0))
    got = bench.bound(bench.read(_write(tmp_path, rows)))
    assert got["best_per_bin"]["1"] >= 0.9
    assert got["last_to_enter_service"]["1"] < got["best_per_bin"]["1"]
