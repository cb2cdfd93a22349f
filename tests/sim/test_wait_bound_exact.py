"""The wait bound with exact runtimes (issue 16; docs/policy.md, "The wait bound with exact
runtimes").

A bound stated as a mechanism must hold when every prediction is right. With the oracle
estimator, FIFO's longest wait replayed (``reservation.fifo_replay``) and room held by
each job's deadline (``reservation.deadline_hold``), no job waits longer than under FIFO
on real Philly windows. Without the replay, philly-nov-c's 8-GPU jobs drain against the
widest fluid budget, 113 h (FIFO's longest wait: 68.69 h), and wait 110 h; without the
deadline hold an 8-GPU job on philly-nov-a drains too late for a node to clear (24.42 h
against FIFO's 23.51 h).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cpn.sim.cli import main

WINDOWS = Path(__file__).resolve().parents[2] / "operator/cpn/sim/data/philly-windows"


def _run(capsys: pytest.CaptureFixture[str], window: str, policy: str, share: str) -> dict:
    argv = [
        "--trace",
        str(WINDOWS / f"philly-{window}.csv"),
        "--clusters",
        str(WINDOWS / f"clusters-{window}.yaml"),
        "--policy",
        policy,
        "--estimator",
        "oracle",
        "--checkpointable",
        share,
        "--seed",
        "0",
        "--json",
        "--no-progress",
    ]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("window", "share"), [("nov-a", "0.5"), ("nov-c", "0")])
def test_deadline_hold_keeps_fifos_longest_wait_with_exact_runtimes(
    capsys, tmp_path, window, share
):
    policy = tmp_path / "rd.yaml"
    policy.write_text("reservation: {fifo_replay: true, deadline_hold: true}\n", encoding="utf-8")
    fifo = _run(capsys, window, "fifo", share)
    held = _run(capsys, window, str(policy), share)
    assert held["finished"] == held["jobs"] == fifo["jobs"]
    assert held["max_wait_s"] <= fifo["max_wait_s"]
    assert held["avg_jct_s"] < fifo["avg_jct_s"]
