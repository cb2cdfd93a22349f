"""The Philly comparison's checks and table (pure parts of ``cpn simulate philly``)."""

from __future__ import annotations

import pytest

from cpn.sim.compare import markdown, verdict


def m(avg_jct_s: float, max_wait_s: float, finished: int = 10, jobs: int = 10) -> dict[str, float]:
    return {"avg_jct_s": avg_jct_s, "max_wait_s": max_wait_s, "finished": finished, "jobs": jobs}


@pytest.mark.parametrize(
    ("rows", "want"),
    [
        pytest.param(
            {"fifo": m(100, 50), "oracle": m(60, 40), "default": m(66, 45)},
            {"recovered": 0.85, "recovered_ok": True, "max_wait_ok": True, "all_finished": True},
            id="recovers 85% and waits less",
        ),
        pytest.param(
            {"fifo": m(100, 50), "oracle": m(60, 40), "default": m(80, 51)},
            {"recovered": 0.5, "recovered_ok": False, "max_wait_ok": False, "all_finished": True},
            id="recovers half and starves a job",
        ),
        pytest.param(
            {"fifo": m(100, 50), "oracle": m(100, 40), "default": m(90, 50, finished=9)},
            {"recovered": None, "recovered_ok": True, "max_wait_ok": True, "all_finished": False},
            id="oracle no better than fifo; a job unfinished",
        ),
    ],
)
def test_verdict(rows, want):
    """Recovered share of oracle's gain, the max-wait check and the all-finished check."""
    assert verdict(rows) == want


def test_markdown_has_a_row_per_trace():
    """The table has a header, a separator and one row per trace with the checks."""
    rows = {"fifo": m(7200, 3600), "oracle": m(3600, 3600), "default": m(3960, 1800)}
    text = markdown(
        {"vc1": {"metrics": rows, "verdict": verdict(rows)}}, ["fifo", "oracle", "default"]
    )
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[2].startswith("| vc1 | 10 | 2.00 | 1.00 | 1.10 | 1.00 | 0.50 | 90% | yes | yes |")
