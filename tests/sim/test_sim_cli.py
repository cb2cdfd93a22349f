"""``cpn simulate``: the main form, its JSON contract, and the convert/generate sub-commands."""

from __future__ import annotations

import json

import pytest
from simkit import DATA, SHARED

from cpn.sim import trace
from cpn.sim.cli import main

BASE = ["--trace", str(DATA / "tiny.csv"), "--clusters", str(DATA / "small-clusters.yaml")]
CONTRACT = {
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
}


def test_json_for_one_policy_is_its_metrics(capsys):
    """With --json and one policy, stdout is exactly one JSON object: that policy's metrics."""
    assert main([*BASE, "--policy", "fifo", "--json"]) == 0
    out = capsys.readouterr().out
    metrics = json.loads(out)
    assert set(metrics) >= CONTRACT
    assert metrics["finished"] == metrics["jobs"] == 40


def test_json_for_several_policies_is_keyed_by_policy(capsys):
    """With several policies, the JSON object maps each policy to its metrics."""
    assert main([*BASE, "--policy", "fifo,oracle", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert list(payload) == ["fifo", "oracle"]
    assert payload["oracle"]["avg_jct_s"] <= payload["fifo"]["avg_jct_s"]
    assert payload["oracle"]["estimator"] == "oracle"


def test_table_and_out_dir(tmp_path, capsys):
    """Without --json a table is printed; --out holds metrics.json, per-job CSVs and plots."""
    assert (
        main([*BASE, "--policy", "fifo,sjf", "--estimator", "noisy", "--out", str(tmp_path)]) == 0
    )
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("policy")
    assert json.loads((tmp_path / "metrics.json").read_text()).keys() == {"fifo", "sjf"}
    names = {p.name for p in tmp_path.iterdir()}
    assert {"jobs-fifo.csv", "jobs-sjf.csv", "jct_cdf.png", "utilization.png"} <= names


def test_policy_file_is_parsed(tmp_path, capsys):
    """A policy YAML file is read by the policy parser and reported under its file name."""
    policy = tmp_path / "mine.yaml"
    policy.write_text("aging:\n  rate: 2\n", encoding="utf-8")
    assert main([*BASE, "--policy", str(policy), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["finished"] == 40


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param(["--policy", "nosuch"], "nosuch", id="unknown policy"),
        pytest.param(
            ["--policy", "fifo", "--trace", "missing.csv"], "missing.csv", id="missing trace"
        ),
    ],
)
def test_bad_input_exits_2_naming_it(args, want, capsys):
    """Bad input exits 2 with a message naming what is wrong."""
    assert main([*BASE, *args]) == 2
    assert want in capsys.readouterr().err


def test_bad_trace_row_is_named(tmp_path, capsys):
    """A malformed trace row is reported with file and row, and nothing is simulated."""
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time_s,gpus,duration_s\na,0,1,10\nb,0,two,10\n", encoding="utf-8")
    code = main(
        ["--trace", str(bad), "--clusters", str(DATA / "small-clusters.yaml"), "--policy", "fifo"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "bad.csv: row 2" in err and "gpus" in err


def test_generate_writes_a_loadable_trace(tmp_path, capsys):
    """``generate`` writes a trace the loader accepts, seeded."""
    out = tmp_path / "g.csv"
    assert main(["generate", "--jobs", "30", "--seed", "4", "--out", str(out)]) == 0
    assert len(trace.read_trace(out)) == 30
    assert list(trace.read_trace(out)) == trace.generate(jobs=30, seed=4)


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared public data not on this machine")
def test_convert_gavel_and_tiresias(tmp_path, capsys):
    """``convert`` turns Gavel's and Tiresias' files into loadable traces with every job."""
    src = SHARED / "gavel" / "msr_philly_traces_seed0" / "23dbec.trace"
    assert main(["convert", "gavel", str(src), "--out", str(tmp_path)]) == 0
    lines = [x for x in src.read_text().splitlines() if x.strip()]
    assert len(trace.read_trace(tmp_path / "23dbec.csv")) == len(lines)
    out = tmp_path / "t.csv"
    assert (
        main(["convert", "tiresias", str(SHARED / "tiresias" / "60_job.csv"), "--out", str(out)])
        == 0
    )
    assert len(trace.read_trace(out)) == 60
