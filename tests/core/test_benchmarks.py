"""The pure benchmark decisions: which nodes, when one starts, which results count."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cpn.core.benchmarks import (
    DAY_S,
    BadResult,
    Known,
    NodeRate,
    NodeSeen,
    free_after,
    preempting,
    read_result,
    slow_nodes,
    start_verdict,
    to_create,
    waiting,
    waiting_for,
)
from cpn.core.model import CyclePlan, Hold, Start, WaitReason
from tests.builders import cluster, job, nodes, running, snapshot

NOW = 1_000 * DAY_S
A = [NodeSeen(cluster="a", node=f"a{i}", gpu_type="A100-80GB") for i in range(2)]
H = [NodeSeen(cluster="b", node=f"h{i}", gpu_type="H100-80GB") for i in range(2)]


def done(gpu: str, age_days: float, node: str = "x") -> Known:
    return Known(
        cluster="a", node=node, gpu_type=gpu, phase="Succeeded", finished_s=NOW - age_days * DAY_S
    )


@pytest.mark.parametrize(
    ("known", "expected"),
    [
        ([], [("a", "a0"), ("b", "h0")]),  # one node per GPU type, the first by name
        ([done("A100-80GB", 3)], [("b", "h0")]),  # a fresh result covers its type
        ([done("A100-80GB", 31)], [("a", "a0"), ("b", "h0")]),  # an old one does not
        ([done("A100-80GB", 3), done("H100-80GB", 29.9)], []),
        # an open one (its type known from its node) covers its type, whatever its age
        ([Known(cluster="b", node="h1", gpu_type="", phase="Pending")], [("a", "a0")]),
        ([Known(cluster="b", node="h1", gpu_type="H100-80GB", phase="Running")], [("a", "a0")]),
        # a failed one does not: the type is tried again
        (
            [Known(cluster="b", node="h0", gpu_type="H100-80GB", phase="Failed")],
            [("a", "a0"), ("b", "h0")],
        ),
    ],
)
def test_to_create(known: list[Known], expected: list[tuple[str, str]]) -> None:
    chosen = to_create([*H, *A], known, now_s=NOW, max_age_days=30)
    assert [(n.cluster, n.node) for n in chosen] == expected


@pytest.mark.parametrize(
    ("kwargs", "start", "reason"),
    [
        ({}, True, ""),
        ({"queued_jobs": 1}, False, "UserJobsWaiting"),
        ({"node_free_gpus": 0.0}, False, "NoFreeGPU"),
        ({"node_free_gpus": None}, False, "NoFreeGPU"),
        ({"node_free_gpus": 0.5}, False, "NoFreeGPU"),
        ({"node_exists": False}, False, "NodeNotFound"),
        ({"member_ready": False, "queued_jobs": 3}, False, "MemberNotReady"),
    ],
)
def test_start_rule(kwargs: dict[str, Any], start: bool, reason: str) -> None:
    args: dict[str, Any] = {
        "node_exists": True,
        "node_free_gpus": 8.0,
        "queued_jobs": 0,
        "member_ready": True,
    }
    verdict = start_verdict(**{**args, **kwargs})
    assert (verdict.start, verdict.reason) == (start, reason)


def entry(model: str = "resnet50", **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": model,
        "batch_size": 64,
        "precision": "bf16",
        "samples_per_s": 1280.0,
        "step_s": {"p50": 0.05, "p90": 0.055},
    }
    return {**base, **over}


def document(*entries: dict[str, Any], **over: Any) -> str:
    doc: dict[str, Any] = {
        "kind": "cpn.io/gpu-benchmark",
        "schema": 1,
        "mode": "bench",
        "device": {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.1},
        "software": {"workload": "0.1.0", "torch": "2.5.1"},
        "results": list(entries) or [entry()],
    }
    return json.dumps({**doc, **over})


def test_a_good_result_is_read_with_device_and_versions() -> None:
    result = read_result(
        document(
            entry(), entry("yolov8m", batch_size=16, samples_per_s=300.0, step_s={"p50": 0.053})
        ),
        ["resnet50", "yolov8m"],
    )
    assert [(r.model, r.batch_size, r.samples_per_s) for r in result.results] == [
        ("resnet50", 64, 1280.0),
        ("yolov8m", 16, 300.0),
    ]
    assert result.device == "NVIDIA H100 80GB HBM3"
    assert dict(result.software) == {"workload": "0.1.0", "torch": "2.5.1"}


@pytest.mark.parametrize(
    ("message", "reason", "fragment"),
    [
        (None, "NoResult", "no termination message"),
        ("  ", "NoResult", "no termination message"),
        ("samples: lots", "MalformedResult", "not JSON"),
        ("[1, 2]", "MalformedResult", "not a JSON object"),
        (document(kind="other"), "MalformedResult", "expected kind cpn.io/gpu-benchmark"),
        (document(schema=2), "MalformedResult", "schema"),
        (document(results=[]), "MalformedResult", "non-empty list"),
        (document(entry("yolov8m")), "MalformedResult", "no result for resnet50"),
        (document(entry(), entry()), "MalformedResult", "repeated results for resnet50"),
        (document(entry(samples_per_s="fast")), "MalformedResult", "expected a number"),
        (document(entry(batch_size=2.5)), "MalformedResult", "expected an integer"),
        (document(entry(samples_per_s=-3.0)), "AbsurdResult", "not a training rate"),
        (document(entry(samples_per_s=0.0)), "AbsurdResult", "not a training rate"),
        (document(entry(samples_per_s=5e9, step_s={})), "AbsurdResult", "not a training rate"),
        (
            '{"kind": "cpn.io/gpu-benchmark", "schema": 1, "results": [{"model": "resnet50", '
            '"batch_size": 64, "samples_per_s": NaN}]}',
            "AbsurdResult",
            "not a training rate",
        ),
        (document(entry(batch_size=0)), "AbsurdResult", "batch size 0"),
        (document(entry(step_s={"p50": 0.5})), "AbsurdResult", "contradicts"),
        (document(entry(step_s={"p50": 0})), "AbsurdResult", "not positive"),
        (
            document({"model": "resnet50", "error": "CUDA out of memory"}),
            "ModelFailed",
            "out of memory",
        ),
    ],
)
def test_bad_results_are_refused_with_a_reason(
    message: str | None, reason: str, fragment: str
) -> None:
    with pytest.raises(BadResult) as caught:
        read_result(message, ["resnet50"])
    assert caught.value.reason == reason
    assert fragment in caught.value.message


def test_free_after_takes_the_cycles_starts_and_waiting_for_counts_jobs_that_may_use_a_type() -> (
    None
):
    """A start of 2 workers x 3 GPUs takes 3 on each node; a held job that names only
    V100s does not wait for H100s, one that names none waits for every type."""
    wide, any_type = job("w", gpus=3, workers=2), job("a")
    v100_only = job("v", gpu_types=frozenset({"V100-32GB"}))
    snap = snapshot(
        jobs=[wide, any_type, v100_only],
        clusters=[cluster("b", nodes("b", 2, gpu_type="H100-80GB", free=[8, 1]))],
    )
    start = Start(
        job_key="w", cluster="b", gpu_type="H100-80GB", nodes=("b-0", "b-0"), predicted_runtime_s=1
    )
    held = [Hold(job_key=key, reason=WaitReason.Capacity, message="") for key in ("a", "v")]
    plan = CyclePlan(starts=(start,), holds=tuple(held))
    assert free_after(snap, plan) == {("b", "b-0"): 2.0, ("b", "b-1"): 1.0}
    alone = CyclePlan(starts=(replace(start, alone=True),))
    assert free_after(snap, alone)[("b", "b-0")] == 0.0  # a job runs alone there
    busy = replace(snap, running=(running(any_type, "b", "H100-80GB", ("b-1",)),))
    assert free_after(busy, plan)[("b", "b-1")] == 1.0
    busy = replace(busy, running=(replace(busy.running[0], alone=True),))
    assert free_after(busy, plan)[("b", "b-1")] == 0.0
    assert waiting_for(snap, plan, "H100-80GB") == 1
    assert waiting_for(snap, plan, "V100-32GB") == 2
    assert waiting_for(snap, CyclePlan(), "H100-80GB") == 0
    counts = waiting(snap, plan)  # once per cycle, for every type
    assert (counts.waiting_for("H100-80GB"), counts.waiting_for("V100-32GB")) == (1, 2)
    assert counts.waiting_for("K80") == 1


H100 = "H100-80GB"


def held(key: str, reason: WaitReason = WaitReason.Capacity, position: int = 1) -> Hold:
    return Hold(job_key=key, reason=reason, message="", position=position)


@pytest.mark.parametrize(
    ("jobs", "holds", "free", "expected"),
    [
        # 8 GPUs per worker, 7 free with the benchmark's taken: it lacks exactly that GPU
        ([job("big", gpus=8)], [held("big")], 7.0, "big"),
        # 8 needed, 6 free: the benchmark's GPU is not enough, so it is not stopped
        ([job("big", gpus=8)], [held("big")], 6.0, None),
        # it fits without the benchmark's GPU: what it waits for is something else
        ([job("small", gpus=2)], [held("small")], 7.0, None),
        # waiting for quota, back-off, or suspended: GPUs are not what it lacks
        ([job("q", gpus=8)], [held("q", WaitReason.Quota)], 7.0, None),
        ([job("b", gpus=8)], [held("b", WaitReason.Backoff)], 7.0, None),
        ([job("s", gpus=8)], [held("s", WaitReason.Suspended)], 7.0, None),
        # a job that may not run on the node's GPU type
        ([job("v", gpus=8, gpu_types=frozenset({"V100-32GB"}))], [held("v")], 7.0, None),
        ([job("h", gpus=8, gpu_types=frozenset({H100}))], [held("h")], 7.0, "h"),
        # the first in queue order names it
        (
            [job("one", gpus=8), job("two", gpus=8)],
            [held("two", position=1), held("one", position=2)],
            7.0,
            "two",
        ),
        # per worker: 2 workers x 8 GPUs, one worker fits with the benchmark's GPU
        ([job("w", gpus=8, workers=2)], [held("w", WaitReason.Priority)], 7.0, "w"),
        # nothing known of the node
        ([job("big", gpus=8)], [held("big")], None, None),
    ],
)
def test_preemption_rule(
    jobs: list[Any], holds: list[Hold], free: float | None, expected: str | None
) -> None:
    snap = snapshot(jobs=jobs, clusters=[cluster("b", nodes("b", 1, gpu_type=H100))])
    plan = CyclePlan(holds=tuple(holds))
    assert preempting(snap, plan, gpu_type=H100, node_free_gpus=free) == expected


def rate(node: str, value: float, *, gpu: str = H100, model: str = "resnet50") -> NodeRate:
    return NodeRate(
        cluster="a", node=node, gpu_type=gpu, model=model, samples_per_s=value, source=f"b-{node}"
    )


def test_slow_node_rule_flags_a_node_well_below_its_peers_median() -> None:
    rates = [rate("h0", 2710), rate("h1", 2700), rate("h2", 1355), rate("h3", 2400)]
    (slow,) = slow_nodes(rates)
    assert (slow.rate.node, slow.rate.model, slow.peers) == ("h2", "resnet50", 3)
    assert slow.rate.source == "b-h2"
    assert slow.peers_median == 2700 and slow.ratio == pytest.approx(1355 / 2700)
    # 2400 is 0.89x the median of 2705 (h0, h1) and 1355: not slow at 0.85, slow at 0.9
    assert [s.rate.node for s in slow_nodes(rates, ratio=0.9)] == ["h2", "h3"]


@pytest.mark.parametrize(
    ("rates", "slow"),
    [
        ([rate("h0", 2710), rate("h1", 1000)], []),  # one peer is not enough
        ([rate("h0", 2710), rate("h1", 2710), rate("h2", 1000, gpu="A100-80GB")], []),
        # other models are other peers
        ([rate("h0", 2710), rate("h1", 2710), rate("h2", 100, model="yolov8m")], []),
        ([rate("h0", 2710), rate("h1", 2710), rate("h2", 2710 * 0.85)], []),  # at the bound
        ([rate("h0", 2710), rate("h1", 2710), rate("h2", 2710 * 0.84)], ["h2"]),
        # a node's later result replaces its earlier one
        ([rate("h0", 2710), rate("h1", 2710), rate("h2", 1000), rate("h2", 2700)], []),
        ([rate("h0", 2710), rate("h1", 2710), rate("h2", 2700), rate("h2", 1000)], ["h2"]),
    ],
)
def test_slow_node_rule_cases(rates: list[NodeRate], slow: list[str]) -> None:
    assert [s.rate.node for s in slow_nodes(rates)] == slow


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(min_value=1, max_value=1e5), min_size=1, max_size=12),
    st.floats(min_value=0.1, max_value=1.0),
)
def test_slow_node_rule_properties(values: list[float], ratio: float) -> None:
    """Exactly the nodes below ratio x the median of the others (with 2 others or more)
    are flagged, each with its ratio below the bound; doubling every rate changes
    nothing (the rule is relative)."""
    rates = [rate(f"n{i}", v) for i, v in enumerate(values)]
    flagged = {s.rate.node: s for s in slow_nodes(rates, ratio=ratio)}
    for i, v in enumerate(values):
        others = values[:i] + values[i + 1 :]
        expect = len(others) >= 2 and v < ratio * statistics.median(others)
        assert (f"n{i}" in flagged) == expect
        if expect:
            assert flagged[f"n{i}"].ratio < ratio
    doubled = [rate(f"n{i}", v * 2) for i, v in enumerate(values)]  # exact in floats
    assert {s.rate.node for s in slow_nodes(doubled, ratio=ratio)} == set(flagged)
