"""First ETAs calibrated from experience in the simulator: online, from the past only."""

from __future__ import annotations

import re

import pytest
from etakit import run_with_eta
from simkit import DATA, tjob

from cpn.core.eta_calibration import CalibrationConfig, WaitCalibrator
from cpn.sim import eta_accuracy
from cpn.sim.cli import main
from cpn.sim.records import SimResult

PERIOD_S = 3000.0


def overtaking_trace(periods: int) -> list:
    """Each period on one 2-GPU node: A runs 1000 s; B (1200 s) waits for it; C (400 s)
    arrives the instant A ends and, shorter, starts first under SJF. B never sees C coming:
    its projected wait is 900 s, its actual wait 1300 s, every period."""
    out = []
    for k in range(periods):
        t = k * PERIOD_S
        out += [
            tjob(f"a{k}", t, gpus=2, duration_s=1000),
            tjob(f"b{k}", t + 100, gpus=2, duration_s=1200),
            tjob(f"c{k}", t + 1000, gpus=2, duration_s=400),
        ]
    return out


def run(trace: list, policy: str = "sjf", noisy: float | None = None, **kw: object) -> SimResult:
    return run_with_eta(trace, policy, node_gpus=2, noisy=noisy, seed=5, **kw)


def test_systematic_overtaking_is_learnt_and_corrected():
    """B is always told 900 s and waits 1300 s: once min_samples B's have started, the
    calibrated ETA is right while the raw one stays 400 s early."""
    result = run(overtaking_trace(12), eta_calibration=CalibrationConfig(min_samples=3))
    records = {r.job_id: r for r in result.records}
    for k in range(12):
        b = records[f"b{k}"]
        assert b.eta_start_s is not None and b.first_start_s is not None
        assert b.eta_start_s - b.eta_at_s == pytest.approx(900.0)
        assert b.first_start_s - b.eta_start_s == pytest.approx(400.0)
        if k < 3:  # fewer than 3 B's had started when it was projected: raw projection
            assert b.eta_cal_start_s == b.eta_start_s
        else:
            assert b.eta_cal_start_s == pytest.approx(b.first_start_s)
    s = eta_accuracy.summary(result)
    assert s["median_rel_error"] == pytest.approx(400 / 1300, abs=1e-3)
    assert s["calibrated"]["median_rel_error"] == 0.0
    assert s["calibrated"]["factor_median"] == pytest.approx(1300 / 900, abs=1e-3)
    assert s["calibrated"]["aim_met"] is True and s["aim_met"] is False


def mixed_trace(jobs: int) -> list:
    """A steady stream of 1- and 2-GPU jobs of varied lengths, some overtaking others."""
    return [
        tjob(f"j{i}", 37.0 * i, gpus=1 + i % 2, duration_s=300 + 97 * (i % 7)) for i in range(jobs)
    ]


def test_calibrated_etas_do_not_depend_on_later_arrivals():
    """Cutting the trace at an instant changes no calibrated ETA made up to then, though the
    later arrivals change when the jobs waiting then start (the calibrator sees no future)."""
    config = CalibrationConfig(min_samples=4, window=10)
    full = run(mixed_trace(80), policy="sjf", noisy=0.7, eta_calibration=config)
    by_id = {r.job_id: r for r in full.records}
    changed_starts = 0
    for jobs in (30, 45, 60):
        cut = run(mixed_trace(jobs), policy="sjf", noisy=0.7, eta_calibration=config)
        last_submit = 37.0 * (jobs - 1)
        for record in cut.records:
            other = by_id[record.job_id]
            if record.eta_at_s is None or record.eta_at_s > last_submit:
                continue
            assert other.eta_at_s == record.eta_at_s
            assert other.eta_cal_start_s == record.eta_cal_start_s
            changed_starts += other.first_start_s != record.first_start_s
    assert changed_starts > 0
    scaled = [r for r in full.records if r.eta_cal_start_s not in (None, r.eta_start_s)]
    assert len(scaled) > 5


def test_started_only_replay_uses_only_jobs_started_before_the_projection():
    """Each started-only calibrated ETA equals a fresh calibrator fed with exactly the projected
    jobs that had started by the projection instant."""
    config = CalibrationConfig(min_samples=4, window=10)
    result = run(mixed_trace(60), policy="default", noisy=0.7, eta_calibration=config)
    projected = [r for r in result.records if r.eta_start_s is not None]
    assert len(projected) > 20
    replayed = eta_accuracy.replay_calibration(result.records, config)
    scaled = 0
    for record in projected:
        assert record.eta_at_s is not None and record.eta_start_s is not None
        at = record.eta_at_s
        past = sorted(
            (r for r in projected if r.first_start_s is not None and r.first_start_s <= at),
            key=lambda r: r.first_start_s or 0.0,
        )
        calibrator = WaitCalibrator(config)
        for r in past:
            assert r.eta_at_s is not None and r.eta_start_s is not None and r.first_start_s
            calibrator.observe("", r.eta_start_s - r.eta_at_s, r.first_start_s - r.eta_at_s)
        expected = at + calibrator.calibrate("", record.eta_start_s - at)
        assert replayed[record.job_id][0] == pytest.approx(expected)
        scaled += calibrator.factor("") != 1.0
    assert scaled > 5


def test_summary_has_recorded_and_started_only_figures():
    """summary() gives the recorded calibration and the started-only replay side by side."""
    config = CalibrationConfig(min_samples=3)
    result = run(overtaking_trace(12), eta_calibration=config)
    s = eta_accuracy.summary(result, calibration=config)
    assert s["calibrated"]["median_rel_error"] == 0.0
    assert s["calibrated_started_only"]["median_rel_error"] == 0.0  # B's only teach B's here
    never = eta_accuracy.summary(result, calibration=CalibrationConfig(min_samples=1000))
    assert never["calibrated_started_only"]["median_rel_error"] == s["median_rel_error"]
    assert never["calibrated_started_only"]["scaled_share"] == 0.0


def test_cli_reports_raw_and_calibrated_errors(tmp_path, capsys):
    """--eta prints and reports the calibrated columns; the jobs CSV carries the calibrated
    ETA."""
    args = ["--trace", str(DATA / "tiny.csv"), "--clusters", str(DATA / "small-clusters.yaml")]
    assert main([*args, "--policy", "sjf", "--eta", "--report", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "calibrated: median err / wait" in out and "started jobs only" in out
    text = (tmp_path / "a" / "report.md").read_text()
    assert "calibrated: median err / wait" in text and "cpn.core.eta_calibration" in text
    lines = (tmp_path / "a" / "jobs-sjf.csv").read_text().splitlines()
    column = lines[0].split(",").index("eta_cal_start_s")
    assert any(line.split(",")[column] for line in lines[1:])
    assert main([*args, "--policy", "sjf", "--eta", "--json"]) == 0
    payload = capsys.readouterr().out
    assert re.search(r'"calibrated": \{"median_rel_error"', payload)
