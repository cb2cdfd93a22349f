"""Metrics, per-job CSV and plots of simulation runs.

Metric keys (issue 2's contract): ``jobs`` (admitted jobs: the trace minus the
infeasible ones), ``finished``, ``avg_jct_s``, ``p50_jct_s``, ``p99_jct_s``,
``avg_wait_s``, ``p99_wait_s``, ``max_wait_s``, ``makespan_s``,
``gpu_utilization``, ``wall_s``; extras: ``trace_jobs``, ``infeasible``,
``unfinished``, ``preemptions``, ``lost_gpu_h`` (GPU-hours preemptions threw away:
restart overhead plus work since the last checkpoint), ``moved_gb`` (data and images
moved between clusters), ``cycles``, ``skipped_cycles``, ``plan_wall_s``, ``estimator``,
``estimate_rank_corr`` (how well the estimates rank the jobs: Spearman's correlation between
finished jobs' predicted and actual GPU-time, each runtime on the GPU type the job last started
on; 1 when the estimates order the jobs as their true runtimes do, near 0 when they carry no
order; null with fewer than three such jobs).

Definitions: JCT = finish - submit; wait = JCT minus the time the job held GPUs
(for a job never preempted: first start - submit); makespan = last finish -
first submit; utilisation = GPU-seconds held / (GPUs x makespan). Percentiles
use the nearest-rank method. A run where some admitted job never finished
reports JCT and wait over the finished ones and ``unfinished`` > 0.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cpn.core.policy import QueuePolicy
from cpn.sim.records import JobRecord, SimResult

METRIC_KEYS = (
    "jobs",
    "finished",
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "avg_wait_s",
    "p99_wait_s",
    "max_wait_s",
    "makespan_s",
    "gpu_utilization",
    "wall_s",
)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def metrics(result: SimResult) -> dict[str, Any]:
    """The run's metrics (see the module docstring)."""
    admitted = [r for r in result.records if not r.infeasible]
    done = [r for r in admitted if r.finish_s is not None]
    jcts = [r.jct_s for r in done if r.jct_s is not None]
    waits = [r.wait_s for r in done if r.wait_s is not None]
    if admitted and done:
        start = min(r.submit_s for r in admitted)
        end = max(r.finish_s for r in done if r.finish_s is not None)
        makespan = end - start
    else:
        makespan = 0.0
    gpu_s = sum(r.gpu_s for r in admitted)
    util = gpu_s / (result.total_gpus * makespan) if makespan > 0 and result.total_gpus else 0.0
    out: dict[str, Any] = {
        "jobs": len(admitted),
        "finished": len(done),
        "avg_jct_s": _round(sum(jcts) / len(jcts)) if jcts else 0.0,
        "p50_jct_s": _round(percentile(jcts, 50)),
        "p99_jct_s": _round(percentile(jcts, 99)),
        "avg_wait_s": _round(sum(waits) / len(waits)) if waits else 0.0,
        "p99_wait_s": _round(percentile(waits, 99)),
        "max_wait_s": _round(max(waits, default=0.0)),
        "makespan_s": _round(makespan),
        "gpu_utilization": round(util, 4),
        "wall_s": round(result.wall_s, 3),
        "trace_jobs": len(result.records),
        "infeasible": len(result.records) - len(admitted),
        "unfinished": len(admitted) - len(done),
        "preemptions": result.preemptions,
        "moved_gb": round(result.moved_gb, 1),
        "lost_gpu_h": round(sum(r.lost_gpu_s for r in result.records) / 3600, 2),
        "cycles": result.cycles,
        "skipped_cycles": result.skipped_cycles,
        "plan_wall_s": round(result.plan_wall_s, 3),
        "estimator": result.estimator,
        "estimate_rank_corr": estimate_rank_corr(done),
    }
    return out


def estimate_rank_corr(records: Sequence[JobRecord]) -> float | None:
    """Spearman's correlation between the predicted and the actual GPU-time of ``records``
    that have both (see the module docstring); None with fewer than three, 0 when either
    side is constant."""
    from scipy.stats import spearmanr  # type: ignore[import-untyped]

    pairs = [
        (r.gpus * r.estimate_s, r.gpus * r.runtime_s)
        for r in records
        if r.estimate_s is not None and r.finish_s is not None
    ]
    if len(pairs) < 3:
        return None
    predicted, actual = zip(*pairs, strict=True)
    if len(set(predicted)) < 2 or len(set(actual)) < 2:
        return 0.0
    return round(float(spearmanr(predicted, actual).statistic), 3)


def _round(value: float) -> float:
    return round(value, 3)


JOB_COLUMNS = (
    "job_id",
    "submit_s",
    "gpus",
    "model",
    "user",
    "group",
    "duration_s",
    "infeasible",
    "first_start_s",
    "finish_s",
    "jct_s",
    "wait_s",
    "run_s",
    "preemptions",
    "cluster",
    "gpu_type",
    "runtime_s",
    "estimate_s",
    "eta_start_s",
    "eta_end_s",
    "eta_at_s",
    "eta_cal_start_s",
)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if math.isfinite(value) else str(value)
    return str(value)


def job_row(record: JobRecord) -> dict[str, str]:
    """One job's CSV row."""
    values: dict[str, object] = {
        "job_id": record.job_id,
        "submit_s": record.submit_s,
        "gpus": record.gpus,
        "model": record.model,
        "user": record.user,
        "group": record.group,
        "duration_s": record.duration_s,
        "infeasible": record.infeasible,
        "first_start_s": record.first_start_s,
        "finish_s": record.finish_s,
        "jct_s": record.jct_s,
        "wait_s": record.wait_s,
        "run_s": record.run_s,
        "preemptions": record.preemptions,
        "cluster": record.cluster,
        "gpu_type": record.gpu_type,
        "runtime_s": record.runtime_s if record.finish_s is not None else None,
        "estimate_s": record.estimate_s,
        "eta_start_s": record.eta_start_s,
        "eta_end_s": record.eta_end_s,
        "eta_at_s": record.eta_at_s,
        "eta_cal_start_s": record.eta_cal_start_s,
    }
    return {k: _cell(v) for k, v in values.items()}


def write_jobs_csv(result: SimResult, path: str | Path) -> Path:
    """Write a CSV row per job of ``result`` to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(JOB_COLUMNS), lineterminator="\n")
        writer.writeheader()
        for record in result.records:
            writer.writerow(job_row(record))
    return path


# --------------------------------------------------------------------------- plots

#: Job-size buckets (GPUs) of the waiting-time plot.
SIZE_BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("1", 0.0, 1.0),
    ("2", 1.0, 2.0),
    ("3-4", 2.0, 4.0),
    ("5-8", 4.0, 8.0),
    ("9-16", 8.0, 16.0),
    (">16", 16.0, math.inf),
)


def wait_by_size(result: SimResult) -> dict[str, float]:
    """Average wait (s) of finished jobs per size bucket (buckets with jobs only)."""
    sums: dict[str, list[float]] = {}
    for record in result.records:
        wait = record.wait_s
        if wait is None:
            continue
        for label, low, high in SIZE_BUCKETS:
            if low < record.gpus <= high:
                sums.setdefault(label, []).append(wait)
                break
    return {
        label: sum(sums[label]) / len(sums[label]) for label, _, _ in SIZE_BUCKETS if label in sums
    }


def _downsample(
    times: Sequence[float], values: Sequence[float], limit: int = 4000
) -> tuple[list[float], list[float]]:
    step = max(1, len(times) // limit)
    return list(times[::step]), list(values[::step])


def plot(results: Mapping[str, SimResult], out_dir: str | Path) -> list[Path]:
    """Write the five PNG plots for ``results`` (policy -> run) into ``out_dir``.

    ``jct_cdf.png`` (JCT CDF per policy), ``wait_cdf.png`` (waiting-time CDF),
    ``wait_by_size.png`` (average wait by job size), ``utilization.png`` (busy
    GPU share over time) and ``queue_length.png`` (pending jobs over time).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    hours = 3600.0

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, result in results.items():
        jcts = sorted(r.jct_s / hours for r in result.records if r.jct_s is not None)
        if jcts:
            ys = [(i + 1) / len(jcts) for i in range(len(jcts))]
            ax.step(jcts, ys, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF per policy")
    ax.grid(True, alpha=0.3)
    ax.legend()
    paths.append(_save(fig, out / "jct_cdf.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, result in results.items():
        waited = sorted(r.wait_s / hours for r in result.records if r.wait_s is not None)
        if waited:
            ys = [(i + 1) / len(waited) for i in range(len(waited))]
            ax.step(waited, ys, where="post", label=name)
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlabel("waiting time (h, log scale above 0.1 h)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Waiting-time CDF per policy")
    ax.grid(True, alpha=0.3)
    ax.legend()
    paths.append(_save(fig, out / "wait_cdf.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = [label for label, _, _ in SIZE_BUCKETS]
    width = 0.8 / max(1, len(results))
    for i, (name, result) in enumerate(results.items()):
        waits = wait_by_size(result)
        xs = [k + i * width for k, label in enumerate(labels) if label in waits]
        ys = [waits[label] / hours for label in labels if label in waits]
        ax.bar(xs, ys, width=width, label=name)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(labels))], labels)
    ax.set_xlabel("job size (GPUs)")
    ax.set_ylabel("average wait (h)")
    ax.set_title("Waiting time by job size")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    paths.append(_save(fig, out / "wait_by_size.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, result in results.items():
        share = [b / result.total_gpus for b in result.busy_gpus] if result.total_gpus else []
        xs, ys = _downsample([t / hours for t in result.times_s], share)
        ax.step(xs, ys, where="post", label=name, linewidth=0.8)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("GPUs busy (share)")
    ax.set_ylim(0, 1.05)
    ax.set_title("GPU utilisation over time")
    ax.grid(True, alpha=0.3)
    ax.legend()
    paths.append(_save(fig, out / "utilization.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, result in results.items():
        xs, ys = _downsample(
            [t / hours for t in result.times_s], [float(q) for q in result.queue_len]
        )
        ax.step(xs, ys, where="post", label=name, linewidth=0.8)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("pending jobs")
    ax.set_title("Queue length over time")
    ax.grid(True, alpha=0.3)
    ax.legend()
    paths.append(_save(fig, out / "queue_length.png"))
    return paths


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


_COLUMNS = (
    ("policy", None),
    ("jobs", "jobs"),
    ("finished", "finished"),
    ("avg JCT h", "avg_jct_s"),
    ("p50 JCT h", "p50_jct_s"),
    ("p99 JCT h", "p99_jct_s"),
    ("avg wait h", "avg_wait_s"),
    ("p99 wait h", "p99_wait_s"),
    ("max wait h", "max_wait_s"),
    ("makespan h", "makespan_s"),
    ("GPU util", "gpu_utilization"),
    ("moved GB", "moved_gb"),
    ("infeasible", "infeasible"),
    ("wall s", "wall_s"),
)


def _cells(rows: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Header row, then one row per policy: times in hours."""
    cells: list[list[str]] = [[title for title, _ in _COLUMNS]]
    for name, m in rows.items():
        line = [name]
        for _, key in _COLUMNS[1:]:
            assert key is not None
            value = m.get(key, "")
            if key.endswith("_s") and key != "wall_s" and isinstance(value, int | float):
                line.append(f"{value / 3600.0:.2f}")
            elif isinstance(value, float):
                line.append(f"{value:.3f}" if key == "gpu_utilization" else f"{value:.1f}")
            else:
                line.append(str(value))
        cells.append(line)
    return cells


def table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """A readable, aligned table of ``policy -> metrics`` (hours for times)."""
    cells = _cells(rows)
    columns = _COLUMNS
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = []
    for k, row in enumerate(cells):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """The same table as :func:`table`, as Markdown."""
    cells = _cells(rows)
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + " --- |" * len(cells[0])]
    lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
    return "\n".join(lines)


#: Plots embedded in the report, in order: (file, caption).
REPORT_PLOTS = (
    ("jct_cdf.png", "Job completion time CDF"),
    ("wait_cdf.png", "Waiting-time CDF"),
    ("wait_by_size.png", "Average wait by job size"),
    ("utilization.png", "GPU utilisation over time"),
    ("queue_length.png", "Queue length over time"),
    ("eta_error.png", "First-ETA error (ETA start - actual start, share of the wait)"),
)

_ETA_COLUMNS = (
    ("policy", None),
    ("waited > 10 min", "waited"),
    ("no ETA", "no_eta"),
    ("median err / wait", "median_rel_error"),
    ("p90 err / wait", "p90_rel_error"),
    ("median err h", "median_abs_error_h"),
    ("p90 err h", "p90_abs_error_h"),
    ("exact", "exact_share"),
    ("early", "early_share"),
    ("late", "late_share"),
    ("overtaken", "overtaken_share"),
    ("median err / wait, overtaken", "median_rel_error_overtaken"),
    ("median err / wait, not overtaken", "median_rel_error_not_overtaken"),
    ("calibrated: median err / wait", "calibrated.median_rel_error"),
    ("calibrated: p90 err / wait", "calibrated.p90_rel_error"),
    ("calibrated: late", "calibrated.late_share"),
    ("calibration factor (median)", "calibrated.factor_median"),
    ("scaled", "calibrated.scaled_share"),
    ("started jobs only: median err / wait", "calibrated_started_only.median_rel_error"),
    ("started jobs only: scaled", "calibrated_started_only.scaled_share"),
    ("projections", "calls"),
    ("ms / projection", "ms_per_call"),
)


def eta_markdown_table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """Markdown table of ``policy -> eta_accuracy.summary``."""
    head = [title for title, _ in _ETA_COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, m in rows.items():
        cells = [name]
        for _, key in _ETA_COLUMNS[1:]:
            assert key is not None
            value: Any = m
            for part in key.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
            if value is None:
                cells.append("n/a")
            elif key.endswith("_share"):
                cells.append(f"{value:.0%}")
            elif isinstance(value, float):
                cells.append(f"{value:.2f}" if "rel" in key or "factor" in key else f"{value:.1f}")
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_markdown(
    out_dir: str | Path,
    rows: Mapping[str, Mapping[str, Any]],
    *,
    command: str,
    trace: str,
    clusters: str,
    policies: Mapping[str, str],
    eta: Mapping[str, Mapping[str, Any]] | None = None,
    title: str = "cpn simulation report",
) -> Path:
    """Write ``report.md`` into ``out_dir``: what ran, the table, the plots found there.

    ``policies`` maps each policy to a one-line description; ``eta`` is
    ``policy -> eta_accuracy.summary`` of runs made with ETAs. Only plots that
    exist in ``out_dir`` are embedded (``plot`` and ``eta_accuracy.plot_errors``
    write them).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# {title}",
        "",
        "Reproduce:",
        "",
        "```",
        command,
        "```",
        "",
        f"- trace: `{trace}`",
        f"- clusters: `{clusters}`",
    ]
    estimators = {str(m.get("estimator", "")) for m in rows.values()} - {""}
    if estimators:
        lines.append(f"- estimator(s): {', '.join(sorted(estimators))}")
    lines.append("- policies:")
    lines += [f"  - `{name}`: {text}" for name, text in policies.items()]
    lines += ["", "## Policy comparison", "", markdown_table(rows), ""]
    lines += [
        "JCT = finish - submit; wait = JCT minus the time holding GPUs; times in hours; "
        "GPU util = GPU-hours held / (GPUs x makespan).",
        "",
    ]
    if eta:
        lines += ["## ETA accuracy (first ETA vs actual start)", "", eta_markdown_table(eta), ""]
        lines += [
            "Each job's first ETA is the projection (cpn.core.eta.project, the operator's) made "
            "right after it arrived, with the run's estimator. Errors are over jobs that waited "
            "more than ten minutes; 'no ETA' jobs were beyond the projection's cycle bound. "
            "'overtaken': a job submitted later started first. 'calibrated': the same "
            "projection with its wait scaled from experience (cpn.core.eta_calibration: the "
            "ratios actual / first-projected wait of recent jobs, for those still waiting "
            "their wait so far as the latest projection sees it; 'scaled': jobs with enough "
            "such history); 'started jobs only': learning from jobs that had started only. "
            "Aim (issue 6): median err / wait under 0.25.",
            "",
        ]
    plots = [(name, caption) for name, caption in REPORT_PLOTS if (out / name).is_file()]
    if plots:
        lines += ["## Plots", ""]
        for name, caption in plots:
            lines += [f"### {caption}", "", f"![{caption}]({name})", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def describe_policy(policy: QueuePolicy) -> str:
    """One line on a :class:`~cpn.core.policy.QueuePolicy`: ordering, placement, extras."""
    parts = [f"ordering {policy.ordering}", f"placement {policy.placement.method}"]
    parts.append("reservations on" if policy.reservation.enabled else "no reservations")
    parts.append("preemptive" if policy.preemption.enabled else "no preemption")
    if policy.version:
        parts.append(f"version {policy.version}")
    return ", ".join(parts)
