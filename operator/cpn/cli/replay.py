"""``cpn replay LOG``: re-run every logged cycle and report decisions that differ.

Each record of the decision log (see :mod:`cpn.decisions`) holds the snapshot a
cycle read and the plan it produced. Replay runs :func:`cpn.core.cycle.plan_cycle`
on the snapshot again and compares the starts, preemptions and holds with the
recorded ones, job by job. The solver's statistics are not compared (they say
how the plan was found, not what was decided). Exit status: 0 when nothing
differs, 1 when something does, 2 when the log cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpn.core.cycle import plan_cycle
from cpn.core.model import CyclePlan
from cpn.decisions import Decision, encode, read_log

#: The parts of a plan that are decisions, and how each names its job.
PARTS = ("starts", "preemptions", "holds")
#: A MILP cycle whose wall time reached this share of ``placement.time_limit_s`` may have been
#: cut short (PuLP reports a time-limited solve with a feasible solution as Optimal too).
NEAR_LIMIT = 0.9


@dataclass(frozen=True, slots=True, kw_only=True)
class Difference:
    """One job whose decision in one cycle differs between the log and the replay."""

    cycle: int
    part: str  # starts | preemptions | holds
    job_key: str
    recorded: dict[str, Any] | None  # None: the replay decided this and the log did not
    replayed: dict[str, Any] | None  # None: the log decided this and the replay did not
    solver: str = ""  # the recorded solve, "method/status"
    time_limited: bool = False  # the recorded MILP may have stopped at its time limit

    def as_dict(self) -> dict[str, Any]:
        return {
            "cycle": self.cycle,
            "part": self.part,
            "job": self.job_key,
            "recorded": self.recorded,
            "replayed": self.replayed,
            "solver": self.solver,
            "time_limited": self.time_limited,
        }

    def describe(self) -> str:
        note = f" (recorded solve {self.solver}: time-limited)" if self.time_limited else ""
        if self.replayed is None:
            return f"cycle {self.cycle}: {self.part} {self.job_key}: logged but not replayed{note}"
        if self.recorded is None:
            return f"cycle {self.cycle}: {self.part} {self.job_key}: replayed but not logged{note}"
        changed = sorted(
            key
            for key in {*self.recorded, *self.replayed}
            if self.recorded.get(key) != self.replayed.get(key)
        )
        fields = ", ".join(
            f"{key} {self.recorded.get(key)!r} -> {self.replayed.get(key)!r}" for key in changed
        )
        return f"cycle {self.cycle}: {self.part} {self.job_key}: {fields}{note}"


def compare(
    cycle: int, recorded: CyclePlan, replayed: CyclePlan, *, time_limited: bool = False
) -> list[Difference]:
    """Per-job differences of two plans (order within a part is not a decision)."""
    found: list[Difference] = []
    solver = f"{recorded.stats.method}/{recorded.stats.status}"
    milp = recorded.stats.method == "milp"
    limited = milp and (time_limited or recorded.stats.status != "Optimal")
    for part in PARTS:
        old = _by_job(getattr(recorded, part))
        new = _by_job(getattr(replayed, part))
        for key in sorted({*old, *new}):
            if old.get(key) != new.get(key):
                found.append(
                    Difference(
                        cycle=cycle,
                        part=part,
                        job_key=key,
                        recorded=old.get(key),
                        replayed=new.get(key),
                        solver=solver,
                        time_limited=limited,
                    )
                )
    return found


def _by_job(items: Iterable[Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        out[item.job_key] = encode(item)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    cycles: int
    differences: tuple[Difference, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "cycles": self.cycles,
            "differing_cycles": len({d.cycle for d in self.differences}),
            "differences": [d.as_dict() for d in self.differences],
        }


def replay(decisions: Iterable[Decision]) -> Report:
    """Re-plan every decision and collect what differs."""
    cycles = 0
    differences: list[Difference] = []
    for decision in decisions:
        cycles += 1
        limit_s = decision.snapshot.policy.placement.time_limit_s
        differences += compare(
            decision.cycle,
            decision.plan,
            plan_cycle(decision.snapshot),
            time_limited=decision.wall_s >= NEAR_LIMIT * limit_s,
        )
    return Report(cycles=cycles, differences=tuple(differences))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="cpn replay", description=__doc__)
    parser.add_argument(
        "logs", nargs="+", type=Path, help="decision log file(s), oldest first (e.g. LOG.1 LOG)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(list(argv))
    try:
        report = replay(read_log(*args.logs))
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"cpn replay: cannot read the log: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.as_dict(), indent=1))
    else:
        for difference in report.differences:
            print(difference.describe())
        cycles = len({d.cycle for d in report.differences})
        print(
            f"{report.cycles} cycles replayed, {cycles} with differences, "
            f"{len(report.differences)} differing decisions"
        )
    return 1 if report.differences else 0
