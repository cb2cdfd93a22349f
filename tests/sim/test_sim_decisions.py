"""``cpn simulate --decisions``: a simulated run's decision log, in the operator's format,
read by ``cpn replay`` and ``cpn explain --log [--at]``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from simkit import DATA

from cpn.cli.main import main as cpn
from cpn.decisions import read_log
from cpn.sim.cli import main as simulate

BASE = [
    "--trace",
    str(DATA / "tiny.csv"),
    "--clusters",
    str(DATA / "small-clusters.yaml"),
    "--json",
]
#: Figures of the run itself, not of how long the machine took.
TIMINGS = {"wall_s", "plan_wall_s"}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert simulate([*BASE, *args]) == 0
    metrics: dict[str, object] = json.loads(capsys.readouterr().out)
    return metrics


def test_the_log_holds_every_cycle_and_replays_with_no_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One record per cycle, in order, with the run's preemptions; plan_cycle run again on
    each logged snapshot makes the logged plan (the simulator plans as the operator does)."""
    log = tmp_path / "decisions.jsonl"
    metrics = run(capsys, "--policy", "default", "--checkpointable", "1", "--decisions", str(log))
    decisions = list(read_log(log))
    assert [d.cycle for d in decisions] == list(range(1, int(str(metrics["cycles"])) + 1))
    times = [d.snapshot.now_s for d in decisions]
    assert times == sorted(times)
    assert sum(len(d.plan.preemptions) for d in decisions) == metrics["preemptions"]
    assert sum(len(d.plan.starts) for d in decisions) >= int(str(metrics["jobs"]))
    assert cpn(["replay", str(log)]) == 0
    assert "0 differing decisions" in capsys.readouterr().out


def test_recording_changes_no_decision_and_a_new_run_overwrites_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "decisions.jsonl"
    plain = run(capsys, "--policy", "default", "--checkpointable", "1")
    logged = run(capsys, "--policy", "default", "--checkpointable", "1", "--decisions", str(log))
    assert {k: v for k, v in logged.items() if k not in TIMINGS} == {
        k: v for k, v in plain.items() if k not in TIMINGS
    }
    again = run(capsys, "--policy", "fifo", "--decisions", str(log))
    assert len(list(read_log(log))) == again["cycles"] != logged["cycles"]


def test_a_log_named_dash_is_a_file_and_json_stays_one_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    metrics = run(capsys, "--policy", "fifo", "--decisions", "-")  # run() parses stdout whole
    assert len(list(read_log(tmp_path / "-"))) == metrics["cycles"]


def test_a_window_keeps_exactly_the_cycles_inside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole, part = tmp_path / "whole.jsonl", tmp_path / "part.jsonl"
    run(capsys, "--policy", "fifo", "--decisions", str(whole))
    times = [d.snapshot.now_s for d in read_log(whole)]
    low, high = times[len(times) // 4], times[len(times) // 2]
    run(
        capsys,
        "--policy",
        "fifo",
        "--decisions",
        str(part),
        "--decisions-window",
        f"{low!r},{high!r}",
    )
    kept = [(d.cycle, d.snapshot.now_s) for d in read_log(part)]
    expected = [
        (d.cycle, d.snapshot.now_s) for d in read_log(whole) if low <= d.snapshot.now_s <= high
    ]
    assert kept == expected and 0 < len(kept) < len(times)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--decisions-window", "0,10"], "--decisions-window needs --decisions"),
        (["--decisions", "x.jsonl", "--decisions-window", "10,0"], "FROM is after UNTIL"),
        (["--decisions", "x.jsonl", "--decisions-window", "soon"], "is not FROM,UNTIL"),
    ],
)
def test_a_bad_window_is_refused(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = simulate([*BASE, "--policy", "fifo", *args])
    except SystemExit as exit_:  # argparse refuses what it cannot parse
        code = int(str(exit_.code))
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "runs", [["--policy", "fifo,default"], ["--policy", "fifo", "--locality", "both"]]
)
def test_several_runs_are_refused_and_nothing_is_written(
    runs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "decisions.jsonl"
    assert simulate([*BASE, *runs, "--decisions", str(log)]) == 2
    assert "--decisions records one policy's run" in capsys.readouterr().err
    assert not log.exists()


def test_explain_at_an_instant_tells_why_a_simulated_job_waited_then(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job that waited several cycles: ``--at`` picks the last cycle at or before the
    instant, by the trace's own job id; before the job was submitted there is none."""
    log = tmp_path / "decisions.jsonl"
    run(capsys, "--policy", "fifo", "--decisions", str(log))
    decisions = list(read_log(log))
    waits: dict[str, list[tuple[int, float]]] = {}  # cycles in which each job was held
    pending: dict[str, int] = {}  # the last cycle in which each job was pending
    for d in decisions:
        held = {h.job_key for h in d.plan.holds}
        for job in d.snapshot.pending:
            pending[job.key] = d.cycle
            if job.key in held:
                waits.setdefault(job.key, []).append((d.cycle, d.snapshot.now_s))
    key, cycles = max(waits.items(), key=lambda kv: len(kv[1]))
    assert len(cycles) >= 3 and "/" not in key
    now, last = cycles[len(cycles) // 2][1], pending[key]
    cycle = max(d.cycle for d in decisions if d.snapshot.now_s <= now)  # the log's order

    assert cpn(["explain", key, "--log", str(log), "--at", f"{now!r}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{key}: waiting (") and f"in cycle {cycle}\n" in out
    assert "\n  why: " in out and "candidates" in out

    iso = datetime.fromtimestamp(now, UTC).isoformat()  # the same instant, as a time
    assert cpn(["explain", key, "--log", str(log), "--at", iso]) == 0
    assert f"in cycle {cycle}\n" in capsys.readouterr().out

    assert cpn(["explain", key, "--log", str(log)]) == 0
    assert f"in cycle {last}\n" in capsys.readouterr().out

    assert cpn(["explain", key, "--log", str(log), "--at", str(cycles[0][1] - 1.0)]) == 1
    err = capsys.readouterr().err
    assert "was not pending in any cycle of the log at or before" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--at", "100"], "--at reads a decision log"),
        (
            ["--log", "x.jsonl", "--at", "yesterday"],
            "neither seconds nor 'yesterday' is not a date",
        ),
    ],
)
def test_bad_at_is_refused(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cpn(["explain", "some-job", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
