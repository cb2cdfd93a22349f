"""The simulator check with models missing from the benchmark table (bench script, small)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from cpn.sim.clusters import read_clusters
from cpn.sim.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """bench/bench_predictor_sim.py imported as a module."""
    path = ROOT / "bench" / "bench_predictor_sim.py"
    spec = importlib.util.spec_from_file_location("bench_predictor_sim", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_held_out_models_are_flagged_then_learned_online(bench):
    """Jobs of unbenchmarked models start unseen; the predictor learns them from finished jobs."""
    trace = sorted(read_trace(bench.DEFAULT_TRACE), key=lambda j: (j.submit_s, j.job_id))[:80]
    clusters = read_clusters(bench.DEFAULT_CLUSTERS)
    holdout = frozenset({"transformer", "resnet50"})
    metrics, rec, truth = bench.run_holdout(trace, clusters, holdout, retrain_every=10)
    assert metrics["finished"] == metrics["jobs"] == len(trace)
    held = [j for j in trace if j.model in holdout]
    assert rec.order == [j.job_id for j in held]
    assert rec.first[rec.order[0]].unseen
    assert not rec.first[rec.order[-1]].unseen
    assert rec.inner.retrains >= 1
    errors = bench.estimate_errors(rec, trace, truth)
    assert errors["held_out_jobs"] == len(held)
    assert errors["second_half_median_ape"] < errors["first_half_median_ape"]
    # waiting held-out jobs were re-estimated as the predictor learned
    assert errors["reestimates"] == rec.reestimates > 0
    assert set(rec.at_start) == set(rec.order)
