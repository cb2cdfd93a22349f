"""The Grafana dashboard is valid JSON and queries only series the operator exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from cpn.runtime.metrics import OperatorMetrics

DASHBOARD = Path(__file__).parents[2] / "manifests" / "grafana-dashboard.json"


def exposed() -> set[str]:
    """Every sample name the operator's registry can produce."""
    names = set()
    for family in OperatorMetrics().registry.collect():
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
        }.get(family.type, ("",))
        names.update(family.name + s for s in suffixes)
    return names


def panels() -> list[dict[str, Any]]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def test_every_query_names_an_exposed_series() -> None:
    """No panel queries a cpn_ series the operator does not export (typos show as empty panels)."""
    known = exposed()
    used = set()
    for panel in panels():
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used.update(re.findall(r"\bcpn_[a-z_]+", target["expr"]))
    assert used, "the dashboard should query cpn_ series"
    assert used <= known, sorted(used - known)


def test_the_dashboard_covers_each_area() -> None:
    """Queues, waits, JCT, cycle time, solver, predictions and GPUs free each have a panel."""
    text = " ".join(t["expr"] for p in panels() for t in p["targets"])
    for series in (
        "cpn_queue_length",
        "cpn_queue_oldest_wait_seconds",
        "cpn_job_wait_seconds_bucket",
        "cpn_job_completion_seconds_bucket",
        "cpn_cycle_duration_seconds_bucket",
        "cpn_solver_runs_total",
        "cpn_prediction_error_ratio_bucket",
        "cpn_gpus_free",
        "cpn_member_ready",
        "cpn_dispatch_latency_seconds_bucket",
    ):
        assert series in text, series


def test_panel_ids_are_unique_and_panels_fit_the_grid() -> None:
    """Grafana needs unique ids; a 24-column grid holds every panel."""
    every = json.loads(DASHBOARD.read_text())["panels"]
    ids = [p["id"] for p in every]
    assert len(ids) == len(set(ids))
    for panel in every:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0
