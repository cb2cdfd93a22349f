"""The predictor learns from GPUBenchmark results: rows join its table, it retrains, and the
measured type is predicted from the measurement; the rows are kept with node, time, versions."""

from __future__ import annotations

from types import MappingProxyType

from predictor.history import BenchmarkRecord, History
from predictor.jobs import JobFacts
from predictor.online import OnlinePredictor

SAMPLES = 1_281_167.0


def resnet50() -> JobFacts:
    features = {"batch_size": 64.0, "dataset_samples": SAMPLES, "epochs": 1.0}
    return JobFacts(key="r", model="resnet50", features=MappingProxyType(features))


def record(
    model: str = "resnet50", gpu: str = "H100-80GB", rate: float = 2710.0
) -> BenchmarkRecord:
    return BenchmarkRecord(
        source="member-a-h100-0",
        node="h100-0",
        measured_at=1_700_000_000.0,
        model=model,
        gpu_type=gpu,
        batch_size=64,
        samples_per_s=rate,
        precision="bf16",
        versions=MappingProxyType({"workload": "0.1.0", "torch": "2.5.1"}),
    )


def test_a_benchmark_moves_an_unseen_types_estimate_to_the_measurement() -> None:
    predictor = OnlinePredictor(retrain="sync")
    truth = SAMPLES / 2710.0
    before = predictor.predict(resnet50(), ["H100-80GB"]).runtime_s["H100-80GB"]
    assert abs(before / truth - 1) > 0.10  # the catalog's guess for a type never measured
    assert predictor.learn_benchmarks([record()]) == 1
    after = predictor.predict(resnet50(), ["H100-80GB"]).runtime_s["H100-80GB"]
    assert abs(after / truth - 1) <= 0.10
    assert predictor.retrains == 1


def test_rows_are_kept_with_node_time_and_versions_and_unknown_ones_left_out() -> None:
    history = History()
    predictor = OnlinePredictor(retrain="off", history=history)
    taken = predictor.learn_benchmarks([record(), record(model="gpt9"), record(gpu="B300")])
    assert taken == 1
    (kept,) = history.benchmarks()
    assert (kept.node, kept.measured_at, kept.source) == (
        "h100-0",
        1_700_000_000.0,
        "member-a-h100-0",
    )
    assert dict(kept.versions) == {"workload": "0.1.0", "torch": "2.5.1"}
    assert predictor.retrains == 0  # retrain="off": the table has the row, the model waits


def test_results_read_back_are_not_kept_twice() -> None:
    history = History()
    OnlinePredictor(retrain="off", history=history).learn_benchmarks([record()], keep=False)
    assert history.benchmarks() == []
