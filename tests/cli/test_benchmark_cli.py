"""`cpn benchmark run` without a cluster: its arguments checked, an unreachable hub told in
one line (what it creates on a live hub: tests/e2e/test_benchmark_ops.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cpn.api.benchmarks import job_name, requested_benchmark


def cpn(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpn", "benchmark", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["run", "--cluster", "a", "--models", "gpt9"], "unknown model gpt9"),
        (["run", "--cluster", "a", "--models", "resnet50,resnet50"], "named twice"),
        (["run", "--cluster", "a", "--budget-seconds", "0"], "must be in [1, 86400]"),
        (["run"], "--cluster"),
    ],
)
def test_bad_arguments_are_named(args: list[str], words: str) -> None:
    done = cpn(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert words in done.stderr


def test_an_unreachable_hub_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "h", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "h", "user": "u"}}],
        "current-context": "c",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    done = cpn("run", "--cluster", "a", "--json", "--kubeconfig", str(path))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"cpn benchmark run: cannot reach the hub at https://127.0.0.1:{port}: "
        + done.stderr.strip().rsplit(": ", 1)[-1]
    ]


def test_a_requested_benchmark_is_named_by_the_hub_and_its_job_name_fits() -> None:
    body = requested_benchmark("member-a", "n" * 80, models=("resnet50",), budget_s=5)
    prefix = body["metadata"]["generateName"]
    assert prefix.startswith("member-a-nnn") and prefix.endswith("-")
    assert body["spec"] == {
        "cluster": "member-a",
        "node": "n" * 80,
        "models": ["resnet50"],
        "budgetSeconds": 5,
    }
    generated = prefix + "x7k2q"  # the hub adds 5 characters
    assert job_name(generated) == f"cpn-bench-{generated}" and len(job_name(generated)) <= 63
    assert "models" not in requested_benchmark("m", "n")["spec"]
