"""A running job's GPU utilisation and memory: from its pods' dcgm-exporter readings to
its AIJob status, and back after a restart."""

from __future__ import annotations

from cpn.adapters.prometheus import MetricsSource, Reading, Sample, _keyed
from cpn.api import constants as k
from cpn.api.aijobread import GpuUsage, usage_from_status
from cpn.core.policy import QueuePolicy
from cpn.runtime.gpuusage import job_usage
from cpn.runtime.lifecycle import requeued
from cpn.runtime.ports import GpuReading
from cpn.runtime.status import render_status
from cpn.runtime.store import Store
from tests.runtime.fakes import upsert
from tests.runtime.test_store import FixedEstimator, body

NOW = 1767225600.0


def reading(util: float, mib: float | None = 1000.0, at: float = NOW - 5) -> GpuReading:
    return GpuReading(util_pct=util, memory_mib=mib, at_s=at)


def test_a_jobs_usage_is_the_mean_over_the_gpus_of_its_own_pods() -> None:
    pods = {
        ("jobs", "a-1234abcd-1-x7k2p"): [reading(80.0, at=NOW - 7), reading(90.0)],
        ("jobs", "a-1234abcd-1-0-q9z8w"): [reading(100.0)],  # another worker (indexed)
        ("jobs", "a-1234abcd-10-zzzzz"): [reading(0.0)],  # attempt 10: not attempt 1
        ("other", "a-1234abcd-1-aaaaa"): [reading(0.0)],  # another namespace
    }
    usage = job_usage(pods, "jobs", "a-1234abcd-1")
    assert usage == GpuUsage(util_pct=90.0, memory_mib=3000.0, at_s=NOW - 7)
    assert job_usage(pods, "jobs", "b-00000000-1") is None
    long = "l" * 50 + "-1234abcd-1"  # 61 characters: its pods carry the first 58 of "<job>-"
    cut = {("jobs", long[:58] + "k2p9z"): [reading(30.0)]}
    assert job_usage(cut, "jobs", long) == GpuUsage(util_pct=30.0, memory_mib=1000.0, at_s=NOW - 5)
    partial = {("jobs", "a-1-x"): [reading(50.0), reading(70.0, mib=None)]}
    assert job_usage(partial, "jobs", "a-1") == GpuUsage(
        util_pct=60.0, memory_mib=None, at_s=NOW - 5
    )


def test_the_adapter_keeps_fresh_pod_samples_per_gpu() -> None:
    rows = [
        {
            "metric": {"namespace": "jobs", "pod": "p", "Hostname": "n", "gpu": "0"},
            "value": [1, "250"],
        },
        {
            "metric": {"namespace": "jobs", "pod": "p", "Hostname": "n", "gpu": "1"},
            "value": [1, "40"],
        },
    ]
    util = _keyed(rows, ("namespace", "pod", "Hostname", "gpu"))
    source = MetricsSource("http://127.0.0.1:1", max_age_s=120)
    old = ("jobs", "q", "n", "0")
    source.reading = Reading(
        pod_util={**util, old: Sample(50.0, NOW - 600)},
        pod_memory={("jobs", "p", "n", "0"): Sample(2048.0, NOW - 10)},
        ok=True,
    )
    for key in util:
        source.reading.pod_util[key] = Sample(util[key].value, NOW - 10)
    got = source.pod_gpus(NOW)
    assert list(got) == [("jobs", "p")]  # pod q's sample is too old
    assert got[("jobs", "p")] == [
        GpuReading(util_pct=100.0, memory_mib=2048.0, at_s=NOW - 10),  # clamped to 100
        GpuReading(util_pct=40.0, memory_mib=None, at_s=NOW - 10),
    ]


def running_record():
    store = Store(QueuePolicy(), FixedEstimator())
    rec = upsert(store, body("a", "uid-1"), user="u", group="g")
    rec.phase, rec.cluster, rec.nodes, rec.member_job = k.PHASE_RUNNING, "m1", ("n1",), "a-1"
    rec.start_s, rec.reason = NOW - 60, "Running"
    rec.gpu_usage = GpuUsage(util_pct=87.25, memory_mib=6553.6, at_s=NOW - 4)
    return rec


def test_a_running_jobs_status_shows_its_gpu_usage_and_when_it_was_read() -> None:
    status, _ = render_status(running_record(), NOW)
    assert status["gpuUtilizationPercent"] == 87.2
    assert status["gpuMemoryUsedMiB"] == 6554
    assert status["gpuMetricsTime"] == "2025-12-31T23:59:56Z"
    again = usage_from_status(status)
    assert again is not None and (again.util_pct, again.at_s) == (87.2, NOW - 4)


def test_gpu_usage_is_kept_when_it_ends_and_cleared_when_requeued() -> None:
    rec = running_record()
    rec.phase, rec.finish_s, rec.reason = k.PHASE_SUCCEEDED, NOW, "Succeeded"
    status, _ = render_status(rec, NOW)
    assert status["gpuUtilizationPercent"] == 87.2  # frozen: the last reading while it ran
    back = requeued(running_record(), reason="Preempted", message="m", event="Preempted").record
    status, _ = render_status(back, NOW)
    assert "gpuUtilizationPercent" not in status and "gpuMetricsTime" not in status
