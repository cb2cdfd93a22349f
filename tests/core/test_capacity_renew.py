"""A capacity carried from one projected cycle to the next (cpn.core.capacity_renew) is in
the very state Capacity.from_snapshot makes, and the projection is the same with it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpn.core.capacity import Capacity, GroupKey, _place
from cpn.core.capacity_renew import Renewing
from cpn.core.eta import project, project_range
from cpn.core.model import Job, Snapshot
from tests.builders import job
from tests.core.test_eta_focus import POLICIES, random_snapshot
from tests.core.test_properties import snapshots


def state(capacity: Capacity) -> Any:
    """Everything a cycle reads of a capacity, as plain values."""
    slots = [
        (
            key,
            s.name,
            s.usable,
            s.free_gpus,
            s.free_cpu,
            s.free_memory_gib,
            s.jobs,
            s.alone_key,
            s.alone_until,
            tuple(capacity.releases(s)),
        )
        for key, group in capacity.groups.items()
        for s in group
    ]
    return (
        slots,
        capacity.now_s,
        sorted(capacity._running),
        sorted(capacity._alone),
        sorted(capacity._alone_groups),
        capacity._dirty,
    )


class Checked(Renewing):
    """Renewing that checks each capacity it hands out against one made anew."""

    made: ClassVar[list[Checked]] = []  # every instance, for the test to read

    def __init__(self) -> None:
        super().__init__()
        Checked.made.append(self)

    def __call__(self, snapshot: Snapshot) -> Capacity:
        capacity = super().__call__(snapshot)
        assert state(capacity) == state(Capacity.from_snapshot(snapshot))
        return capacity


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[Checked]:
    Checked.made = []
    monkeypatch.setattr("cpn.core.capacity_renew.Renewing", Checked)
    return Checked.made


@pytest.mark.parametrize("method", ["greedy", "milp"])
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_renewed_capacity_is_the_one_made_anew(name, method, checked):
    """Every projected cycle's capacity equals Capacity.from_snapshot's (free resources,
    jobs, alone marks, releases at the instant), the projection (point and range) equals
    the one with capacities made anew, and most capacities were renewed, not made (but
    while a job runs alone)."""
    for seed in range(3 if method == "greedy" else 1):
        snap = random_snapshot(seed * 17 + len(name), POLICIES[name], pending=20 + 8 * seed)
        snap = replace(
            snap,
            policy=replace(snap.policy, placement=replace(snap.policy.placement, method=method)),
        )
        expected = project_range(snap, max_cycles=150, renew=False)
        assert expected, "the snapshot projects some job"
        assert project_range(snap, max_cycles=150) == expected, f"seed {seed}"
        assert project(snap, max_cycles=150, focus=False) == project(
            snap, max_cycles=150, focus=False, renew=False
        )
    renewed, built = sum(r.renewed for r in checked), sum(r.built for r in checked)
    if not POLICIES[name].placement.first_of_model_alone:  # (jobs alone: made anew)
        assert renewed > built > 0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_projection_with_renewed_capacity_equals_the_plain_one(snap: Snapshot) -> None:
    """On random snapshots (every preset, quotas, reservations, unready clusters, busy
    nodes), the projection is bit for bit the same with and without renewing."""
    assert project_range(snap, max_cycles=60) == project_range(snap, max_cycles=60, renew=False)


def test_a_node_changed_beyond_its_free_resources_makes_it_anew():
    """A node whose capacity itself changed (not just what is free) is not renewed over."""
    snap = random_snapshot(3, POLICIES["default"], pending=4)
    renewing = Renewing()
    first = renewing(snap)
    cluster = snap.clusters[0]
    node = replace(cluster.nodes[0], schedulable=False)
    changed = replace(
        snap, clusters=(replace(cluster, nodes=(node, *cluster.nodes[1:])), *snap.clusters[1:])
    )
    second = renewing(changed)
    assert (renewing.built, renewing.renewed) == (2, 0) and second is not first
    assert not second.slot(cluster.name, node.name).usable
    assert renewing(changed) is second and renewing.renewed == 1


def test_a_start_of_the_last_cycle_is_undone():
    """What a cycle took on the capacity is given back when it is renewed for the next
    snapshot (the projection's own start comes back as a running job, not as a take)."""
    snap = random_snapshot(5, POLICIES["default"], pending=4)
    renewing = Renewing()
    capacity = renewing(snap)
    slot = next(s for group in capacity.groups.values() for s in group if s.free_gpus >= 1)
    capacity.take(job("x", gpus=1), slot.key, (slot.name,), until_s=snap.now_s + 10)
    assert state(capacity) != state(Capacity.from_snapshot(snap))
    renewed = renewing(replace(snap, now_s=snap.now_s + 5))
    assert renewed is capacity and renewing.renewed == 1
    assert state(renewed) == state(Capacity.from_snapshot(replace(snap, now_s=snap.now_s + 5)))


def _earliest_by_every_instant(
    capacity: Capacity,
    job: Job,
    key: GroupKey,
    now: float,
    from_empty: bool,
    exclude: frozenset[str] = frozenset(),
) -> tuple[float, tuple[str, ...]] | None:
    """Capacity.earliest_fit (a job not alone, no node held alone) as it was: _place tried
    at every instant a release comes."""
    slots = [s for s in capacity.groups.get(key, ()) if s.usable and s.name not in exclude]
    zero = [0.0, 0.0, 0.0]
    free = {
        s.name: list(zero) if from_empty else [s.free_gpus, s.free_cpu, s.free_memory_gib]
        for s in slots
    }
    events = sorted((r[0], s.name, *r[1:]) for s in slots for r in capacity.releases(s))
    if not from_empty:
        placed = _place(job, slots, {k: list(v) for k, v in free.items()})
        if placed is not None:
            return now, placed
    index = 0
    while index < len(events):
        instant = events[index][0]
        while index < len(events) and events[index][0] <= instant + 1e-9:
            _, name, gpus, cpu, mem = events[index]
            free[name] = [free[name][0] + gpus, free[name][1] + cpu, free[name][2] + mem]
            index += 1
        placed = _place(job, slots, {k: list(v) for k, v in free.items()})
        if placed is not None:
            return instant, placed
    return None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.booleans())
def test_earliest_fit_is_the_first_instant_place_fits(snap: Snapshot, from_empty: bool) -> None:
    """earliest_fit skips the instants where too few workers fit on the nodes, and answers
    what trying _place at every instant answers; also after starts taken (the releases it
    keeps per group are made again)."""
    capacity = Capacity.from_snapshot(snap)
    for round in range(2):
        for pending in snap.pending:
            for key in capacity.groups:
                expected = _earliest_by_every_instant(
                    capacity, pending, key, snap.now_s, from_empty
                )
                found = capacity.earliest_fit(pending, key, snap.now_s, from_empty=from_empty)
                assert found == expected, f"round {round}"
                exclude = frozenset(s.name for s in capacity.groups[key][:1])
                assert capacity.earliest_fit(
                    pending, key, snap.now_s, from_empty=from_empty, exclude=exclude
                ) == _earliest_by_every_instant(
                    capacity, pending, key, snap.now_s, from_empty, exclude
                )
        for pending in snap.pending:  # the queue starts where it fits, ending at various times
            for key in capacity.groups:
                nodes = capacity.fit(pending, key)
                if nodes is not None:
                    until = snap.now_s + pending.submit_s + 1.0
                    capacity.take(pending, key, nodes, until_s=until)
                    break


def test_a_job_running_alone_makes_each_capacity_anew(checked):
    """While a job runs alone on its node the capacity is made anew for every projected
    cycle (its node's hold ends at an instant that moves with the clock), same projection."""
    snap = random_snapshot(7, POLICIES["first-of-model-alone"], pending=12)
    first = replace(snap.running[0], alone=True)
    snap = replace(snap, running=(first, *snap.running[1:]))
    assert project(snap, max_cycles=100, focus=False) == project(
        snap, max_cycles=100, focus=False, renew=False
    )
    (renewing,) = checked
    assert renewing.built > 1 and renewing.renewed < renewing.built
