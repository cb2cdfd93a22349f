"""First ETAs recorded by the simulator, their accuracy, and the Markdown report."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace
from types import MappingProxyType

import pytest
from etakit import run_with_eta
from simkit import DATA, clusters, tjob

from cpn.core.eta import Projection, project
from cpn.core.eta_calibration import CalibrationConfig
from cpn.core.model import Snapshot
from cpn.core.presets import preset_policy
from cpn.sim import eta_accuracy
from cpn.sim.cli import main
from cpn.sim.estimators import NoisyEstimator
from cpn.sim.jobs import truth_for
from cpn.sim.records import JobRecord, SimResult
from cpn.sim.world import PlanFn, World

# One 4-GPU V100 node: jobs of 1-4 GPUs queue behind one another; durations vary.
TRACE = [
    tjob("a", 0, gpus=4, duration_s=3000),
    tjob("b", 10, gpus=2, duration_s=5000),
    tjob("c", 20, gpus=3, duration_s=1200),
    tjob("d", 30, gpus=1, duration_s=4000),
    tjob("e", 2000, gpus=2, duration_s=700),
    tjob("f", 2500, gpus=4, duration_s=900),
    tjob("g", 9000, gpus=1, duration_s=300),
    tjob("h", 9100, gpus=2, duration_s=2000),
]


def run(policy: str, trace=TRACE, *, noisy: float | None = None, **kw) -> SimResult:
    return run_with_eta(trace, policy, node_gpus=4, noisy=noisy, seed=3, **kw)


def test_first_eta_is_what_project_returns_on_that_snapshot():
    """Each recorded first ETA equals project() on the snapshot of the job's arrival instant."""
    seen: list[tuple[Snapshot, dict[str, Projection]]] = []

    def spy(
        snapshot: Snapshot, max_cycles: int, plan: PlanFn, until: Collection[str]
    ) -> dict[str, Projection]:
        out = project(snapshot, max_cycles=max_cycles, plan=plan, until=until)
        seen.append((snapshot, out))
        return out

    result = run("default", noisy=0.6, project=spy, eta_max_cycles=50)
    records = {r.job_id: r for r in result.records}
    first: dict[str, tuple[Snapshot, dict[str, Projection]]] = {}
    for snapshot, out in seen:
        for job in snapshot.pending:
            first.setdefault(job.key, (snapshot, out))
    assert result.eta_calls == len(seen) > 0
    assert set(first) == {k for k, r in records.items() if r.eta_at_s is not None}
    for key, (snapshot, _) in first.items():
        again = project(snapshot, max_cycles=50)[key]
        record = records[key]
        assert record.eta_at_s == snapshot.now_s == record.submit_s
        assert (record.eta_start_s, record.eta_end_s) == (again.start_s, again.end_s)


def test_jobs_that_start_on_arrival_get_no_eta():
    """A job that starts in its arrival cycle never waits, so it is never projected."""
    result = run("fifo")
    a = next(r for r in result.records if r.job_id == "a")
    assert a.first_start_s == 0 and a.eta_at_s is None and a.eta_start_s is None


def test_fifo_with_the_oracle_has_exact_etas():
    """Strict FIFO and true runtimes: every first ETA (start and end) is exactly right."""
    result = run("fifo")
    errors, no_eta = eta_accuracy.job_errors(result)
    assert no_eta == 0 and len(errors) >= 5
    assert any(e.wait_s > 600 for e in errors)
    for e in errors:
        assert e.eta_start_s == e.start_s and e.eta_end_s == e.finish_s
    s = eta_accuracy.summary(result)
    assert s["median_rel_error"] == s["p90_rel_error"] == 0.0 and s["exact_share"] == 1.0
    assert s["aim_met"] is True and s["calls"] == result.eta_calls > 0


def test_noisy_estimates_make_etas_wrong():
    """With runtimes mispredicted, some ETAs miss: the check above can fail."""
    s = eta_accuracy.summary(run("fifo", noisy=0.8))
    assert s["median_rel_error"] is not None and s["p90_rel_error"] > 0


def test_later_short_jobs_overtake_under_sjf():
    """Under SJF a short job submitted later starts before a long waiting one: counted as
    overtaking, and that job's ETA was too early (it started late)."""
    trace = [
        tjob("run", 0, gpus=4, duration_s=1000),
        tjob("long", 10, gpus=4, duration_s=5000),
        tjob("short", 300, gpus=4, duration_s=100),
    ]
    result = run("sjf", trace)
    errors = {e.job_id: e for e in eta_accuracy.job_errors(result)[0]}
    assert errors["long"].eta_start_s == 1000 and errors["long"].start_s == 1100
    assert errors["long"].overtaken == 1 and errors["short"].overtaken == 0
    s = eta_accuracy.summary(result)
    assert s["overtaken_share"] == 0.5 and s["late_share"] == 0.5


def test_every_other_job_is_sampled():
    """With eta_every=2 only the 2nd, 4th, ... admitted jobs are candidates for an ETA, and
    the sampled ones get the same ETA as in a full run."""
    full = {r.job_id: r for r in run("fifo").records}
    half = {r.job_id: r for r in run("fifo", eta_every=2).records}
    sampled = {k for k, r in half.items() if r.eta_at_s is not None}
    assert sampled and sampled <= {"c", "e", "g"}
    for key in sampled:
        assert half[key].eta_start_s == full[key].eta_start_s
    assert half["b"].eta_at_s is None and full["b"].eta_at_s is not None


def test_bound_too_small_leaves_jobs_without_eta():
    """Jobs beyond the projection's cycle bound get no ETA and are counted as such."""
    result = run("fifo", eta_max_cycles=1)
    s = eta_accuracy.summary(result)
    assert s["no_eta"] > 0 and s["max_cycles"] == 1
    assert (
        s["no_eta"] + len([e for e in eta_accuracy.job_errors(result)[0] if e.wait_s > 600])
        == (s["waited"])
    )


def _result(records: tuple[JobRecord, ...]) -> SimResult:
    """A run holding just ``records``."""
    return SimResult(
        policy="p",
        estimator="e",
        records=records,
        total_gpus=1,
        times_s=(),
        busy_gpus=(),
        queue_len=(),
        cycles=0,
        wall_s=0.0,
        plan_wall_s=0.0,
        preemptions=0,
    )


def test_summary_figures_on_hand_made_records():
    """Relative and absolute errors, early/late shares and the ten-minute bar."""

    def rec(job_id, submit, start, eta):
        return JobRecord(
            job_id=job_id,
            submit_s=submit,
            gpus=1,
            duration_s=10,
            first_start_s=start,
            finish_s=start + 10,
            eta_at_s=submit,
            eta_start_s=eta,
            eta_end_s=eta + 10,
        )

    records = (
        rec("x", 0, 3600, 3600 + 1800),  # started before its ETA by half the wait
        rec("y", 0, 7200, 7200 - 3600),  # started after its ETA: 0.5 of the wait
        rec("z", 0, 1000, 1000 + 1000),  # 1.0 of the wait
        rec("short", 0, 300, 0),  # waited 5 min: left out
    )
    result = _result(records)
    s = eta_accuracy.summary(result)
    assert s["waited"] == 3 and s["median_rel_error"] == 0.5 and s["p90_rel_error"] == 1.0
    assert s["median_abs_error_h"] == 0.5 and s["early_share"] == pytest.approx(2 / 3, abs=1e-3)


def test_range_coverage_counts_jobs_without_a_range_as_misses():
    """The p20-p80 range holds a start inside it, not one outside it; ``coverage`` is over the
    ranged jobs, ``coverage_all`` over every measured job; widths absolute and relative."""

    def rec(job_id, start, low, high):
        return JobRecord(
            job_id=job_id,
            submit_s=0.0,
            gpus=1,
            duration_s=10,
            first_start_s=start,
            finish_s=start + 10,
            eta_at_s=0.0,
            eta_start_s=start,
            eta_end_s=start + 10,
            eta_low_s=low,
            eta_high_s=high,
        )

    records = (
        rec("in", 3600, 1800, 5400),  # held; width 1 h = 1.0 x its wait
        rec("late", 7200, 1800, 5400),  # started after the range
        rec("early", 3600, 5400, 9000),  # started before it
        rec("edge", 3600, 3600, 3600),  # a point range holding the start exactly
        rec("none", 3600, None, None),  # no range: a miss in coverage_all only
    )
    result = _result(records)
    r = eta_accuracy.summary(result)["range"]
    assert (r["ranged"], r["held"]) == (4, 2)
    assert r["coverage"] == 0.5 and r["coverage_all"] == 0.4 and not r["aim_met"]
    assert r["median_width_h"] == 1.0 and r["median_width_rel"] == 0.5


def test_report_has_the_table_and_images_that_exist(tmp_path, capsys):
    """--report writes report.md with the policy table, the ETA table and existing images."""
    args = ["--trace", str(DATA / "tiny.csv"), "--clusters", str(DATA / "small-clusters.yaml")]
    assert main([*args, "--policy", "fifo,sjf", "--eta", "--report", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "| policy | jobs | finished |" in text
    assert re.search(r"^\| fifo \| 40 \| 40 \|", text, re.M)
    assert re.search(r"^\| sjf \| \d+ \|", text, re.M)
    assert "## ETA accuracy" in text and "--eta --report" in text
    images = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert {"jct_cdf.png", "wait_cdf.png", "utilization.png", "eta_error.png"} <= set(images)
    for name in images:
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert "first ETA vs actual start" in capsys.readouterr().out


def test_report_without_eta_has_no_eta_section(tmp_path, capsys):
    """Without --eta the report has the comparison but no ETA table or histogram."""
    args = ["--trace", str(DATA / "tiny.csv"), "--clusters", str(DATA / "small-clusters.yaml")]
    assert main([*args, "--policy", "fifo", "--report", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "## Policy comparison" in text and "ETA accuracy" not in text
    assert not (tmp_path / "eta_error.png").exists() and "eta_error.png" not in text


def test_philly_comparison_writes_a_report_per_trace(tmp_path, monkeypatch, capsys):
    """``cpn simulate philly --out DIR`` writes DIR/<trace>/report.md with every policy."""
    from cpn.sim import compare

    data = tmp_path / "data"
    (data / "philly").mkdir(parents=True)
    (data / "philly" / "tiny.csv").write_bytes((DATA / "tiny.csv").read_bytes())
    (data / "gavel-cluster.yaml").write_bytes((DATA / "small-clusters.yaml").read_bytes())
    monkeypatch.setattr(compare, "DATA", data)
    monkeypatch.setattr(compare, "VCS", ("tiny",))
    out = tmp_path / "out"
    args = ["--suites", "gavel", "--checkpointable", "0", "--estimator", "oracle", "--jobs", "1"]
    compare.main([*args, "--out", str(out), "--json"])
    text = (out / "tiny" / "report.md").read_text()
    for name in ("fifo", "oracle", "default"):
        assert re.search(rf"^\| {name} \| 40 \| 40 \|", text, re.M)
    assert "cpn simulate philly --suites gavel" in text
    for image in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):
        assert (out / "tiny" / image).is_file()


def test_expected_arrivals_are_the_last_window_of_submissions_recurring():
    """With eta_arrivals_s the projection is given the jobs submitted in the last window,
    shifted by one to ten windows, with their estimates; some jobs then expect to be overtaken."""
    seen: list[tuple[float, list]] = []

    def spy(snapshot, max_cycles, plan, until, arrivals=()):
        seen.append((snapshot.now_s, list(arrivals)))
        return project(snapshot, max_cycles=max_cycles, plan=plan, until=until, arrivals=arrivals)

    window = 3000.0
    result = run("default", project=spy, eta_arrivals_s=window)
    assert seen and result.eta_calls == len(seen)
    submits = {t.job_id: t.submit_s for t in TRACE}
    for now, arrivals in seen:
        recent = sorted(k for k, s in submits.items() if now - window < s <= now)
        assert len(arrivals) == 10 * len(recent)
        for item in arrivals:
            key, shift = item.key.rsplit("+", 1)
            assert key in recent and 1 <= int(shift) <= 10
            assert item.submit_s == submits[key] + int(shift) * window > now
            assert item.estimate.runtime_s
    plain = run("default")
    later = {r.job_id: r.eta_start_s for r in result.records if r.eta_start_s is not None}
    before = {r.job_id: r.eta_start_s for r in plain.records if r.eta_start_s is not None}
    assert later.keys() == before.keys()
    assert any(later[k] > before[k] for k in later)


class _OverconfidentEstimator(NoisyEstimator):
    """Estimates off by exp(N(0, 0.8)) that claim a law 5% wide (labelled jobs whose
    predictions are sure of themselves and wrong)."""

    def estimate(self, job, gpu_types):  # type: ignore[no-untyped-def]
        found = super().estimate(job, gpu_types)
        narrow = {g: v * 1.05 for g, v in found.runtime_s.items()}
        return replace(found, high_s=MappingProxyType(narrow))


def test_narrow_laws_keep_the_experience_range_and_the_point():
    """The stated range of every job holds the range experience alone would state (the same
    run with projections carrying no runtimes' range), so narrow laws cannot shrink it; point
    ETAs, starts and the schedule are those of that run. The adaptive factors are held at 1
    (``adapt_step=0``): the two runs would judge different ranges and adapt apart."""
    trace = [
        tjob(f"j{i}", 200 * i, gpus=1 + i % 4, duration_s=600 + 700 * (i % 5)) for i in range(30)
    ]
    cl = clusters({"a": [(1, "V100", 4)]})
    truth = truth_for(trace, cl.reference_gpu)

    def world(project=None):  # type: ignore[no-untyped-def]
        kw = {} if project is None else {"project": project}
        estimator = _OverconfidentEstimator(truth, sigma=0.8, seed=5)
        return World(
            trace,
            cl,
            preset_policy("default"),
            estimator,
            truth=truth,
            eta=True,
            eta_calibration=CalibrationConfig(min_samples=3, adapt_step=0.0),
            **kw,
        ).run()

    def point_only(snapshot, max_cycles, plan, until):  # type: ignore[no-untyped-def]
        return project(snapshot, max_cycles=max_cycles, plan=plan, until=until)

    ranged, plain = world(), world(point_only)
    by_key = {r.job_id: r for r in plain.records}
    experienced = 0
    for record in ranged.records:
        other = by_key[record.job_id]
        assert (record.first_start_s, record.finish_s) == (other.first_start_s, other.finish_s)
        assert record.eta_cal_start_s == other.eta_cal_start_s
        if other.eta_low_s is None:
            continue
        experienced += 1
        assert record.eta_low_s is not None and record.eta_high_s is not None
        assert record.eta_low_s <= other.eta_low_s and record.eta_high_s >= other.eta_high_s
    assert experienced >= 5
