"""A member's readiness from its probe results over time (cpn.core.health)."""

from __future__ import annotations

from functools import reduce

from hypothesis import given
from hypothesis import strategies as st

from cpn.core.health import Health, Probe, Probes, health

GRACE = 5.0
OVERDUE = 6.0


def fold(*probes: Probe) -> Probes:
    return reduce(Probes.add, probes, Probes())


def at(probes: Probes, now_s: float) -> Health:
    return health(probes, now_s, grace_s=GRACE, overdue_s=OVERDUE)


def test_no_probe_yet_is_not_ready():
    verdict = at(Probes(), 100.0)
    assert (verdict.ready, verdict.reason, verdict.since_s) == (False, "NotProbed", None)


def test_answering_probes_are_ready():
    verdict = at(fold(Probe(True, 0.0), Probe(True, 2.0)), 3.0)
    assert verdict == Health(True, None, "Answers", "")


def test_misses_within_the_grace_keep_the_member_ready():
    probes = fold(Probe(True, 0.0), Probe(False, 2.0, "timeout"), Probe(False, 4.0, "timeout"))
    verdict = at(probes, 6.9)
    assert verdict.ready and verdict.reason == "Missing"


def test_misses_past_the_grace_are_not_ready_since_the_first_miss_with_the_error():
    """Ready=False from first miss + grace on; since = the first miss (what the requeue
    timeout counts from), the message carries the latest probe's error."""
    probes = fold(
        Probe(True, 0.0),
        Probe(False, 2.0, "GET /readyz: timed out"),
        Probe(False, 4.0, "GET /readyz: timed out"),
        Probe(False, 6.0, "GET /readyz: connection refused"),
    )
    assert at(probes, 6.99).ready
    verdict = at(probes, 7.0)
    assert not verdict.ready
    assert verdict.since_s == 2.0
    assert verdict.reason == "Unreachable"
    assert "connection refused" in verdict.message and "5s" in verdict.message


def test_one_answer_ends_a_run_of_misses_and_the_next_run_counts_afresh():
    probes = fold(Probe(False, 0.0, "x"), Probe(False, 6.0, "x"), Probe(True, 8.0))
    assert at(probes, 8.5).ready
    probes = probes.add(Probe(False, 10.0, "y"))
    assert at(probes, 14.9).ready  # 4.9 s after the new first miss, not 14.9 s
    late = at(probes, 15.0)
    assert not late.ready and late.since_s == 10.0


def test_a_probe_overdue_counts_as_missed_from_when_it_became_overdue():
    """A prober that stops handing results (stuck itself) cannot keep the member ready."""
    probes = fold(Probe(True, 0.0))
    assert at(probes, OVERDUE + GRACE - 0.01).ready
    verdict = at(probes, OVERDUE + GRACE)
    assert not verdict.ready
    assert verdict.since_s == OVERDUE
    assert "no probe result" in verdict.message


def test_a_result_older_than_the_latest_is_ignored():
    probes = fold(Probe(False, 10.0, "x"), Probe(True, 4.0))
    assert probes.first_miss_s == 10.0 and probes.last_s == 10.0


@given(
    st.lists(
        st.tuples(st.booleans(), st.floats(min_value=0.1, max_value=5.0)),
        min_size=1,
        max_size=40,
    ),
    st.floats(min_value=0.0, max_value=10.0),
)
def test_not_ready_exactly_when_every_probe_for_the_grace_failed(
    steps: list[tuple[bool, float]], extra: float
) -> None:
    """Against the definition: ready at ``now`` unless the probes of the current run of
    misses began at least ``grace`` before (results arrive before they are overdue)."""
    probes, t = Probes(), 0.0
    sent: list[Probe] = []
    for ok, gap in steps:
        t += gap
        probe = Probe(ok, t, "" if ok else f"miss at {t}")
        sent.append(probe)
        probes = probes.add(probe)
    now = t + min(extra, OVERDUE - 0.01)
    run = []
    for probe in reversed(sent):
        if probe.ok:
            break
        run.append(probe)
    verdict = at(probes, now)
    if run and now - run[-1].at_s >= GRACE:
        assert not verdict.ready and verdict.since_s == run[-1].at_s
        assert run[0].error in verdict.message
    else:
        assert verdict.ready and verdict.since_s is None
