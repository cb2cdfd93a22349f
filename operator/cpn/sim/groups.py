"""Waits per group: who a policy makes wait (``cpn simulate --by-group``).

The dominant group is the one that submitted the most work (GPUs x duration of its
jobs in the trace; ties by name). ``by_group`` gives, over the finished jobs, the
dominant group's average wait, the other groups' pooled average wait, and each group's
jobs, share of the work and average wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cpn.sim.records import SimResult


def _avg(values: list[float]) -> float:
    return round(sum(values) / len(values), 3) if values else 0.0


def by_group(result: SimResult) -> dict[str, Any]:
    """The dominant group and waits per group (see the module docstring)."""
    work: dict[str, float] = {}
    waits: dict[str, list[float]] = {}
    for record in result.records:
        work[record.group] = work.get(record.group, 0.0) + record.gpus * record.duration_s
        wait = record.wait_s
        if not record.infeasible and record.finish_s is not None and wait is not None:
            waits.setdefault(record.group, []).append(wait)
    if not work:
        return {"dominant": "", "dominant_work_share": 0.0, "groups": {}}
    total = sum(work.values()) or 1.0
    dominant = min(work, key=lambda g: (-work[g], g))
    others = [w for g, values in waits.items() if g != dominant for w in values]
    return {
        "dominant": dominant,
        "dominant_work_share": round(work[dominant] / total, 4),
        "dominant_avg_wait_s": _avg(waits.get(dominant, [])),
        "others_avg_wait_s": _avg(others),
        "groups": {
            group: {
                "jobs": len(waits.get(group, [])),
                "work_share": round(work[group] / total, 4),
                "avg_wait_s": _avg(waits.get(group, [])),
            }
            for group in sorted(work, key=lambda g: (-work[g], g))
        },
    }


def table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per policy: the dominant group, its wait and the others' (hours)."""
    head = f"{'policy':<24} {'dominant group':<16} {'its work':>8} {'its wait h':>10} "
    lines = [head + f"{'others wait h':>13}"]
    for name, row in rows.items():
        groups = row["by_group"]
        lines.append(
            f"{name:<24} {groups['dominant']:<16} {groups['dominant_work_share']:>8.0%} "
            f"{groups.get('dominant_avg_wait_s', 0.0) / 3600:>10.2f} "
            f"{groups.get('others_avg_wait_s', 0.0) / 3600:>13.2f}"
        )
    return "\n".join(lines)
