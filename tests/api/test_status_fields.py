"""What a waiting AIJob's status shows: places in its queue and start instants.

Properties over random queues: positions are exactly 1..n per queue in the cycle's
order, whatever started; no start instant shown is in the past, at the write or at
any read before the write the operator schedules next.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cpn.api.aijob import parse_time
from cpn.api.status import IMMINENT, IMMINENT_S, queue_positions, start_fields
from cpn.core.cycle import plan_cycle
from cpn.core.model import Snapshot
from tests.core.test_properties import PROPERTY, snapshots

QUEUES = ("a", "b", "c")


def assert_one_to_n(places: dict[str, int], queue_of: dict[str, str]) -> None:
    for queue in set(queue_of.values()):
        got = sorted(p for key, p in places.items() if queue_of[key] == queue)
        assert got == list(range(1, len(got) + 1)), (queue, got)


@settings(max_examples=300)
@given(st.lists(st.tuples(st.text("xyz", min_size=1, max_size=3), st.sampled_from(QUEUES))))
def test_positions_are_one_to_n_per_queue_in_the_given_order(order: list[tuple[str, str]]):
    places = queue_positions(order)
    first = {}
    for key, queue in order:
        first.setdefault(key, queue)
    assert set(places) == set(first)
    assert_one_to_n(places, first)
    ranked = list(dict.fromkeys(key for key, _ in order))  # first appearance
    for queue in QUEUES:
        mine = [key for key in ranked if first[key] == queue]
        assert [places[key] for key in mine] == list(range(1, len(mine) + 1))


@PROPERTY
@given(snapshots(), st.data())
def test_positions_from_a_plan_skip_this_cycles_starts(snap: Snapshot, data: st.DataObject):
    """The plan's ranks count the jobs started in the cycle and rank all queues together
    (holes and shared numbers per queue); renumbered, each queue reads 1..n, in rank order."""
    plan = plan_cycle(snap)
    queue_of = {j.key: data.draw(st.sampled_from(QUEUES)) for j in snap.pending}
    ranked = [h for h in plan.holds if h.position]
    places = queue_positions((h.job_key, queue_of[h.job_key]) for h in ranked)
    started = {s.job_key for s in plan.starts}
    assert not started & set(places)
    assert_one_to_n(places, {k: queue_of[k] for k in places})
    for queue in QUEUES:
        mine = [h.job_key for h in ranked if queue_of[h.job_key] == queue]  # in rank order
        assert [places[key] for key in mine] == list(range(1, len(mine) + 1))


instants = st.none() | st.floats(-1e5, 1e5)


@settings(max_examples=500)
@given(instants, instants, instants, st.floats(1.6e9, 1.9e9), st.floats(0, 1))
def test_no_start_shown_is_ever_before_the_read(start, low, high, now, later):
    """At the write, and at any read until the re-render the write asks for, every instant
    shown is in the future; a start that near or past reads "imminent", never an instant."""
    start, low, high = (None if x is None else now + x for x in (start, low, high))
    fields, again = start_fields(start, low, high, now)
    shown = [fields["estimatedStart"], *(fields["estimatedStartRange"] or {}).values()]
    epochs = [parse_time(s) for s in shown if s is not None]
    if not epochs:
        assert again is None
    else:
        assert again is not None and now < again
        read = now + later * (again - now)  # any moment up to the re-render
        assert all(e is not None and e > read for e in epochs)
    if start is None:
        assert fields["eta"] is None and fields["estimatedStart"] is None
    elif start <= now + IMMINENT_S:
        assert fields["eta"] == IMMINENT and fields["estimatedStart"] is None
    else:
        assert fields["estimatedStart"] is not None
        assert fields["eta"] == fields["estimatedStart"][11:]  # HH:MM:SSZ of the same instant
    span = fields["estimatedStartRange"]
    if span is not None:
        assert "latest" in span
        if "earliest" in span:
            assert span["earliest"] <= span["latest"]


def test_a_range_is_shown_only_while_its_latest_bound_is_ahead():
    """Far bounds show both; an earliest bound within the window is left out; a latest
    one that near drops the range."""
    now = 1.8e9
    both, _ = start_fields(now + 600, now + 300, now + 1200, now)
    assert both["estimatedStartRange"] == {
        "earliest": "2027-01-15T08:05:00Z",
        "latest": "2027-01-15T08:20:00Z",
    }
    assert both["estimatedStart"] == "2027-01-15T08:10:00Z" and both["eta"] == "08:10:00Z"
    near, again = start_fields(now + 600, now + 10, now + 1200, now)
    assert near["estimatedStartRange"] == {"latest": "2027-01-15T08:20:00Z"}
    assert again == now + 600 - IMMINENT_S
    again_fields, _ = start_fields(now + 600, now + 10, now + 1200, again)
    assert again_fields["eta"] == IMMINENT and again_fields["estimatedStart"] is None
    gone, again = start_fields(now + 5, now + 1, now + 20, now)
    assert gone["estimatedStartRange"] is None and gone["eta"] == IMMINENT and again is None
