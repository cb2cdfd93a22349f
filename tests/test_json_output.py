"""``--json`` prints one JSON document on stdout and nothing else, for every command.

Each command that offers ``--json`` runs as a subprocess (so what C libraries print
on file descriptor 1, like the HiGHS solver's banner, is caught too) and its whole
stdout goes through ``json.loads``. The ones that need a running cluster are in
``tests/e2e/test_json_on_bed.py``. A scan of the sources fails when a command gains
``--json`` without an entry here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cpn.core.cycle import plan_cycle
from tests.builders import cluster, job, nodes, snapshot
from tests.cli.test_replay import write_log

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SIM = ["--trace", str(DATA / "tiny.csv"), "--clusters", str(DATA / "small-clusters.yaml")]

#: source file offering --json -> the commands below (or in the e2e module) that run it
COVERED = {
    "operator/cpn/sim/cli.py": ["simulate"],
    "operator/cpn/sim/compare.py": ["simulate philly"],
    "operator/cpn/cli/replay.py": ["replay"],
    "operator/cpn/cli/usage.py": ["e2e: usage (tests/e2e/test_usage.py)"],
    "operator/cpn/cli/explain.py": ["explain --log"],
    "operator/cpn/cli/benchmark.py": ["e2e: benchmark run (tests/e2e/test_benchmark_ops.py)"],
    "operator/cpn/cli/clusters.py": ["e2e: clusters --json (tests/e2e/test_clusters.py)"],
    "predictor/cli.py": ["predictor predict", "predictor evaluate"],
    "testbed/cli.py": ["testbed status"],
    "bench/bench_cycle.py": ["bench_cycle"],
    "bench/bench_dispatch.py": ["e2e: bench_dispatch"],
    "bench/bench_latency.py": ["e2e: bench_latency"],
    "bench/bench_memory.py": ["e2e: bench_memory"],
    "bench/bench_peer.py": ["e2e: bench_peer"],
    "bench/bench_scale.py": ["e2e: bench_scale (tests/e2e/test_bench_scale.py)"],
}


def run_json(*args: str, ok: tuple[int, ...] = (0,)) -> Any:
    """Run ``python ARGS...``; its whole stdout must be one JSON document."""
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode in ok, done.stderr[-2000:]
    assert done.stdout.strip(), f"nothing on stdout; stderr: {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def test_every_json_flag_is_covered() -> None:
    """Every source file that defines a --json option has a test here or on the bed."""
    offering = {
        str(path.relative_to(ROOT))
        for top in ("operator", "predictor", "testbed", "bench")
        for path in (ROOT / top).rglob("*.py")
        if re.search(r"add_argument\(\s*\"--json\"", path.read_text(encoding="utf-8"))
    }
    assert offering == set(COVERED)


@pytest.mark.parametrize(
    ("args", "check"),
    [
        pytest.param(
            ["-m", "cpn", "simulate", *SIM, "--policy", "default", "--json"],
            lambda doc: doc["jobs"] == 40 and doc["finished"] == 40,
            id="simulate",
        ),
        pytest.param(
            ["-m", "cpn", "simulate", *SIM, "--policy", "default,fifo", "--json"],
            lambda doc: set(doc) == {"default", "fifo"},
            id="simulate-two-policies",
        ),
        pytest.param(
            [
                *("-m", "cpn", "predictor", "predict", "--model", "resnet50"),
                *("--batch-size", "64", "--samples", "10000", "--json"),
            ],
            lambda doc: doc["model"] == "resnet50" and doc["predictions"],
            id="predictor-predict",
        ),
        pytest.param(
            ["-m", "cpn", "predictor", "evaluate", "--holdout-gpu", "K80", "--json"],
            lambda doc: doc["n"] > 0 and "mape" in doc,
            id="predictor-evaluate",
        ),
        pytest.param(
            ["bench/bench_cycle.py", "--pending", "30", "--repeats", "1", "--json"],
            lambda doc: doc["clusters"] == 3 and "milp_30" in doc,
            id="bench_cycle",
        ),
        pytest.param(
            [
                *("bench/bench_cycle.py", "--pending", "30", "--repeats", "1"),
                *("--clusters", "2", "--nodes", "6", "--types", "4", "--methods", "greedy"),
            ],
            lambda doc: (
                (doc["nodes"], doc["gpu_types"]) == (12, 4)
                and doc["greedy_30"]["starts_last"] > 0
                and "milp_30" not in doc
            ),
            id="bench_cycle-scale",
        ),
    ],
)
def test_json_commands_print_one_document(args: list[str], check: Any) -> None:
    assert check(run_json(*args))


def test_simulate_json_has_no_solver_banner() -> None:
    """The MILP runs (default policy, 40 jobs on small clusters) and its banner stays off
    stdout: what the issue saw was "Running HiGHS ... Copyright" before the JSON."""
    done = subprocess.run(
        [sys.executable, "-m", "cpn", "simulate", *SIM, "--policy", "default", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "HiGHS" not in done.stdout and "HiGHS" not in done.stderr
    assert json.loads(done.stdout)["jobs"] == 40


def test_replay_and_explain_json(tmp_path: Path) -> None:
    """`cpn replay --json` and `cpn explain --log --json` on a decision log of real plans."""
    east = cluster("east", nodes("east", 2))
    snap = snapshot(jobs=[job("team-a/big", gpus=16), job("team-a/small", gpus=8)], clusters=[east])
    log = tmp_path / "decisions.jsonl"
    write_log(log, [(snap, plan_cycle(snap))])
    report = run_json("-m", "cpn", "replay", str(log), "--json")
    assert report["cycles"] == 1 and report["differences"] == []
    found = run_json("-m", "cpn", "explain", "team-a/big", "--log", str(log), "--json")
    assert found["cycle"] == 1 and found["job_key"] == "team-a/big"


def test_testbed_status_json_of_a_bed_that_is_not_running(tmp_path: Path) -> None:
    """Exit 1 (not healthy), and still one JSON document: one entry per component."""
    doc = run_json(
        "-m", "cpn", "testbed", "--state-dir", str(tmp_path), "status", "--json", ok=(1,)
    )
    assert doc and all(not c["running"] for c in doc)


@pytest.mark.slow
def test_simulate_philly_json() -> None:
    """The comparison on one Philly window at two checkpointable shares (seconds)."""
    doc = run_json(
        "-m", "cpn", "simulate", "philly", "--traces", "philly-nov-a",
        "--policies", "fifo,oracle,default", "--checkpointable", "0,0.5", "--json",
        ok=(0, 1),
    )  # fmt: skip
    assert set(doc["traces"]) == {"philly-nov-a"}
    assert set(doc["traces"]["philly-nov-a"]) == {"0", "0.5"}
    for share in doc["traces"]["philly-nov-a"].values():
        assert set(share["metrics"]) == {"fifo", "oracle", "default"}
        assert share["metrics"]["fifo"]["finished"] == share["metrics"]["fifo"]["jobs"]
