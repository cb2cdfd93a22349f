"""Operator metrics: what a cycle and a job's life put in the cpn_* series; the HTTP server."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cpn.config import OperatorConfig
from cpn.core.cycle import plan_cycle
from cpn.core.model import Snapshot
from cpn.decisions import read_log
from cpn.runtime.metrics import Observer, OperatorMetrics, serve
from cpn.runtime.store import Record
from tests.builders import cluster, job, nodes, running, snapshot
from tests.runtime.fakes import FakeClock


def samples(metrics: OperatorMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the rendered exposition, by name and sorted labels."""
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def busy_snapshot() -> Snapshot:
    """Two clusters (one not ready), a running job, and more pending work than room."""
    return snapshot(
        now_s=1000.0,
        jobs=[
            job("a", gpus=4, submitted_s=900.0),
            job("b", gpus=8, submitted_s=400.0, queue="research"),
            job("c", gpus=8, submitted_s=700.0, queue="research"),
            job("d", gpus=64, submitted_s=100.0),
        ],
        running_jobs=[
            running(job("r", gpus=4), "east", "A100-80GB", ("east-0",), start_s=0.0, end_s=5000.0)
        ],
        clusters=[
            cluster("east", nodes("east", 2, free=[4.0, 8.0])),
            cluster("west", nodes("west", 1, gpu_type="V100-32GB", gpus=4), ready=False),
        ],
    )


def test_cycle_sets_queue_capacity_solver_and_readiness_series() -> None:
    """Queue lengths and oldest waits follow the holds; GPUs free subtract the cycle's starts."""
    metrics = OperatorMetrics()
    snap = busy_snapshot()
    plan = plan_cycle(snap)
    metrics.observe_cycle(snap, plan, 0.2, ended_s=1234.0)
    got = samples(metrics)
    jobs = {j.key: j for j in snap.pending}
    held = [jobs[h.job_key] for h in plan.holds]
    assert plan.starts and held
    for queue in {j.queue or "default" for j in held}:
        mine = [j for j in held if (j.queue or "default") == queue]
        levels = {h.level or "default" for h in plan.holds}
        length = sum(
            got.get(("cpn_queue_length", (("level", lv), ("queue", queue))), 0) for lv in levels
        )
        assert length == len(mine)
        oldest = max(
            got.get(("cpn_queue_oldest_wait_seconds", (("level", lv), ("queue", queue))), 0)
            for lv in levels
        )
        assert oldest == max(snap.now_s - j.submit_s for j in mine)
    started = sum(4 if s.job_key == "a" else 8 for s in plan.starts if s.cluster == "east")
    assert got[("cpn_gpus_free", (("cluster", "east"), ("gpu_type", "A100-80GB")))] == 12 - started
    assert got[("cpn_gpus_total", (("cluster", "east"), ("gpu_type", "A100-80GB")))] == 16
    assert got[("cpn_gpus_free", (("cluster", "west"), ("gpu_type", "V100-32GB")))] == 0
    assert got[("cpn_member_ready", (("cluster", "east"),))] == 1
    assert got[("cpn_member_ready", (("cluster", "west"),))] == 0
    assert got[("cpn_jobs_running", (("cluster", "east"),))] == 1 + len(plan.starts)
    assert got[("cpn_cycles_total", ())] == 1
    assert got[("cpn_cycle_duration_seconds_count", ())] == 1
    assert got[("cpn_last_cycle_timestamp_seconds", ())] == 1234.0
    key = (("method", plan.stats.method), ("status", plan.stats.status))
    assert got[("cpn_solver_runs_total", key)] == 1
    assert got[("cpn_plan_starts_total", ())] == len(plan.starts)


def test_label_sets_that_disappear_are_removed() -> None:
    """When a queue empties, its series goes instead of showing a stale length."""
    metrics = OperatorMetrics()
    snap = busy_snapshot()
    metrics.observe_cycle(snap, plan_cycle(snap), 0.1, ended_s=1.0)
    assert any(name == "cpn_queue_length" for name, _ in samples(metrics))
    empty = snapshot(now_s=2000.0, clusters=snap.clusters)
    metrics.observe_cycle(empty, plan_cycle(empty), 0.1, ended_s=2.0)
    assert not any(name == "cpn_queue_length" for name, _ in samples(metrics))


def test_job_life_fills_wait_jct_dispatch_and_prediction_error() -> None:
    """A job dispatched, started and finished lands in each histogram with the right value."""
    metrics = OperatorMetrics()
    metrics.dispatched("east", submit_s=100.0, created_s=103.0)
    metrics.started("research", submit_s=100.0, start_s=110.0)
    metrics.ended(
        "Succeeded",
        queue="research",
        submit_s=100.0,
        finish_s=170.0,
        gpu_type="A100-80GB",
        predicted_s=45.0,
        actual_s=60.0,
    )
    metrics.ended("Failed", queue="", submit_s=100.0, finish_s=120.0)
    observer = Observer(OperatorConfig(), metrics=metrics, clock=FakeClock())
    observer.dispatch_failed("west")
    observer.retrying()
    got = samples(metrics)
    assert got[("cpn_dispatch_latency_seconds_sum", ())] == 3.0
    assert got[("cpn_job_wait_seconds_sum", (("queue", "research"),))] == 10.0
    assert got[("cpn_job_completion_seconds_sum", (("queue", "research"),))] == 70.0
    assert got[("cpn_job_completion_seconds_count", (("queue", "research"),))] == 1
    assert got[("cpn_prediction_error_ratio_sum", (("gpu_type", "A100-80GB"),))] == 0.25
    assert got[("cpn_jobs_finished_total", (("phase", "Failed"),))] == 1
    assert ("cpn_job_completion_seconds_count", (("queue", "default"),)) not in got
    assert got[("cpn_dispatch_failures_total", (("cluster", "west"),))] == 1
    assert got[("cpn_job_retries_total", ())] == 1


def test_registries_are_private() -> None:
    """Two metric sets do not collide and leave the process-wide registry alone."""
    from prometheus_client import REGISTRY

    one, two = OperatorMetrics(), OperatorMetrics()
    one.dispatched("east", 0.0, 1.0)
    assert samples(two)[("cpn_dispatch_latency_seconds_count", ())] == 0
    assert REGISTRY.get_sample_value("cpn_dispatch_latency_seconds_count") is None


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_server_serves_metrics_health_and_readiness() -> None:
    """/metrics renders the registry, /healthz is 200, /readyz follows the ready callback."""
    metrics = OperatorMetrics()
    metrics.dispatched("east", 0.0, 2.0)
    state = {"ready": (False, "no cycle yet")}
    server = serve(metrics, "127.0.0.1", 0, lambda: state["ready"])
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        code, body = get(f"{base}/metrics")
        assert code == 200 and "cpn_dispatch_latency_seconds_count 1.0" in body
        assert get(f"{base}/healthz")[0] == 200
        assert get(f"{base}/readyz") == (503, "no cycle yet\n")
        state["ready"] = (True, "fine")
        assert get(f"{base}/readyz")[0] == 200
        assert get(f"{base}/nothing")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


def test_observer_ready_after_a_recent_cycle_and_logs_decisions(tmp_path: Path) -> None:
    """Not ready before any cycle, ready after one, not ready once cycles stop for 3 intervals."""
    clock = FakeClock(now=0.0, wall_s=5.0)
    path = tmp_path / "d.jsonl"
    config = OperatorConfig(interval_s=10.0, decision_log=str(path))
    observer = Observer(config, clock=clock)
    observer.start()
    assert observer.server is None  # metrics_port 0: no server
    assert not observer.ready()[0]
    snap = busy_snapshot()
    plan = plan_cycle(snap)
    asyncio.run(observer.cycle(1, snap, plan, 0.05))
    clock.now = 29.0
    assert observer.ready()[0]
    clock.now = 31.0
    assert not observer.ready()[0]
    observer.stop()
    (decision,) = read_log(path)
    assert decision.cycle == 1 and decision.snapshot == snap and decision.plan == plan


def test_observer_takes_job_facts_from_records() -> None:
    """Engine records feed the histograms: JCT from creation to finish, error from prediction."""
    observer = Observer(OperatorConfig(), clock=FakeClock())
    record = Record(
        key="ns/a", namespace="ns", name="a", uid="u", generation=1, body={}, user="u", group="g"
    )
    record.job = job("ns/a", submitted_s=50.0)
    record.phase, record.finish_s, record.gpu_type = "Succeeded", 150.0, "A100-80GB"
    record.predicted_runtime_s, record.actual_s = 80.0, 100.0
    observer.ended(record)
    got = samples(observer.metrics)
    assert got[("cpn_job_completion_seconds_sum", (("queue", "default"),))] == 100.0
    assert got[("cpn_prediction_error_ratio_sum", (("gpu_type", "A100-80GB"),))] == pytest.approx(
        0.2
    )


def test_observer_keeps_scheduling_when_the_port_is_taken() -> None:
    """A taken metrics port is logged, not fatal: start() returns without a server."""
    taken = serve(OperatorMetrics(), "127.0.0.1", 0, lambda: (True, ""))
    try:
        port = taken.server_address[1]
        observer = Observer(OperatorConfig(metrics_port=port), clock=FakeClock())
        observer.start()
        assert observer.server is None
        observer.stop()
    finally:
        taken.shutdown()
        taken.server_close()


def test_decision_records_keep_cycle_order_and_failures_are_counted(tmp_path: Path) -> None:
    """Records written off the loop stay in cycle order; a failing write is counted, not raised."""
    path = tmp_path / "d.jsonl"
    observer = Observer(OperatorConfig(decision_log=str(path)), clock=FakeClock())
    observer.start()
    snap = busy_snapshot()
    plan = plan_cycle(snap)

    async def run() -> None:
        for number in range(1, 6):
            await observer.cycle(number, snap, plan, 0.01)

    asyncio.run(run())
    observer.flush()
    assert observer.decisions is not None
    observer.decisions.write = None  # type: ignore[assignment,method-assign]
    asyncio.run(observer.cycle(6, snap, plan, 0.01))
    observer.stop()
    assert [d.cycle for d in read_log(path)] == [1, 2, 3, 4, 5]
    assert samples(observer.metrics)[("cpn_decision_log_errors_total", ())] == 1


def test_gpus_per_domain_are_counted_per_cluster_and_domain() -> None:
    """Domain series count the nodes of each domain (after the cycle's starts); nodes of no
    domain count in none; without domains there are no domain series."""
    fast, plain = nodes("east", 2, free=[8.0, 8.0])
    east = cluster("east", (replace(fast, domain="fast"), plain))
    snap = snapshot(clusters=[east], jobs=[])
    metrics = OperatorMetrics()
    metrics.observe_cycle(snap, plan_cycle(snap), 0.1, ended_s=1.0)
    got = samples(metrics)
    assert got[("cpn_domain_gpus_free", (("cluster", "east"), ("domain", "fast")))] == 8
    assert got[("cpn_domain_gpus_total", (("cluster", "east"), ("domain", "fast")))] == 8
    assert [k for k in got if k[0] == "cpn_domain_gpus_total"] == [
        ("cpn_domain_gpus_total", (("cluster", "east"), ("domain", "fast")))
    ]
    assert got[("cpn_gpus_total", (("cluster", "east"), ("gpu_type", "A100-80GB")))] == 16
    metrics.observe_cycle(
        replace(snap, clusters=(cluster("east", (plain,)),)), plan_cycle(snap), 0.1, ended_s=2.0
    )
    assert not [k for k in samples(metrics) if k[0].startswith("cpn_domain_gpus")]


def test_the_eta_ranges_factors_and_judgements_are_exported_per_side():
    """The adaptive factors are set as they stand; the judgement counters count each
    judgement once per side and result, however often the totals are reported."""
    from cpn.core.eta import Projection
    from cpn.core.eta_calibration import CalibrationConfig, WaitCalibrator

    metrics = OperatorMetrics()
    calibrator = WaitCalibrator(CalibrationConfig(min_samples=10**6))
    pending = {k: job(k) for k in ("a", "b")}

    def ranged(start: float) -> Projection:
        return Projection(
            start_s=start,
            end_s=start + 10,
            cluster="c",
            gpu_type="g",
            start_low_s=start - 50,
            start_high_s=start + 50,
        )

    calibrator.tell({"a": ranged(100.0), "b": ranged(100.0)}, pending, 0.0, ["a", "b"])
    calibrator.started("a", 120.0)  # within: a hit on each side
    calibrator.started("b", 400.0)  # late: low side hit, high side miss
    for _ in range(2):  # reported twice: counted once
        metrics.eta_ranges(calibrator.range_scale, calibrator.judged, calibrator.misses)
    got = samples(metrics)
    assert got[("cpn_eta_range_judged_total", (("result", "hit"), ("side", "low")))] == 2
    assert got[("cpn_eta_range_judged_total", (("result", "hit"), ("side", "high")))] == 1
    assert got[("cpn_eta_range_judged_total", (("result", "miss"), ("side", "high")))] == 1
    assert got[("cpn_eta_range_factor", (("side", "low"),))] < 1.0  # two hits: narrower
    assert got[("cpn_eta_range_factor", (("side", "high"),))] == pytest.approx(
        calibrator.range_scale[1]
    )
