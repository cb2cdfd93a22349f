"""The data cache in the core: transfers charge only absent inputs, one cycle's starts share
a staging, and the eviction rule (issue 20)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from cpn.core.cycle import plan_cycle
from cpn.core.datacache import after_start, capacity_gb, evict, needed
from cpn.core.model import Cached, DataInput, Job, Snapshot, Start
from cpn.core.policy import DataPolicy, QueuePolicy
from cpn.core.transfer import staging, transfer_s
from tests.builders import cluster, job, nodes, running, snapshot

#: 80 GB over 8 Gbps: 80 s.
IMAGENET = DataInput(name="imagenet", version="v2", size_gb=80.0, location="a")
LINKS = MappingProxyType({"a": MappingProxyType({"b": 8.0})})


def _snap(
    *jobs: Job, cache: dict[str, dict[str, Cached]] | None = None, now_s: float = 0.0
) -> Snapshot:
    """Clusters a and b (one 8-GPU node each), linked at 8 Gbps, with ``cache``."""
    return snapshot(
        jobs=jobs,
        clusters=[cluster("a", nodes("a", 1)), cluster("b", nodes("b", 1))],
        bandwidth_gbps=LINKS,
        data_cache=MappingProxyType(cache or {}),
        now_s=now_s,
    )


def test_an_absent_input_is_moved_from_its_location() -> None:
    """Absent from b, the 80 GB input costs 80 s at 8 Gbps and is moved; on a it is home."""
    snap = _snap(j := job("j", inputs=(IMAGENET,)))
    assert staging(j, "b", snap) == staging(j, "b", snap)
    found = staging(j, "b", snap)
    assert found is not None and found.seconds == 80.0 and found.moves == ("imagenet@v2",)
    assert transfer_s(j, "a", snap) == 0.0


def test_a_present_input_costs_nothing_and_one_being_staged_its_wait() -> None:
    """Held on b: 0 s, nothing moved; still being staged (ready in 30 s): 30 s, nothing moved."""
    j = job("j", inputs=(IMAGENET,))
    done = {"b": {"imagenet@v2": Cached(size_gb=80.0, last_used_s=0.0, ready_s=5.0)}}
    found = staging(j, "b", _snap(j, cache=done, now_s=10.0))
    assert found is not None and (found.seconds, found.moves) == (0.0, ())
    coming = staging(j, "b", _snap(j, cache=done, now_s=-25.0))
    assert coming is not None and (coming.seconds, coming.moves) == (30.0, ())


def test_another_version_is_another_input() -> None:
    """v1 held on b does not spare moving v2."""
    j = job("j", inputs=(IMAGENET,))
    old = {"b": {"imagenet@v1": Cached(size_gb=80.0, last_used_s=0.0)}}
    assert transfer_s(j, "b", _snap(j, cache=old)) == 80.0


def test_no_link_from_the_location_makes_the_cluster_unreachable() -> None:
    """An input on a cluster with no link to b cannot reach b."""
    far = replace(IMAGENET, location="c")
    assert transfer_s(job("j", inputs=(far,)), "b", _snap()) is None


def test_an_input_without_location_moves_nothing() -> None:
    """Where it is unknown, cpn charges and moves nothing for it."""
    found = staging(job("j", inputs=(replace(IMAGENET, location=None),)), "b", _snap())
    assert found is not None and (found.seconds, found.moves) == (0.0, ())


def test_own_moves_add_up_and_waits_overlap_them() -> None:
    """Two absent inputs are moved one after the other; a staging it waits on runs beside."""
    small = DataInput(name="vocab", size_gb=8.0, location="a")  # 8 s
    j = job("j", inputs=(IMAGENET, small))
    assert transfer_s(j, "b", _snap(j)) == 88.0
    found = staging(j, "b", _snap(j), {("b", "imagenet@v2"): 50.0})
    assert found is not None and (found.seconds, found.moves) == (50.0, ("vocab",))


def test_locality_aware_placement_runs_where_the_data_is() -> None:
    """With the same GPUs free on a and b, the job runs on a, its data's home: no transfer."""
    j = job("j", inputs=(IMAGENET,))
    plan = plan_cycle(_snap(j))
    assert [(s.cluster, s.transfer_s, s.staged) for s in plan.starts] == [("a", 0.0, ())]


def test_locality_blind_placement_still_reports_the_transfer() -> None:
    """Blind placement chooses without the transfer, but a start on b still says 80 s."""
    blind = QueuePolicy(data=DataPolicy(locality=False))
    j = job("j", inputs=(IMAGENET,), gpu_types=frozenset({"V100-32GB"}))
    snap = snapshot(
        jobs=[j],
        clusters=[cluster("a", nodes("a", 1)), cluster("b", nodes("b", 1, gpu_type="V100-32GB"))],
        bandwidth_gbps=LINKS,
        policy=blind,
    )
    (start,) = plan_cycle(snap).starts
    assert (start.cluster, start.transfer_s, start.staged) == ("b", 80.0, ("imagenet@v2",))


def test_two_starts_in_one_cycle_share_one_staging() -> None:
    """Two jobs that must run on b and read the same absent input: one moves it, the other
    moves nothing and its data is ready when the first's is."""
    only_b = frozenset({"V100-32GB"})
    jobs = [job(k, gpus=4, inputs=(IMAGENET,), gpu_types=only_b) for k in ("x", "y")]
    snap = snapshot(
        jobs=jobs,
        clusters=[cluster("a", nodes("a", 1)), cluster("b", nodes("b", 1, gpu_type="V100-32GB"))],
        bandwidth_gbps=LINKS,
    )
    starts = plan_cycle(snap).starts
    assert sorted(s.transfer_s for s in starts) == [80.0, 80.0]
    assert sorted(s.staged for s in starts) == [(), ("imagenet@v2",)]


def test_after_start_holds_the_moved_inputs_and_marks_reads() -> None:
    """The moved input is held, complete when the staging ends; a held one read is used now."""
    other = DataInput(name="bert", size_gb=1.0, location="a")
    j = job("j", inputs=(IMAGENET, other))
    cache = {"bert": Cached(size_gb=1.0, last_used_s=3.0)}
    start = Start(
        job_key="j",
        cluster="b",
        gpu_type="A100-80GB",
        nodes=("b-0",),
        predicted_runtime_s=1.0,
        transfer_s=80.0,
        staged=("imagenet@v2",),
    )
    out = after_start(cache, j, start, 100.0)
    assert out["imagenet@v2"] == Cached(size_gb=80.0, last_used_s=100.0, ready_s=180.0)
    assert out["bert"].last_used_s == 100.0


def test_eviction_drops_the_least_recently_used_unneeded_first() -> None:
    """Over 100 GB: the oldest input no job reads goes; a needed older one stays."""
    cache = {
        "old-needed": Cached(size_gb=60.0, last_used_s=1.0),
        "old": Cached(size_gb=30.0, last_used_s=2.0),
        "new": Cached(size_gb=30.0, last_used_s=3.0),
    }
    assert set(evict(cache, 100.0, {"old-needed"})) == {"old-needed", "new"}
    assert evict(cache, None, ()) == cache


def test_capacity_comes_from_the_policy() -> None:
    """A listed cluster has its own capacity; the others the default (None: unlimited)."""
    policy = QueuePolicy(data=DataPolicy(cache_gb=MappingProxyType({"a": 10.0})))
    assert (capacity_gb(policy, "a"), capacity_gb(policy, "b")) == (10.0, None)


def test_needed_counts_the_inputs_read_by_jobs_on_the_cluster() -> None:
    """Jobs on b need their moved inputs there; a job on a (the home) reads nothing cached."""
    j = job("j", inputs=(IMAGENET,))
    on_b = running(j, "b", "A100-80GB", ("b-0",))
    on_a = running(replace(j, key="k"), "a", "A100-80GB", ("a-0",))
    assert needed([on_b, on_a], "b") == {"imagenet@v2"}
    assert needed([on_a], "a") == frozenset()


_ENTRIES = st.dictionaries(
    st.text("abcdef", min_size=1, max_size=3),
    st.builds(
        Cached,
        size_gb=st.floats(0.0, 100.0),
        last_used_s=st.floats(0.0, 1000.0),
    ),
    max_size=12,
)


@given(_ENTRIES, st.floats(0.0, 300.0), st.data())
def test_eviction_keeps_the_needed_and_fits_the_capacity(
    cache: dict[str, Cached], capacity: float, data: st.DataObject
) -> None:
    """Whatever the cache: every needed input stays, what is kept is a subset, and it holds
    at most the capacity unless the needed inputs alone exceed it (then only they stay)."""
    wanted = data.draw(st.sets(st.sampled_from(sorted(cache) or ["-"])))
    kept = evict(cache, capacity, wanted)
    assert all(kept[k] == cache[k] for k in kept)
    assert {k for k in wanted if k in cache} <= set(kept)
    total = sum(c.size_gb for c in kept.values())
    needed_gb = sum(cache[k].size_gb for k in wanted if k in cache)
    assert total <= capacity + 1e-9 or set(kept) <= set(wanted)
    assert total <= max(capacity, needed_gb) + 1e-6


@given(_ENTRIES, st.floats(0.0, 300.0))
def test_eviction_keeps_the_most_recently_used(cache: dict[str, Cached], capacity: float) -> None:
    """Nothing evicted was used more recently than something kept (LRU, nothing needed)."""
    kept = evict(cache, capacity, ())
    gone = set(cache) - set(kept)
    if gone and kept:
        assert max(cache[k].last_used_s for k in gone) <= min(c.last_used_s for c in kept.values())


_POOL = [DataInput(name=f"d{k}", size_gb=10.0 * k, location=at) for k in (1, 2, 3) for at in "ab"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(_POOL), max_size=3, unique_by=lambda i: i.name), max_size=6),
    st.sets(st.sampled_from(["d1", "d2", "d3"])),
)
def test_a_cycle_moves_each_input_to_a_cluster_at_most_once(
    needs: list[list[DataInput]], held_on_b: set[str]
) -> None:
    """Whatever the jobs read and b holds: no input is staged twice on one cluster in one
    plan, nothing held or already home is staged, and a start's transfer covers the moves."""
    jobs = [job(f"j{i}", gpus=2, inputs=tuple(reads)) for i, reads in enumerate(needs)]
    cache = {"b": {ident: Cached(size_gb=1.0, last_used_s=0.0) for ident in held_on_b}}
    snap = _snap(*jobs, cache=cache)
    seen: set[tuple[str, str]] = set()
    by_key = {j.key: j for j in jobs}
    for start in plan_cycle(snap).starts:
        homes = {i.ident: i.location for i in by_key[start.job_key].inputs}
        for ident in start.staged:
            assert (start.cluster, ident) not in seen
            seen.add((start.cluster, ident))
            assert homes[ident] != start.cluster
            assert ident not in cache.get(start.cluster, {})
        alone = transfer_s(by_key[start.job_key], start.cluster, snap)
        assert alone is not None and start.transfer_s >= 0.0
        assert not start.staged or start.transfer_s > 0.0
