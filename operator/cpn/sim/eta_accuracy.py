"""How good the ETAs are: each job's first ETA against its actual start, over a run.

A run made with ``World(eta=True)`` (``cpn simulate ... --eta``) records, for
every job that had to wait after its arrival cycle, the start and end that
:func:`cpn.core.eta.project` gave it then (see :class:`~cpn.sim.world.World`).
:func:`summary` compares them with what happened, for the jobs whose actual
wait (first start - submit) exceeded ``min_wait_s`` (ten minutes by default,
issue 6's bar):

- ``median_rel_error`` / ``p90_rel_error``: |ETA start - actual start| as a share
  of the actual wait (the aim is a median under 0.25);
- ``median_abs_error_h`` / ``p90_abs_error_h``: the same in hours;
- ``early_share`` / ``late_share``: jobs that started before / after their ETA;
- ``overtaken_share``: jobs that some job submitted after their ETA was made
  overtook (started first); the errors of the overtaken and the others are given
  apart (``median_rel_error_overtaken`` / ``_not_overtaken``), which separates
  queue dynamics (later, higher-priority arrivals) from the projection itself;
- ``no_eta``: jobs the projection did not reach within its cycle bound; they are
  left out of the error figures (``no_eta_share`` says how many);
- ``calls``, ``eta_wall_s``, ``ms_per_call``: the cost of the projections;
- ``calibrated``: the same error figures for the calibrated first ETAs the run
  recorded (``JobRecord.eta_cal_start_s``: the projected wait scaled from
  experience by :class:`~cpn.core.eta_calibration.WaitCalibrator`, as the
  operator states it; it learns from the jobs that started and from how far the
  ETAs of those still waiting slipped), with ``factor_median`` (the median
  factor applied) and ``scaled_share`` (jobs whose factor was not 1);
- ``calibrated_started_only``: the same for a calibrator that learns only from
  jobs that had started (:func:`replay_calibration`, replayed from the records:
  each projected job's first start is observed before the projections made at
  that instant or later). Simulated jobs share one queue.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpn.core.eta_calibration import CalibrationConfig, WaitCalibrator
from cpn.sim.records import JobRecord, SimResult
from cpn.sim.report import percentile

#: Jobs that waited at most this long are left out (issue 6: "waited more than ten minutes").
MIN_WAIT_S = 600.0

#: Issue 6's aim for the median relative error.
AIM_REL_ERROR = 0.25
#: Share of actual starts the stated p20-p80 range must hold (issue 16: about 60%).
AIM_RANGE_COVERAGE = 0.6


@dataclass(frozen=True, slots=True, kw_only=True)
class EtaError:
    """One job's first ETA against what happened (instants in seconds)."""

    job_id: str
    submit_s: float
    eta_at_s: float
    eta_start_s: float
    start_s: float
    eta_end_s: float
    finish_s: float | None
    overtaken: int  # jobs submitted after ``eta_at_s`` that started before this one
    cal_start_s: float | None = None  # calibrated ETA start (None: not recorded)
    factor: float | None = None  # the calibration factor applied (None: not known)
    started_only_s: float | None = None  # calibrated from started jobs only (replayed)
    started_only_factor: float | None = None
    low_s: float | None = None  # the stated range of the start (p20-p80; None: none stated)
    high_s: float | None = None

    @property
    def wait_s(self) -> float:
        """Actual wait: first start - submit."""
        return self.start_s - self.submit_s

    @property
    def error_s(self) -> float:
        """ETA start - actual start (positive: the job started earlier than told)."""
        return self.eta_start_s - self.start_s

    @property
    def rel_error(self) -> float:
        """|error| as a share of the actual wait (inf for a job that did not wait)."""
        wait = self.wait_s
        return abs(self.error_s) / wait if wait > 0 else float("inf")

    def rel_error_of(self, eta_start_s: float | None) -> float | None:
        """|``eta_start_s`` - actual start| as a share of the actual wait (None: no ETA)."""
        if eta_start_s is None:
            return None
        wait = self.wait_s
        return abs(eta_start_s - self.start_s) / wait if wait > 0 else float("inf")


def replay_calibration(
    records: Sequence[JobRecord], config: CalibrationConfig | None = None
) -> dict[str, tuple[float, float]]:
    """job id -> (calibrated ETA start, factor) for every record with a first ETA,
    learning from started jobs only.

    Replays a fresh :class:`WaitCalibrator` over the run in time order: a job's
    first start is observed before any projection made at that instant or later,
    never before one made earlier (the simulator's order of events).
    """
    calibrator = WaitCalibrator(config)
    projected = [r for r in records if r.eta_at_s is not None and r.eta_start_s is not None]
    # (time, kind, order): kind 0 = a start (observe), 1 = a projection (calibrate).
    events: list[tuple[float, int, int]] = []
    for i, record in enumerate(projected):
        assert record.eta_at_s is not None
        events.append((record.eta_at_s, 1, i))
        if record.first_start_s is not None:
            events.append((record.first_start_s, 0, i))
    events.sort()
    out: dict[str, tuple[float, float]] = {}
    for at_s, kind, i in events:
        record = projected[i]
        assert record.eta_at_s is not None and record.eta_start_s is not None
        wait = record.eta_start_s - record.eta_at_s
        if kind == 0:
            calibrator.observe("", wait, at_s - record.eta_at_s)
        else:
            factor = calibrator.factor("")
            out[record.job_id] = (at_s + calibrator.calibrate("", wait), factor)
    return out


def job_errors(
    result: SimResult, calibration: CalibrationConfig | None = None
) -> tuple[list[EtaError], int]:
    """(errors of the jobs with a first ETA and a start, count of projected jobs with no ETA).

    Started-only calibrated starts are replayed under ``calibration`` (default config).
    """
    started = sorted(
        (r.submit_s, r.first_start_s) for r in result.records if r.first_start_s is not None
    )
    submits = [s for s, _ in started]
    replayed = replay_calibration(result.records, calibration)
    out: list[EtaError] = []
    no_eta = 0
    for record in result.records:
        if record.eta_at_s is None or record.first_start_s is None:
            continue
        if record.eta_start_s is None or record.eta_end_s is None:
            no_eta += 1
            continue
        start = record.first_start_s
        later = started[bisect.bisect_right(submits, record.eta_at_s) :]
        out.append(
            EtaError(
                job_id=record.job_id,
                submit_s=record.submit_s,
                eta_at_s=record.eta_at_s,
                eta_start_s=record.eta_start_s,
                start_s=start,
                eta_end_s=record.eta_end_s,
                finish_s=record.finish_s,
                overtaken=sum(1 for _, s in later if s < start),
                cal_start_s=record.eta_cal_start_s,
                factor=_factor(record),
                started_only_s=replayed[record.job_id][0],
                started_only_factor=replayed[record.job_id][1],
                low_s=record.eta_low_s,
                high_s=record.eta_high_s,
            )
        )
    return out, no_eta


def _factor(record: JobRecord) -> float | None:
    """The factor a recorded calibrated ETA applied (None when it cannot be told)."""
    if record.eta_cal_start_s is None or record.eta_start_s is None or record.eta_at_s is None:
        return None
    wait = record.eta_start_s - record.eta_at_s
    return (record.eta_cal_start_s - record.eta_at_s) / wait if wait > 0 else None


def _median(values: Sequence[float]) -> float | None:
    return percentile(values, 50) if values else None


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _calibrated(waited: Sequence[EtaError], *, started_only: bool) -> dict[str, Any] | None:
    """Error figures of the calibrated first ETAs of ``waited`` (None: none recorded)."""
    etas = [e.started_only_s if started_only else e.cal_start_s for e in waited]
    if not etas or any(t is None for t in etas):
        return None
    rel = [e.rel_error_of(t) or 0.0 for e, t in zip(waited, etas, strict=True)]
    hours = [abs((t or 0.0) - e.start_s) / 3600.0 for e, t in zip(waited, etas, strict=True)]
    given = (e.started_only_factor if started_only else e.factor for e in waited)
    factors: list[float] = [f for f in given if f is not None]
    median = _median(rel)
    late = sum(1 for e, t in zip(waited, etas, strict=True) if t is not None and t < e.start_s)
    return {
        "median_rel_error": _r(median),
        "p90_rel_error": _r(percentile(rel, 90)),
        "median_abs_error_h": _r(_median(hours)),
        "p90_abs_error_h": _r(percentile(hours, 90)),
        "late_share": _r(late / len(waited)),
        "factor_median": _r(_median(factors)),
        "scaled_share": _r(sum(1 for f in factors if abs(f - 1.0) > 1e-9) / len(waited)),
        "aim_met": None if median is None else median < AIM_REL_ERROR,
    }


def _range(waited: Sequence[EtaError], count: int) -> dict[str, Any] | None:
    """How often the stated p20-p80 range held the actual start, and how wide it was.

    ``coverage`` is over the jobs that had a range; ``coverage_all`` over all ``count``
    jobs measured (those with no range, or no ETA at all, count as misses).
    """
    ranged = [e for e in waited if e.low_s is not None and e.high_s is not None]
    if not ranged:
        return None
    held = sum(1 for e in ranged if (e.low_s or 0.0) <= e.start_s <= (e.high_s or 0.0))
    widths = [((e.high_s or 0.0) - (e.low_s or 0.0)) for e in ranged]
    return {
        "share_with_range": _r(len(ranged) / len(waited)),
        "ranged": len(ranged),
        "held": held,
        "coverage": _r(held / len(ranged)),
        "coverage_all": _r(held / max(count, len(ranged))),
        "aim_met": held / len(ranged) >= AIM_RANGE_COVERAGE,
        "median_width_h": _r(_median([w / 3600.0 for w in widths])),
        "median_width_rel": _r(
            _median([w / e.wait_s for w, e in zip(widths, ranged, strict=True)])
        ),
    }


def summary(
    result: SimResult,
    *,
    min_wait_s: float = MIN_WAIT_S,
    calibration: CalibrationConfig | None = None,
) -> dict[str, Any]:
    """The error distribution of the run's first ETAs (see the module docstring)."""
    errors, no_eta_all = job_errors(result, calibration)
    waited = [e for e in errors if e.wait_s > min_wait_s]
    no_eta = sum(
        1
        for r in result.records
        if r.eta_at_s is not None
        and r.eta_start_s is None
        and r.first_start_s is not None
        and r.first_start_s - r.submit_s > min_wait_s
    )
    rel = [e.rel_error for e in waited]
    hours = [abs(e.error_s) / 3600.0 for e in waited]
    overtaken = [e for e in waited if e.overtaken]
    calm = [e for e in waited if not e.overtaken]
    ends = [
        abs(e.eta_end_s - e.finish_s) / (e.finish_s - e.submit_s)
        for e in waited
        if e.finish_s is not None and e.finish_s > e.submit_s
    ]
    count = len(waited) + no_eta
    median = _median(rel)
    return {
        "min_wait_s": min_wait_s,
        "projected": len(errors) + no_eta_all,
        "waited": count,
        "no_eta": no_eta,
        "no_eta_share": _r(no_eta / count) if count else None,
        "median_rel_error": _r(median),
        "p90_rel_error": _r(percentile(rel, 90) if rel else None),
        "median_abs_error_h": _r(_median(hours)),
        "p90_abs_error_h": _r(percentile(hours, 90) if hours else None),
        "exact_share": _r(sum(1 for e in waited if e.error_s == 0) / len(waited))
        if waited
        else None,
        "early_share": _r(sum(1 for e in waited if e.error_s > 0) / len(waited))
        if waited
        else None,
        "late_share": _r(sum(1 for e in waited if e.error_s < 0) / len(waited)) if waited else None,
        "overtaken_share": _r(len(overtaken) / len(waited)) if waited else None,
        "median_rel_error_overtaken": _r(_median([e.rel_error for e in overtaken])),
        "median_rel_error_not_overtaken": _r(_median([e.rel_error for e in calm])),
        "median_end_rel_error": _r(_median(ends)),
        "aim_met": None if median is None else median < AIM_REL_ERROR,
        "range": _range(waited, count),
        "calibrated": _calibrated(waited, started_only=False),
        "calibrated_started_only": _calibrated(waited, started_only=True),
        "calls": result.eta_calls,
        "max_cycles": result.eta_max_cycles,
        "eta_wall_s": round(result.eta_wall_s, 3),
        "ms_per_call": round(1000.0 * result.eta_wall_s / result.eta_calls, 1)
        if result.eta_calls
        else None,
    }


def plot_errors(
    results: dict[str, SimResult], path: str | Path, *, min_wait_s: float = MIN_WAIT_S
) -> Path:
    """Histogram of (ETA start - actual start) / actual wait per run, clipped to [-2, 2]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    bins = [i / 10.0 for i in range(-20, 21)]
    for name, result in results.items():
        errors, _ = job_errors(result)
        values = [
            max(-2.0, min(2.0, e.error_s / e.wait_s)) for e in errors if e.wait_s > min_wait_s
        ]
        if values:
            ax.hist(values, bins=bins, alpha=0.5, label=f"{name} ({len(values)} jobs)")
    ax.set_xlabel("(first ETA start - actual start) / actual wait  (clipped to ±2)")
    ax.set_ylabel("jobs")
    ax.set_title(f"First-ETA error, jobs that waited > {min_wait_s / 60:.0f} min")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
