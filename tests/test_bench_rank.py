"""bench/bench_rank.py: the ranking figures of the runtime laws on a replayed schedule."""

from __future__ import annotations

from pathlib import Path

from bench import bench_rank as bench

SCHEDULE_HEADER = "job_id,submit_s,first_start_s,finish_s,run_s,gpu_type\n"


def _write(tmp: Path, jobs: list[tuple[str, float, float, str]]) -> tuple[Path, Path]:
    """jobs: (id, submit, duration, group); one job at a time, in submit order."""
    trace, schedule = tmp / "trace.csv", tmp / "jobs-fifo.csv"
    lines, rows, free = ["job_id,submit_time_s,gpus,duration_s,group\n"], [SCHEDULE_HEADER], 0.0
    for job_id, submit, duration, group in jobs:
        lines.append(f"{job_id},{submit:.0f},1,{duration:.0f},{group}\n")
        start = max(free, submit)
        free = start + duration
        rows.append(f"{job_id},{submit:.0f},{start:.0f},{free:.0f},{duration:.0f},\n")
    trace.write_text("".join(lines))
    schedule.write_text("".join(rows))
    return trace, schedule


def test_laws_learnt_per_group_order_the_waiting_jobs_of_two_groups(tmp_path: Path) -> None:
    """Group 'short' always runs 100 s, 'long' 10,000 s: ten jobs learnt one after the other,
    then a burst that waits together is ranked right (most waiting pairs agree)."""

    def job(i: int, submit: float) -> tuple[str, float, float, str]:
        return f"j{i:03d}", submit, 100.0 if i % 2 else 10_000.0, "short" if i % 2 else "long"

    learnt = [job(i, 20_000.0 * i) for i in range(10)]  # each ends before the next comes
    burst = [job(i, 200_000.0 + i) for i in range(10, 50)]  # these wait together
    result = bench.measure(*_write(tmp_path, learnt + burst))
    assert result["jobs"] == 50 and result["pairs_n"] > 100
    assert result["pairs"] > 0.8 and result["spearman"] > 0.8
    assert result["log_mae"] < 2.0


def test_one_group_with_runtimes_unrelated_to_anything_known_ranks_like_a_coin(
    tmp_path: Path,
) -> None:
    """One group whose runtimes alternate regardless of anything the law sees: every waiting
    job gets the same estimate, so each pair is a tie (a half)."""
    jobs = [(f"j{i:03d}", 10.0 * i, 100.0 if i % 2 else 10_000.0, "one") for i in range(40)]
    result = bench.measure(*_write(tmp_path, jobs))
    assert result["pairs_n"] > 100 and abs(result["pairs"] - 0.5) < 0.1


def test_concordance_counts_ties_as_a_half() -> None:
    assert bench._concordant(1, 2, 10, 20) == 1.0
    assert bench._concordant(2, 1, 10, 20) == 0.0
    assert bench._concordant(1, 1, 10, 20) == 0.5
