"""bench/bench_eta.py accuracy: the issue-16 figures it prints from an ETA summary."""

from __future__ import annotations

from bench import bench_eta as bench


def _summary(waited: int, held: int, ranged: int, point: float | None) -> dict[str, object]:
    return {
        "waited": waited,
        "no_eta": 1,
        "median_rel_error": 0.9,
        "range": {
            "ranged": ranged,
            "held": held,
            "coverage": held / ranged,
            "median_width_h": 2.0,
            "median_width_rel": 1.1,
        },
        "calibrated": None if point is None else {"median_rel_error": point},
    }


def test_coverage_is_over_every_job_that_waited_and_aims_are_checked() -> None:
    """Jobs with no range (or no ETA) are misses: 6 held of 10 waited is 0.6 (aim met) though
    the ranged ones' own coverage is 0.75; the point is the calibrated (stated) one."""
    f = bench.figures(_summary(10, 6, 8, 0.5))
    assert f["coverage"] == 0.6 and f["coverage_aim_met"]
    assert f["coverage_of_ranged"] == 0.75 and f["with_range"] == 8
    assert f["point_median_rel_error"] == 0.5 and f["point_aim_met"]
    assert f["raw_median_rel_error"] == 0.9
    f = bench.figures(_summary(10, 5, 8, 0.3), aim_point=0.25)
    assert not f["coverage_aim_met"] and not f["point_aim_met"]


def test_without_calibration_the_point_is_the_raw_projection() -> None:
    f = bench.figures(_summary(4, 0, 1, None))
    assert f["point_median_rel_error"] == 0.9 and f["coverage"] == 0.0


def test_every_reads_a_default_and_per_trace_samples() -> None:
    assert bench._every("40") == (40, {})
    assert bench._every("2,6c71a0=10, b436b2=40") == (2, {"6c71a0": 10, "b436b2": 40})
    assert bench._every("11cb48=1") == (1, {"11cb48": 1})
