"""GPU benchmarks: which nodes to measure, when one may start, and what its result says.

Pure decisions, table-tested (``tests/core/test_benchmarks.py``); the runtime
(:mod:`cpn.runtime.benchmarks`) carries them out.

- :func:`to_create`: the nodes that need a GPUBenchmark, one per GPU type with no
  ``Succeeded`` result newer than the policy's ``max_age_days`` and none open.
- :func:`start_verdict`: **the rule** a benchmark's Job starts by. A benchmark sits at the
  lowest level of the queue: it starts only when no AIJob that may run on its node's GPU
  type is left waiting by the cycle (:func:`waiting_for`) and its node has a free GPU once
  the cycle's starts took theirs (:func:`free_after`; none on a node a job runs alone on,
  :mod:`cpn.core.alone`); it takes one GPU.
- :func:`preempting`: **the preemption rule**. A running benchmark gives its GPU back as
  soon as a cycle leaves waiting, for room (:data:`ROOM_REASONS`), an AIJob that may run on
  its node's GPU type and one of whose workers would fit on that node's free GPUs with the
  benchmark's GPU but not without it.
- :func:`slow_nodes`: **the slow-node rule**. A node whose latest samples/s for a model is
  below :data:`SLOW_RATIO` times the median of the latest results of that model on at
  least :data:`SLOW_MIN_PEERS` other nodes of its GPU type is slow.
- :func:`read_result`: the benchmark pod's termination message, checked. Anything
  malformed or absurd raises :class:`BadResult` with a reason and a message, so that it
  never reaches the predictor.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from cpn.core.model import CyclePlan, Snapshot, WaitReason

#: the ``kind`` and ``schema`` of the workload program's result document
RESULT_KIND = "cpn.io/gpu-benchmark"
RESULT_SCHEMA = 1
#: samples/s per GPU above which a result cannot be a measurement of training (the fastest
#: published training rates, small CNNs on an H100, are a few tens of thousands)
MAX_SAMPLES_PER_S = 1e6
#: largest per-GPU batch believed
MAX_BATCH = 65536
#: how far batch / p50 step time may be from samples/s (the mean rate) before the numbers
#: contradict each other
STEP_RATE_FACTOR = 3.0
DAY_S = 86400.0

#: phases of a GPUBenchmark
PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSeen:
    """A member node with GPUs, as the operator sees it."""

    cluster: str
    node: str
    gpu_type: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Known:
    """A GPUBenchmark on the hub, as far as :func:`to_create` cares."""

    cluster: str
    node: str
    gpu_type: str  # "" while it has not run
    phase: str
    finished_s: float | None = None


def to_create(
    nodes: Iterable[NodeSeen],
    known: Iterable[Known],
    *,
    now_s: float,
    max_age_days: float,
) -> list[NodeSeen]:
    """The nodes to create a GPUBenchmark for: per GPU type with no ``Succeeded`` result
    newer than ``max_age_days`` and no benchmark open (Pending or Running) on a node of
    that type, its first node by (cluster, node). A node that already has an open one is
    never chosen twice."""
    known = list(known)
    type_of = {(n.cluster, n.node): n.gpu_type for n in nodes if n.gpu_type}
    fresh_after = now_s - max_age_days * DAY_S
    covered: set[str] = set()
    for bench in known:
        gpu_type = bench.gpu_type or type_of.get((bench.cluster, bench.node), "")
        if not gpu_type:
            continue
        fresh = bench.phase == SUCCEEDED and (bench.finished_s or 0.0) > fresh_after
        if fresh or bench.phase in (PENDING, RUNNING):
            covered.add(gpu_type)
    out: list[NodeSeen] = []
    for (cluster, node), gpu_type in sorted(type_of.items()):
        if gpu_type not in covered:
            covered.add(gpu_type)
            out.append(NodeSeen(cluster=cluster, node=node, gpu_type=gpu_type))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """Whether a pending benchmark's Job may be created now, and if not, why."""

    start: bool
    reason: str = ""
    message: str = ""


def start_verdict(
    *,
    node_exists: bool,
    node_free_gpus: float | None,
    queued_jobs: int,
    member_ready: bool,
) -> Verdict:
    """The rule: a benchmark starts only on a ready member, on its node, when that node has
    a free GPU and no AIJob that may use its GPU type waits (user jobs always come first)."""
    if not member_ready:
        return Verdict(start=False, reason="MemberNotReady", message="its member is not ready")
    if not node_exists:
        return Verdict(start=False, reason="NodeNotFound", message="its node is not in its member")
    if queued_jobs > 0:
        return Verdict(
            start=False,
            reason="UserJobsWaiting",
            message=f"{queued_jobs} AIJob(s) that may use this GPU type wait; benchmarks "
            "run at the lowest level",
        )
    if not node_free_gpus or node_free_gpus < 1:
        return Verdict(start=False, reason="NoFreeGPU", message="its node has no free GPU")
    return Verdict(start=True)


class BadResult(ValueError):
    """A benchmark's result that must not reach the predictor: ``reason`` is one word
    (``NoResult``, ``MalformedResult``, ``AbsurdResult``, ``ModelFailed``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResult:
    """One model's measured training throughput on one GPU: ``samples_per_s`` at
    ``batch_size``, in ``precision`` (what the workload ran: bf16, fp16 or fp32), with
    the p50 and p90 step times when the result gives them."""

    model: str
    batch_size: int
    samples_per_s: float
    precision: str = ""
    step_p50_s: float | None = None
    step_p90_s: float | None = None
    #: llama3's decoder layers when fewer than the published 32 fit (None: the full shape)
    layers: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchResult:
    """A checked result: per model, plus the device and software that produced it."""

    results: tuple[ModelResult, ...]
    device: str = ""
    software: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def _malformed(message: str) -> BadResult:
    return BadResult("MalformedResult", message)


def _number(entry: Mapping[str, Any], key: str, where: str) -> float:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _malformed(f"{where}.{key}: expected a number, got {value!r}"[:300])
    return float(value)


def _model_result(entry: Any, index: int) -> ModelResult:
    where = f"results[{index}]"
    if not isinstance(entry, Mapping):
        raise _malformed(f"{where}: expected an object")
    model = entry.get("model")
    if not isinstance(model, str) or not model:
        raise _malformed(f"{where}.model: expected a model name")
    if "error" in entry:
        raise BadResult("ModelFailed", f"{model} failed on the node: {str(entry['error'])[:300]}")
    batch = entry.get("batch_size")
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise _malformed(f"{where}.batch_size: expected an integer, got {batch!r}"[:300])
    if not 1 <= batch <= MAX_BATCH:
        raise BadResult("AbsurdResult", f"{model}: batch size {batch} is not in [1, {MAX_BATCH}]")
    rate = _number(entry, "samples_per_s", where)
    if not math.isfinite(rate) or not 0 < rate <= MAX_SAMPLES_PER_S:
        raise BadResult(
            "AbsurdResult",
            f"{model}: {rate} samples/s is not a training rate (0, {MAX_SAMPLES_PER_S:.0e}]",
        )
    p50 = p90 = None
    steps = entry.get("step_s")
    if isinstance(steps, Mapping) and "p50" in steps:
        p50 = _number(steps, "p50", f"{where}.step_s")
        p90 = _number(steps, "p90", f"{where}.step_s") if "p90" in steps else None
        if not math.isfinite(p50) or p50 <= 0:
            raise BadResult("AbsurdResult", f"{model}: p50 step time {p50} s is not positive")
        implied = batch / p50
        if not rate / STEP_RATE_FACTOR <= implied <= rate * STEP_RATE_FACTOR:
            raise BadResult(
                "AbsurdResult",
                f"{model}: {rate:g} samples/s contradicts batch {batch} at a p50 step of "
                f"{p50:g} s ({implied:g} samples/s)",
            )
    layers = None
    shape = entry.get("shape")
    if isinstance(shape, Mapping) and isinstance(shape.get("layers"), int):
        layers = int(shape["layers"])
    precision = entry.get("precision")
    return ModelResult(
        model=model,
        batch_size=batch,
        samples_per_s=rate,
        precision=precision if isinstance(precision, str) else "",
        step_p50_s=p50,
        step_p90_s=p90,
        layers=layers,
    )


def read_result(message: str | None, models: Sequence[str]) -> BenchResult:
    """The benchmark's termination message checked; :class:`BadResult` says what is wrong.
    Every model of ``models`` must have a result, and no other model may."""
    if not message or not message.strip():
        raise BadResult("NoResult", "the benchmark pod left no termination message")
    try:
        doc = json.loads(message)
    except (json.JSONDecodeError, RecursionError) as err:
        raise _malformed(f"the termination message is not JSON ({err})") from None
    if not isinstance(doc, Mapping):
        raise _malformed("the termination message is not a JSON object")
    if doc.get("kind") != RESULT_KIND or doc.get("schema") != RESULT_SCHEMA:
        raise _malformed(
            f"expected kind {RESULT_KIND} schema {RESULT_SCHEMA}, got kind "
            f"{str(doc.get('kind'))[:60]!r} schema {str(doc.get('schema'))[:20]!r}"
        )
    raw = doc.get("results")
    if not isinstance(raw, list) or not raw:
        raise _malformed("results: expected a non-empty list")
    results = tuple(_model_result(entry, i) for i, entry in enumerate(raw))
    got = [r.model for r in results]
    missing = [m for m in models if m not in got]
    extra = sorted({m for m in got if m not in models} | {m for m in got if got.count(m) > 1})
    if missing:
        raise _malformed(f"no result for {', '.join(missing)}")
    if extra:
        raise _malformed(f"unexpected or repeated results for {', '.join(extra)}")
    device = doc.get("device")
    name = device.get("name") if isinstance(device, Mapping) else None
    software = doc.get("software")
    versions = (
        {str(k)[:63]: str(v)[:63] for k, v in software.items() if isinstance(v, str | int | float)}
        if isinstance(software, Mapping)
        else {}
    )
    return BenchResult(
        results=results,
        device=name[:253] if isinstance(name, str) else "",
        software=MappingProxyType(versions),
    )


def free_after(snapshot: Snapshot, plan: CyclePlan) -> dict[tuple[str, str], float]:
    """Free GPUs per (cluster, node) once the cycle's starts have taken theirs; none on a
    node a job runs alone on (:mod:`cpn.core.alone`: a benchmark there would spoil its
    measurement, as a user job would)."""
    free = {(n.cluster, n.name): n.free_gpus for c in snapshot.clusters for n in c.nodes}
    per_worker = {j.key: j.gpus_per_worker for j in snapshot.pending}
    for start in plan.starts:
        for node in start.nodes:
            key = (start.cluster, node)
            free[key] = free.get(key, 0.0) - per_worker.get(start.job_key, 0.0)
    held = [(r.cluster, r.nodes) for r in snapshot.running if r.alone]
    held += [(s.cluster, s.nodes) for s in plan.starts if s.alone]
    for cluster, names in held:
        for name in names:
            free[(cluster, name)] = 0.0
    return free


@dataclass(frozen=True, slots=True)
class Waiting:
    """The AIJobs a cycle left waiting, counted once per cycle for every GPU type: those
    that name no GPU type wait for every type, the others for the types they name."""

    any_type: int = 0
    by_type: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def waiting_for(self, gpu_type: str) -> int:
        """How many of them may run on ``gpu_type``: the user jobs a benchmark must not
        delay."""
        return self.any_type + self.by_type.get(gpu_type, 0)


def waiting(snapshot: Snapshot, plan: CyclePlan) -> Waiting:
    """Count the AIJobs ``plan`` left waiting, per GPU type they may run on."""
    allowed = {j.key: j.gpu_types for j in snapshot.pending}
    any_type = 0
    by_type: dict[str, int] = {}
    for hold in plan.holds:
        types = allowed.get(hold.job_key)
        if not types:
            any_type += 1
            continue
        for gpu_type in types:
            by_type[gpu_type] = by_type.get(gpu_type, 0) + 1
    return Waiting(any_type, MappingProxyType(by_type))


def waiting_for(snapshot: Snapshot, plan: CyclePlan, gpu_type: str) -> int:
    """How many AIJobs the cycle left waiting that may run on ``gpu_type`` (a job that names
    only other GPU types does not wait for it). One type; :func:`waiting` counts them all."""
    return waiting(snapshot, plan).waiting_for(gpu_type)


#: wait reasons of a job that lacks room (not quota, back-off, suspension, the window...)
ROOM_REASONS = frozenset(
    {WaitReason.Capacity, WaitReason.Priority, WaitReason.Reservation, WaitReason.Waiting}
)
#: GPUs a benchmark takes on its node
BENCHMARK_GPUS = 1.0


def preempting(
    snapshot: Snapshot,
    plan: CyclePlan,
    *,
    gpu_type: str,
    node_free_gpus: float | None,
) -> str | None:
    """The rule a running benchmark is preempted by: the key of the first AIJob (in queue
    order) the cycle left waiting for room (:data:`ROOM_REASONS`) that may run on
    ``gpu_type`` (the benchmark's node's) and one of whose workers fits on the node's free
    GPUs once the benchmark's GPU is back, but not on them alone (``node_free_gpus``: free
    on its node after the cycle's starts, the benchmark's GPU counted taken). None when no
    such job waits: the benchmark runs on. GPUs only: CPU and memory are not weighed."""
    if node_free_gpus is None or not gpu_type:
        return None
    free = max(node_free_gpus, 0.0)
    pending = {j.key: j for j in snapshot.pending}
    holds = sorted(plan.holds, key=lambda h: (h.position or 1 << 30, h.job_key))
    for hold in holds:
        job = pending.get(hold.job_key)
        if job is None or hold.reason not in ROOM_REASONS:
            continue
        per_worker = job.gpus / max(job.workers, 1)  # a fraction when GPUs are shared
        if job.allows(gpu_type) and free < per_worker <= free + BENCHMARK_GPUS:
            return job.key
    return None


#: a node is slow below this fraction of its peers' median samples/s
SLOW_RATIO = 0.85
#: how many other nodes of its GPU type must have a result of the model
SLOW_MIN_PEERS = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRate:
    """One node's latest benchmark result of one model (``source``: its GPUBenchmark)."""

    cluster: str
    node: str
    gpu_type: str
    model: str
    samples_per_s: float
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SlowNode:
    """A node's result the slow-node rule flags: its peers' median samples/s of the model,
    the ratio of the two, and how many peers the median is of."""

    rate: NodeRate
    peers_median: float
    ratio: float
    peers: int


def slow_nodes(
    rates: Iterable[NodeRate],
    *,
    ratio: float = SLOW_RATIO,
    min_peers: int = SLOW_MIN_PEERS,
) -> list[SlowNode]:
    """The rule: a node is slow for a model when its samples/s is below ``ratio`` times the
    median of the samples/s of that model on at least ``min_peers`` *other* nodes of its
    GPU type (each node's latest result; give one :class:`NodeRate` per node and model,
    a later one of the same node and model replaces an earlier one). Sorted by cluster,
    node, model."""
    latest: dict[tuple[str, str, str], NodeRate] = {}
    for rate in rates:
        if rate.samples_per_s > 0 and math.isfinite(rate.samples_per_s) and rate.gpu_type:
            latest[(rate.cluster, rate.node, rate.model)] = rate
    groups: dict[tuple[str, str], list[NodeRate]] = {}
    for rate in latest.values():
        groups.setdefault((rate.gpu_type, rate.model), []).append(rate)
    out: list[SlowNode] = []
    for group in groups.values():
        for rate in group:
            peers = [
                p.samples_per_s for p in group if (p.cluster, p.node) != (rate.cluster, rate.node)
            ]
            if len(peers) < min_peers:
                continue
            median = statistics.median(peers)
            if rate.samples_per_s < ratio * median:
                out.append(
                    SlowNode(
                        rate=rate,
                        peers_median=median,
                        ratio=rate.samples_per_s / median,
                        peers=len(peers),
                    )
                )
    return sorted(out, key=lambda s: (s.rate.cluster, s.rate.node, s.rate.model))
