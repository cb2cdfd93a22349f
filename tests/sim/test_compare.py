"""The Philly comparison's checks and table (pure parts of ``cpn simulate philly``)."""

from __future__ import annotations

import pytest

from cpn.sim.compare import (
    SUITES,
    TARGETS,
    jobs_of,
    markdown,
    over_seeds,
    split,
    suite,
    summarise,
    verdict,
)


def m(avg_jct_s, max_wait_s, finished=10, jobs=10, p99=None, pre=0, lost=0.0):
    return {
        "avg_jct_s": avg_jct_s,
        "max_wait_s": max_wait_s,
        "p99_wait_s": max_wait_s if p99 is None else p99,
        "finished": finished,
        "jobs": jobs,
        "preemptions": pre,
        "lost_gpu_h": lost,
    }


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


def test_target_depends_on_the_share():
    """70% of oracle's gain passes with no job checkpointing, not with half of them."""
    rows = {"fifo": m(100, 50), "oracle": m(60, 40), "default": m(70, 45)}
    assert verdict(rows, TARGETS[0.0])["recovered_ok"] is True
    assert verdict(rows, TARGETS[0.5])["recovered_ok"] is False
    assert verdict(rows, None)["recovered_ok"] is True  # a share without a target: reported only


def test_markdown_has_a_table_per_share_and_a_row_per_trace():
    """One table per checkpointable share; each row has every policy's JCT and waits, the
    preempting policies' preemptions and lost GPU-hours, and the checks."""
    policies = ["fifo", "oracle", "las", "default"]
    zero = {
        "fifo": m(7200, 3600, p99=1800),
        "oracle": m(3600, 3600),
        "las": m(5400, 7200),
        "default": m(3960, 1800),
    }
    half = dict(zero, default=m(3700, 1800, pre=4, lost=1.5), las=m(5000, 7200, pre=9, lost=2.25))
    results = {
        "vc1": {
            0.0: {"metrics": zero, "verdict": verdict(zero, TARGETS[0.0])},
            0.5: {"metrics": half, "verdict": verdict(half, TARGETS[0.5])},
        }
    }
    text = markdown(results, policies)
    rows = [line for line in text.splitlines() if line.startswith("| vc1 ")]
    assert len(rows) == 2
    assert rows[0] == (
        "| vc1 | 10 | 2.00 / 0.50 / 1.00 | 1.00 / 1.00 / 1.00 | 1.50 / 2.00 / 2.00 "
        "| 1.10 / 0.50 / 0.50 | 0 / 0 | 0 / 0 | 90% | yes | yes |"
    )
    assert rows[1].endswith("| 9 / 2.25 | 4 / 1.5 | 97% | yes | yes |")
    assert "Checkpointable share 0.5:" in text


def test_suites_name_existing_files():
    """Every trace of every suite has its trace and cluster file, and names are unique."""
    traces = [t for name in SUITES for t in suite(name)]
    assert len({t.name for t in traces}) == len(traces) == 14
    for t in traces:
        assert t.path.is_file() and t.clusters.is_file(), t
    assert all(t.unlabelled for t in suite("gavel-unlabelled"))
    with pytest.raises(ValueError, match="unknown suite"):
        suite("nope")


def test_windows_carry_no_model():
    """The Philly windows are what a real cluster sees: no job names a model."""
    from cpn.sim.trace import read_trace

    for t in suite("windows"):
        jobs = read_trace(t.path)
        assert len(jobs) > 900 and not any(j.model for j in jobs)


def test_split_cuts_a_trace_into_consecutive_windows():
    """``--split 3``: every job in exactly one part, in submit order, each part's clock
    starting at its first job, the gaps between its jobs kept."""
    from cpn.sim.trace import read_trace

    trace = next(t for t in suite("windows") if t.name == "philly-sep")
    whole = read_trace(trace.path)
    parts = split(trace, 3)
    assert [p.name for p in parts] == [f"philly-sep.{i}of3" for i in (1, 2, 3)]
    cut = [jobs_of(p) for p in parts]
    assert [j.job_id for part in cut for j in part] == [j.job_id for j in whole]
    assert max(len(c) for c in cut) - min(len(c) for c in cut) <= 1
    offset = len(cut[0])
    for i, job in enumerate(cut[1]):
        assert job.submit_s == whole[offset + i].submit_s - whole[offset].submit_s
    assert cut[1][0].submit_s == 0.0 and cut[0] == whole[: len(cut[0])]
    assert split(trace, 1) == [trace] and jobs_of(trace) == whole


def test_over_seeds_takes_the_worst_seed():
    """Several seeds: the least recovered share and its median; a check passes only if it
    passes on every seed, and the table says on how many the wait held."""
    fifo, oracle = m(100, 50), m(60, 40)
    runs = [
        {"fifo": fifo, "oracle": oracle, "default": m(64, 45)},  # 90%, within fifo's wait
        {"fifo": fifo, "oracle": oracle, "default": m(70, 55)},  # 75%, past it
        {"fifo": fifo, "oracle": oracle, "default": m(66, 50)},  # 85%, equal to it
    ]
    check = over_seeds([verdict(r, TARGETS[0.0]) for r in runs])
    assert check == {
        "recovered": 0.75,
        "recovered_median": 0.85,
        "recovered_ok": True,
        "max_wait_ok": False,
        "max_wait_ok_seeds": 2,
        "seeds": 3,
        "all_finished": True,
    }
    rows = summarise(runs)
    assert rows["default"]["avg_jct_s"] == 66  # median
    assert rows["default"]["max_wait_s"] == 55  # worst
    results = {
        "vc1": {
            0.0: {
                "verdict": check,
                "seeds": {
                    str(i): {"metrics": r, "verdict": verdict(r)} for i, r in enumerate(runs)
                },
            }
        }
    }
    text = markdown(results, ["fifo", "oracle", "default"])
    assert "median avg JCT / median p99 wait / worst max wait" in text
    row = next(line for line in text.splitlines() if line.startswith("| vc1 "))
    assert "| 0.02 / 0.01 / 0.02 |" in row  # default, hours: 66 s median JCT, p99 50 s, worst 55 s
    assert row.endswith("| 75% worst, 85% median | NO (held on 2 of 3 seeds) | yes |")


def test_split_below_one_is_refused(capsys):
    from cpn.sim.compare import main

    with pytest.raises(SystemExit) as exc:
        main(["--suites", "windows", "--split", "0"])
    assert exc.value.code == 2
    assert "--split: at least 1, not 0" in capsys.readouterr().err
