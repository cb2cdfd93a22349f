"""`cpn queue` rows and table from AIJob objects as the operator writes them."""

from __future__ import annotations

from typing import Any

from cpn.cli.queue import render_table, rows_from


def item(name: str, phase: str, position: int | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-a"},
        "status": {
            "phase": phase,
            "position": position,
            "queue": "default",
            "user": "alice",
            "group": "vision",
            "gpus": 8,
            "predicted": "1h",
            **status,
        },
    }


def test_waiting_jobs_come_first_by_position_and_finished_ones_are_left_out():
    """Queued jobs by position, then running ones; Succeeded only with include_finished."""
    items = [
        item("run", "Running", cluster="member-a"),
        item("b", "Queued", 2),
        item("a", "Queued", 1, eta="12:00:00Z", reason="Capacity", message="needs 1 x 8 GPU(s)"),
        item("done", "Succeeded"),
    ]
    rows = rows_from(items)
    assert [r["aijob"] for r in rows] == ["team-a/a", "team-a/b", "team-a/run"]
    assert len(rows_from(items, include_finished=True)) == 4
    assert rows_from(items, queue="other") == []


def test_table_shows_position_eta_and_the_reason_message():
    """The table carries the facts a researcher asks for."""
    text = render_table(
        rows_from(
            [
                item(
                    "a",
                    "Queued",
                    1,
                    eta="12:00:00Z",
                    reason="Capacity",
                    message="needs 1 x 8 GPU(s)",
                )
            ]
        )
    )
    header, row = text.splitlines()
    assert header.split()[:4] == ["POSITION", "AIJOB", "USER", "GROUP"]
    assert row.split()[:5] == ["1", "team-a/a", "alice", "vision", "8"]
    assert "12:00:00Z" in row and "needs 1 x 8 GPU(s)" in row


def test_the_start_range_is_a_column_and_a_field():
    """A job with a start range shows it as clock times (by its latest bound when the
    earliest is imminent); -o json carries the status's own object."""
    span = {"earliest": "2026-11-22T12:00:00Z", "latest": "2026-11-22T13:30:00Z"}
    items = [
        item("a", "Queued", 1, eta="12:40:00Z", estimatedStartRange=span),
        item("b", "Queued", 2, eta="imminent", estimatedStartRange={"latest": span["latest"]}),
        item("c", "Queued", 3),
    ]
    rows = rows_from(items)
    assert rows[0]["estimatedStartRange"] == span and rows[2]["estimatedStartRange"] is None
    header, a, b, c = render_table(rows).splitlines()
    column = header.index("LIKELY-START")
    assert a[column:].split()[0] == "12:00:00Z-13:30:00Z"
    assert b[column:].split()[:2] == ["by", "13:30:00Z"]
    assert c[column:].split()[0] == "Queued"
