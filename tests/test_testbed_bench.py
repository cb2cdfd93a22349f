"""The bed's stand-in for the GPU benchmark workload: the truth in nodes.yaml, and what the
DCGM simulator writes on a benchmark pod (pure parts; the bed itself: tests/e2e/test_testbed.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from testbed.dcgm import NodeInfo, benchmark_annotations, node_from_object
from testbed.spec import (
    BENCHMARK_SECONDS_ANNOTATION,
    BENCHMARK_SPEED_ANNOTATION,
    FINISH_AT_ANNOTATION,
    TERMINATION_MESSAGE_ANNOTATION,
    NodeSpec,
    SpecError,
    load_spec,
    parse_spec,
)

SPEC = load_spec(port_base=26100)
GPUS = {g.product: g for g in SPEC.gpu_models}
H100 = GPUS["NVIDIA H100 80GB HBM3"]


def node(product: str = H100.product, message: str | None = None) -> NodeInfo:
    return NodeInfo(
        name="h100-0",
        gpus=8,
        model_name=product,
        memory_mib=81559,
        power_limit_w=700,
        idle_power_w=70,
        cpus=96,
        memory_bytes=2.0**40,
        benchmark_message=message,
    )


def pod(
    phase: str = "Running", labels: dict[str, str] | None = None, **notes: str
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "b",
            "labels": {"cpn.io/benchmark": "x"} if labels is None else labels,
            "annotations": dict(notes),
        },
        "spec": {
            "nodeName": "h100-0",
            "containers": [
                {
                    "command": ["python", "-m", "cpn_workloads"],
                    "args": ["bench", "--models", "resnet50,yolov8m"],
                }
            ],
        },
        "status": {"phase": phase},
    }


def test_the_unused_h100_model_is_kept_with_its_truth() -> None:
    """nodes.yaml has H100s on no member, for tests to add; the truth is per model."""
    assert H100.key == "H100-80GB" and H100.samples_per_s["resnet50"] == 2710
    assert all(n.gpu_model.key != "H100-80GB" for c in SPEC.clusters for n in c.nodes)


def test_a_running_benchmark_pod_gets_the_truth_and_an_end() -> None:
    notes = benchmark_annotations(pod(), node(), GPUS, now_s=1_700_000_000.0)
    assert notes is not None
    doc = json.loads(notes[TERMINATION_MESSAGE_ANNOTATION])
    assert (doc["kind"], doc["schema"], doc["device"]["name"]) == (
        "cpn.io/gpu-benchmark",
        1,
        "NVIDIA H100 80GB HBM3",
    )
    rates = {r["model"]: (r["batch_size"], r["samples_per_s"]) for r in doc["results"]}
    assert rates == {"resnet50": (64, 2710), "yolov8m": (16, 548)}
    assert notes[FINISH_AT_ANNOTATION] == "2023-11-14T22:13:24.000Z"  # 2 s per model later


@pytest.mark.parametrize(
    "the_pod",
    [
        pod(phase="Pending"),
        pod(labels={}),
        pod(**{FINISH_AT_ANNOTATION: "2023-11-14T22:13:24.000Z"}),
    ],
    ids=["not-running", "not-a-benchmark", "already-given-its-end"],
)
def test_other_pods_are_left_alone(the_pod: dict[str, Any]) -> None:
    assert benchmark_annotations(the_pod, node(), GPUS, now_s=0.0) is None


def test_a_node_override_is_handed_out_as_is_and_unknown_types_leave_nothing() -> None:
    bad = benchmark_annotations(pod(), node(message="{not json"), GPUS, now_s=0.0)
    assert bad is not None and bad[TERMINATION_MESSAGE_ANNOTATION] == "{not json"
    unknown = benchmark_annotations(pod(), node(product="NVIDIA B200"), GPUS, now_s=0.0)
    assert unknown is not None and unknown[TERMINATION_MESSAGE_ANNOTATION] == ""


def annotated(**notes: str) -> NodeInfo:
    """What the simulator reads of an H100 node manifest carrying ``notes``."""
    gpu = next(g for g in SPEC.gpu_models if g.key == "H100-80GB")
    manifest = NodeSpec(name="h100-0", gpu_model=gpu, gpus=8, cpu=96, memory_gib=1024).manifest()
    manifest["metadata"]["annotations"].update(notes)
    manifest["status"] = {"capacity": {"nvidia.com/gpu": "8", "cpu": "96"}}
    info = node_from_object(manifest)
    assert info is not None
    return info


def test_a_node_can_be_slower_than_the_truth_and_its_benchmarks_longer() -> None:
    """benchmark-speed scales the truth (a slow node), benchmark-seconds the run per model;
    a value that is not a positive number is ignored."""
    slow = annotated(**{BENCHMARK_SPEED_ANNOTATION: "0.5", BENCHMARK_SECONDS_ANNOTATION: "60"})
    notes = benchmark_annotations(pod(), slow, GPUS, now_s=1_700_000_000.0)
    assert notes is not None
    doc = json.loads(notes[TERMINATION_MESSAGE_ANNOTATION])
    rates = {r["model"]: r["samples_per_s"] for r in doc["results"]}
    assert rates == {"resnet50": 1355, "yolov8m": 274}
    step = next(r["step_s"]["p50"] for r in doc["results"] if r["model"] == "resnet50")
    assert step == pytest.approx(64 / 1355, rel=1e-4)  # rounded to microseconds
    assert notes[FINISH_AT_ANNOTATION] == "2023-11-14T22:15:20.000Z"  # 60 s per model later
    for bad in ("-1", "zero", "nan"):
        plain = annotated(**{BENCHMARK_SPEED_ANNOTATION: bad, BENCHMARK_SECONDS_ANNOTATION: bad})
        assert (plain.benchmark_speed, plain.benchmark_seconds) == (1.0, 2)


@pytest.mark.parametrize(
    ("rates", "fragment"),
    [({"gpt9": 3}, "not a benchmark model"), ({"resnet50": 0}, "> 0"), ([1], "mapping")],
)
def test_bad_truth_is_named(rates: Any, fragment: str) -> None:
    doc = {
        "gpu_models": {
            "X": {
                "product": "X",
                "family": "x",
                "memory_mib": 1,
                "power_limit_w": 1,
                "idle_power_w": 1,
                "samples_per_s": rates,
            }
        },
        "members": {
            "m": [
                {"prefix": "n", "count": 1, "gpu_model": "X", "gpus": 1, "cpu": 1, "memory_gib": 1}
            ]
        },
    }
    with pytest.raises(SpecError, match=fragment):
        parse_spec(doc)
