"""Observability end to end: the operator's decision log replays clean, /metrics tells the truth."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cpn.cli.devbed import stop_process, wait_until
from cpn.decisions import read_log
from testbed.bed import Testbed
from tests.e2e.hubkit import (
    Hub,
    aijob,
    apply,
    free_port,
    get,
    new_namespace,
    running_hub,
    wait_status,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

JOBS = ("obs-a", "obs-b", "obs-c", "obs-d")


def base_url(hub: Hub) -> str:
    """Where the operator serves /metrics, /healthz and /readyz."""
    return f"http://127.0.0.1:{hub.settings['metrics_port']}"


def decision_log(hub: Hub) -> Path:
    return Path(str(hub.settings["decision_log"]))


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    folder = tmp_path_factory.mktemp("observed")
    log, port = folder / "decisions.jsonl", free_port()
    with running_hub(testbed, folder, decision_log=log, metrics_port=port) as hub:
        yield hub


@pytest.fixture(scope="module")
def prometheus(hub: Hub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus (the test bed's binary) scraping the operator's /metrics every second."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (bash testbed/setup.sh)")
    folder = tmp_path_factory.mktemp("prometheus")
    target = base_url(hub).removeprefix("http://")
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "cpn", "static_configs": [{"targets": [target]}]}],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with (folder / "prometheus.log").open("wb") as out:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def promql(base: str, query: str) -> list[dict[str, object]]:
    """The result vector of an instant query ([] while Prometheus is not up)."""
    code, text = get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}")
    if code != 200:
        return []
    result: list[dict[str, object]] = json.loads(text)["data"]["result"]
    return result


@pytest.fixture
def namespace(hub: Hub) -> Iterator[str]:
    with new_namespace(hub, "obs", user="bob", group="nlp") as name:
        yield name


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def total(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return sum(value for (n, _), value in found.items() if n == name)


def test_decisions_replay_clean_and_metrics_count_the_jobs(hub: Hub, namespace: str) -> None:
    """AIJobs run; the log replays with zero differences; /metrics and /readyz agree."""
    docs = [aijob(JOBS[0]), aijob(JOBS[1], gpus=4), aijob(JOBS[2], gpus=8)]
    docs.append(aijob(JOBS[3], gpus=2, queue="research"))
    result = apply(hub, namespace, *docs)
    assert result.returncode == 0, result.stderr
    statuses = {n: wait_status(hub, namespace, n, timeout_s=180, phase="Succeeded") for n in JOBS}

    # Readiness: cycles keep running (interval 5 s), so /readyz answers 200; health always.
    wait_until(lambda: get(f"{base_url(hub)}/readyz")[0] == 200, timeout_s=60, what="/readyz 200")
    assert get(f"{base_url(hub)}/healthz")[0] == 200

    # Metrics: every job of ours is counted once it succeeded (others may have run before).
    def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        code, text = get(f"{base_url(hub)}/metrics")
        found = samples(text) if code == 200 else {}
        done = total(found, "cpn_job_completion_seconds_count") >= len(JOBS)
        return found if done else None

    found = wait_until(scraped, timeout_s=60, what="JCT histogram counting our jobs")
    assert total(found, "cpn_dispatch_latency_seconds_count") >= len(JOBS)
    assert total(found, "cpn_job_wait_seconds_count") >= len(JOBS)
    assert found[("cpn_jobs_finished_total", (("phase", "Succeeded"),))] >= len(JOBS)
    assert total(found, "cpn_prediction_error_ratio_count") >= len(JOBS)
    assert found[("cpn_job_completion_seconds_count", (("queue", "research"),))] >= 1
    slowest = max(s["actualRuntimeSeconds"] for s in statuses.values())
    assert total(found, "cpn_job_completion_seconds_sum") >= slowest
    assert total(found, "cpn_cycles_total") >= 1
    for member in hub.tb.members:
        assert found[("cpn_member_ready", (("cluster", member),))] == 1
        totals = [
            v
            for (n, labels), v in found.items()
            if n == "cpn_gpus_total" and ("cluster", member) in labels
        ]
        assert totals and sum(totals) > 0
    free = [v for (n, _), v in found.items() if n == "cpn_gpus_free"]
    assert free and all(v >= 0 for v in free)

    # The decision log: every job's start is recorded where it really ran, and replays clean.
    keys = {f"{namespace}/{name}": name for name in JOBS}
    recorded = {}
    versions = set()
    for decision in read_log(decision_log(hub)):
        versions.add(decision.snapshot.policy.version)
        for start in decision.plan.starts:
            if start.job_key in keys:
                recorded[start.job_key] = start
    assert set(recorded) == set(keys)
    for key, start in recorded.items():
        assert start.cluster == statuses[keys[key]]["cluster"]
        assert start.gpu_type == statuses[keys[key]]["gpuType"]
    assert all(versions), "each record names the policy version it used"
    replay = subprocess.run(
        [sys.executable, "-m", "cpn", "replay", str(decision_log(hub)), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    report = json.loads(replay.stdout)
    assert replay.returncode == 0, json.dumps(report["differences"][:5], indent=1)
    assert report["differences"] == [] and report["cycles"] >= 1
    # `cpn explain` reads the same log: the chosen candidate is where the job really ran.
    key = next(iter(keys))
    explained = subprocess.run(
        [sys.executable, "-m", "cpn", "explain", key, "--log", str(decision_log(hub)), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    found = json.loads(explained.stdout)
    chosen = [c for c in found["candidates"] if c["chosen"]]
    assert found["outcome"] == "started" and len(chosen) == 1
    assert chosen[0]["cluster"] == statuses[keys[key]]["cluster"]
    assert "wait_s" in found["terms"]


def test_prometheus_scrapes_the_operators_cpn_series(hub: Hub, prometheus: str) -> None:
    """A real Prometheus scrapes /metrics: the target is up and cpn_ series answer PromQL."""
    members = set(hub.tb.members)

    def clusters(query: str) -> set[str]:
        return {str(r["metric"]["cluster"]) for r in promql(prometheus, query)}  # type: ignore[index]

    wait_until(
        lambda: promql(prometheus, 'cpn_cycles_total{job="cpn"} > 0'),
        timeout_s=90,
        what="cpn_cycles_total scraped by Prometheus",
    )
    assert promql(prometheus, 'up{job="cpn"} == 1')
    wait_until(
        lambda: clusters("cpn_member_ready == 1") == members,
        timeout_s=60,
        what="every member ready in Prometheus",
    )
    assert clusters("sum by (cluster) (cpn_gpus_total) > 0") == members
    quantile = "histogram_quantile(0.5, rate(cpn_cycle_duration_seconds_bucket[1m])) >= 0"
    wait_until(lambda: promql(prometheus, quantile), timeout_s=60, what="cycle duration p50")
