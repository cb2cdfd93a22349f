"""Data in the simulator: traces with datasets, the members' caches kept with the core's
rules, the data-sharing trace's law, and locality-aware against blind placement (issue 20)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from simkit import DATA, clusters, tjob

from cpn.core.errors import InvalidSpec
from cpn.core.model import DataInput
from cpn.core.policy import DataPolicy, QueuePolicy
from cpn.sim.cli import main
from cpn.sim.clusters import ClusterSet
from cpn.sim.datatrace import MAX_GB, MIN_GB, with_datasets
from cpn.sim.estimators import OracleEstimator
from cpn.sim.jobs import truth_for
from cpn.sim.records import JobRecord, SimResult
from cpn.sim.trace import TraceJob, parse_row, read_trace, write_trace
from cpn.sim.world import World

POLICY = QueuePolicy(name="test")
#: GPUs on b only; the data lives on a; 8 Gbps: 100 GB take 100 s.
ONLY_B = clusters({"b": [(1, "V100", 4)], "a": [(1, "V100", 0)]}, bandwidth={"a": {"b": 8}})


def _ds(name: str, gb: float = 100.0, at: str = "a") -> tuple[DataInput, ...]:
    return (DataInput(name=name, size_gb=gb, location=at),)


def _run(
    jobs: list[TraceJob], cl: ClusterSet = ONLY_B, policy: QueuePolicy = POLICY
) -> tuple[SimResult, dict[str, JobRecord]]:
    truth = truth_for(jobs, cl.reference_gpu)
    result = World(jobs, cl, policy, OracleEstimator(truth), truth=truth).run()
    return result, {r.job_id: r for r in result.records}


def test_a_trace_with_datasets_round_trips_and_old_rows_have_none(tmp_path: Path) -> None:
    """Datasets (name@version, size, home) survive write and read; a row without them has none."""
    inputs = (DataInput(name="imagenet", version="v2", size_gb=150.0, location="a"),)
    path = tmp_path / "t.csv"
    write_trace([tjob("x", inputs=inputs), tjob("y")], path)
    read = {j.job_id: j for j in read_trace(path)}
    assert read["x"].inputs == inputs and read["y"].inputs == ()


def test_dataset_lists_of_other_lengths_are_refused() -> None:
    """Two datasets but one size: the row is refused, naming the column."""
    row = {"job_id": "j", "submit_time_s": "0", "gpus": "1", "duration_s": "9"}
    with pytest.raises(InvalidSpec) as caught:
        parse_row({**row, "datasets": "a;b", "dataset_gb": "1"}, where="row 1")
    assert [e.path for e in caught.value.errors] == ["dataset_gb"]


def test_the_first_job_moves_the_dataset_and_the_next_finds_it() -> None:
    """The first job waits 100 s for its dataset; one started after it reads it for free."""
    jobs = [
        tjob("first", duration_s=1000, inputs=_ds("imagenet")),
        tjob("next", submit_s=2000, duration_s=1000, inputs=_ds("imagenet")),
    ]
    result, rec = _run(jobs)
    assert rec["first"].jct_s == pytest.approx(1100)
    assert rec["next"].jct_s == pytest.approx(1000)
    assert (result.moved_gb, rec["first"].moved_gb, rec["next"].moved_gb) == (100.0, 100.0, 0.0)


def test_two_jobs_placed_together_share_one_transfer() -> None:
    """Two jobs starting in one cycle need the same absent dataset: 100 GB move once, and
    both start computing when it is there."""
    jobs = [tjob(k, duration_s=1000, inputs=_ds("imagenet")) for k in ("x", "y")]
    result, rec = _run(jobs)
    assert result.moved_gb == 100.0
    assert rec["x"].jct_s == pytest.approx(1100) and rec["y"].jct_s == pytest.approx(1100)


def test_a_full_cache_evicts_the_least_recently_used() -> None:
    """Under 150 GB, d1 then d2 then d1 again: d2 evicted d1, which moves a second time."""
    small = replace(POLICY, data=DataPolicy(default_cache_gb=150.0))
    jobs = [
        tjob("1", submit_s=0, inputs=_ds("d1")),
        tjob("2", submit_s=1000, inputs=_ds("d2")),
        tjob("3", submit_s=2000, inputs=_ds("d1")),
    ]
    _, rec = _run(jobs, policy=small)
    assert [rec[k].moved_gb for k in "123"] == [100.0, 100.0, 100.0]
    unlimited, again = _run(jobs)
    assert again["3"].moved_gb == 0.0 and unlimited.moved_gb == 200.0


def test_locality_aware_placement_moves_less_than_blind() -> None:
    """A 10 TB dataset on a, a faster GPU on b: aware stays on a and moves nothing; blind
    takes the faster GPU and waits for the data, finishing later."""
    cl = clusters({"a": [(1, "V100", 4)], "b": [(1, "A100", 4)]}, bandwidth={"a": {"b": 8}})
    jobs = [tjob("j", duration_s=1000, inputs=_ds("big", gb=10_000.0))]
    aware, on_a = _run(jobs, cl)
    blind, on_b = _run(jobs, cl, replace(POLICY, data=DataPolicy(locality=False)))
    assert (on_a["j"].cluster, aware.moved_gb) == ("a", 0.0)
    assert (on_b["j"].cluster, blind.moved_gb) == ("b", 10_000.0)
    assert on_a["j"].jct_s < on_b["j"].jct_s


def test_datasets_follow_the_stated_law() -> None:
    """Seeded: the same trace twice; each job reads one of its group's datasets, sized within
    bounds, homed on a given cluster; the first dataset is the most read (Zipf)."""
    trace = [tjob(f"j{i}", group=("g1" if i % 3 else "G 2")) for i in range(600)]
    made = with_datasets(trace, ["a", "b"], seed=3, per_group=5)
    assert made == with_datasets(trace, ["a", "b"], seed=3, per_group=5)
    assert made != with_datasets(trace, ["a", "b"], seed=4, per_group=5)
    for job in made:
        (read,) = job.inputs
        stem = "g1" if job.group == "g1" else "g-2"
        assert read.name.startswith(f"{stem}-d") and read.location in {"a", "b"}
        assert MIN_GB <= read.size_gb <= MAX_GB
    counts = Counter(j.inputs[0].name for j in made if j.group == "g1")
    assert counts.most_common(1)[0][0] == "g1-d1" and len(counts) == 5


def test_simulate_locality_both_reports_moved_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cpn simulate datasets` then `--locality both`: each policy twice, with moved GB."""
    out = tmp_path / "data.csv"
    cl = str(DATA / "small-clusters.yaml")
    assert (
        main(["datasets", "--trace", str(DATA / "tiny.csv"), "--clusters", cl, "--out", str(out)])
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "--trace",
                str(out),
                "--clusters",
                cl,
                "--policy",
                "fifo",
                "--locality",
                "both",
                "--json",
            ]
        )
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    assert list(payload) == ["fifo-aware", "fifo-blind"]
    assert all("moved_gb" in metrics for metrics in payload.values())


def test_a_dataset_homed_on_an_unknown_cluster_is_refused() -> None:
    """The trace's dataset_cluster must name a cluster of the cluster file."""
    with pytest.raises(InvalidSpec) as caught:
        _run([tjob("j", inputs=_ds("d", at="nowhere"))])
    assert [e.path for e in caught.value.errors] == ["dataset_cluster"]
