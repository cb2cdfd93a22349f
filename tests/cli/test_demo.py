"""`cpn demo`'s jobs, its choice of the job to explain, and what it tells a newcomer next."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from cpn.cli.demo import IMAGE, _log_files, demo_jobs, longest_wait, next_steps

ROOT = Path(__file__).resolve().parents[2]


def images(body: dict[str, Any]) -> list[str]:
    return [c["image"] for c in body["spec"]["template"]["spec"]["containers"]]


WORKLOAD_IMAGE = "cpn-workloads:0.1.0"


def test_the_demo_names_one_public_image() -> None:
    """A pinned official image, not a made-up trainer name nobody can pull (KWOK runs none)."""
    assert IMAGE == "python:3.12-slim"
    assert {i for _, body in demo_jobs(6, seed=1) for i in images(body)} == {IMAGE}


def test_the_examples_train_with_the_workload_image() -> None:
    """Every sample AIJob runs workloads/ in training mode, on a model the workload knows."""
    examples = [
        doc
        for path in sorted((ROOT / "examples" / "aijobs").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "AIJob"
    ]
    assert len(examples) == 4
    assert {i for doc in examples for i in images(doc)} == {WORKLOAD_IMAGE}
    models = (ROOT / "workloads" / "cpn_workloads" / "models.py").read_text()
    for doc in examples:
        (container,) = doc["spec"]["template"]["spec"]["containers"]
        args = container["args"]
        assert args[:2] == ["train", "--model"] and f'"{args[2]}"' in models, args
        assert "--steps" in args or "--seconds" in args
        gpus = doc["spec"]["resources"]["gpus"]
        if gpus > 1:  # one process per GPU, data-parallel
            assert container["command"][:3] == [
                "torchrun",
                "--standalone",
                f"--nproc-per-node={gpus}",
            ]
        else:  # the image's entry point
            assert "command" not in container
    # the tag is the workload's own version, as workloads/Dockerfile builds it
    version = WORKLOAD_IMAGE.split(":")[1]
    init = (ROOT / "workloads" / "cpn_workloads" / "__init__.py").read_text()
    assert f'__version__ = "{version}"' in init
    assert (
        f"docker build -t {WORKLOAD_IMAGE} workloads/"
        in (ROOT / "workloads" / "Dockerfile").read_text()
    )


def item(name: str, created: str, start: str | None) -> dict[str, Any]:
    status = {"startTime": start} if start else {}
    return {
        "metadata": {"namespace": "team-nlp", "name": name, "creationTimestamp": created},
        "status": status,
    }


def test_longest_wait_is_the_started_job_that_waited_most() -> None:
    items = [
        item("quick", "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"),
        item("slow", "2026-01-01T00:00:10Z", "2026-01-01T00:02:00Z"),
        item("never", "2025-12-31T00:00:00Z", None),
    ]
    assert longest_wait(items) == "team-nlp/slow"
    assert longest_wait([items[2]]) is None


def test_log_files_oldest_first(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    for name in ("decisions.jsonl", "decisions.jsonl.1", "decisions.jsonl.2", "other.jsonl.3"):
        (tmp_path / name).write_text("")
    assert _log_files(log) == [tmp_path / "decisions.jsonl.2", tmp_path / "decisions.jsonl.1", log]


class Bed:
    members = ("member-a", "member-b")
    kubeconfig_merged = Path("/tmp/bed/kubeconfig")
    kubectl = Path("/cache/bin/kubectl")

    def prometheus_url(self, member: str) -> str:
        return f"http://127.0.0.1:9{len(member)}/{member}"


def test_next_steps_name_the_commands_the_issue_lists() -> None:
    """kubectl get aijobs -A, cpn queue, cpn explain of the job shown, the dashboards and
    make testbed-down, with this bed's kubeconfig and Prometheus addresses."""
    text = next_steps(Bed(), Path("/tmp/bed/logs/decisions.jsonl"), "team-nlp/llama3-8b-04")
    venv = Path(sys.executable).parent
    assert f"export KUBECONFIG=/tmp/bed/kubeconfig PATH=/cache/bin:{venv}:$PATH" in text
    assert (venv / "cpn").exists()
    assert "kubectl get aijobs -A" in text
    assert "kubectl describe aijob -n team-nlp llama3-8b-04" in text
    assert "cpn queue -A --all" in text
    assert "cpn explain team-nlp/llama3-8b-04 --log /tmp/bed/logs/decisions.jsonl" in text
    assert "member-a http://127.0.0.1:98/member-a" in text and "grafana-dashboard.json" in text
    assert "make testbed-down" in text
    assert (ROOT / "manifests" / "grafana-dashboard.json").exists()


def test_demo_policy_lets_only_team_nlp_raise_its_priority():
    """The demo's policy is the shipped default plus one grant: team-nlp's priority-1 jobs
    count as 1; every other group stays bounded at 0."""
    from cpn.api.policy import parse_policy
    from cpn.cli.demo import demo_policy
    from cpn.core.queue import effective_priority
    from tests.builders import job

    policy = parse_policy(demo_policy())
    assert effective_priority(job("a", group="nlp", priority=1), policy) == 1
    assert effective_priority(job("b", group="vision", priority=1), policy) == 0


def test_member_jobs_gpu_seconds_count_finished_jobs_by_their_gpus() -> None:
    """The demo's accounting check sums (completion - start) x GPUs of every finished
    member Job (GPUs per pod x parallelism); a Job still running counts nothing."""
    from cpn.cli.demousage import TOLERANCE_S, job_gpu_seconds

    def member_job(gpus: int, parallelism: int, start: str, end: str | None) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": str(gpus)}
        pod = {"containers": [{"name": "main", "resources": {"limits": limits}}]}
        status = {"startTime": start, **({"completionTime": end} if end else {})}
        spec = {"parallelism": parallelism, "template": {"spec": pod}}
        return {"spec": spec, "status": status}

    total, tolerance, count = job_gpu_seconds(
        [
            member_job(2, 1, "2026-11-27T10:00:00Z", "2026-11-27T10:01:40Z"),  # 2 x 100 s
            member_job(1, 4, "2026-11-27T10:00:00Z", "2026-11-27T10:00:10Z"),  # 4 x 10 s
            member_job(8, 1, "2026-11-27T10:00:00Z", None),  # still running
        ]
    )
    assert (total, count) == (240.0, 2)
    assert tolerance == 2 * TOLERANCE_S * (2 + 4)
