"""Table tests of plan_cycle: each names a scheduling behaviour a user relies on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cpn.core.cycle import plan_cycle
from cpn.core.model import Cluster, Node, WaitReason
from cpn.core.policy import (
    Aging,
    GroupQuota,
    Limit,
    Placement,
    QueuePolicy,
    Quotas,
    Reservation,
)
from cpn.core.presets import preset_policy
from tests.builders import cluster, job, nodes, running, snapshot

A100, V100 = "A100-80GB", "V100-32GB"


def two_types() -> tuple[Cluster, Cluster]:
    return (
        cluster("fast", nodes("fast", 1, gpu_type=A100, gpus=8)),
        cluster("slow", nodes("slow", 1, gpu_type=V100, gpus=8)),
    )


def hold_of(plan, key):
    return next(h for h in plan.holds if h.job_key == key)


def test_job_goes_where_it_finishes_soonest():
    """With room on both, a job starts on the GPU type with the shorter predicted runtime."""
    plan = plan_cycle(
        snapshot(jobs=[job("a", runtime_s={A100: 100, V100: 300})], clusters=two_types())
    )
    assert [(s.job_key, s.cluster, s.gpu_type) for s in plan.starts] == [("a", "fast", A100)]


def test_transfer_time_counts():
    """Data far away over a slow link makes the nearer, slower GPU finish sooner."""
    j = job("a", runtime_s={A100: 100, V100: 300}, data_cluster="slow", data_gb=100)
    snap = snapshot(jobs=[j], clusters=two_types(), bandwidth_gbps={"fast": {"slow": 1.0}})
    (start,) = plan_cycle(snap).starts
    assert start.cluster == "slow"
    assert start.transfer_s == 0.0


def test_unreachable_cluster_is_never_chosen():
    """A cluster with no link from the job's data is not a candidate."""
    j = job("a", runtime_s={A100: 100, V100: 300}, data_cluster="slow", data_gb=1)
    (start,) = plan_cycle(snapshot(jobs=[j], clusters=two_types())).starts
    assert start.cluster == "slow"


def test_multi_worker_job_stays_in_one_cluster():
    """Two 8-GPU workers never split across clusters, even when each has 8 free."""
    plan = plan_cycle(snapshot(jobs=[job("big", gpus=8, workers=2)], clusters=two_types()))
    assert plan.starts == ()
    assert hold_of(plan, "big").reason in {WaitReason.Capacity, WaitReason.Infeasible}


def test_multi_worker_job_gets_one_node_per_worker():
    """A 2x4 job on two 4-GPU nodes gets both nodes."""
    c = cluster("m", nodes("m", 2, gpus=4))
    (start,) = plan_cycle(snapshot(jobs=[job("w", gpus=4, workers=2)], clusters=[c])).starts
    assert sorted(start.nodes) == ["m-0", "m-1"]


def test_job_bigger_than_every_cluster_is_infeasible_with_numbers():
    """A job no cluster can ever hold is held as Infeasible, and the message says why."""
    plan = plan_cycle(snapshot(jobs=[job("huge", gpus=16)], clusters=two_types()))
    hold = hold_of(plan, "huge")
    assert hold.reason == WaitReason.Infeasible
    assert "16" in hold.message and "8 GPUs" in hold.message


def test_unknown_gpu_type_is_infeasible():
    """A job allowing only a GPU type no cluster has can never run."""
    plan = plan_cycle(
        snapshot(jobs=[job("h", gpu_types=frozenset({"H100-80GB"}))], clusters=two_types())
    )
    assert hold_of(plan, "h").reason == WaitReason.Infeasible


def test_infeasible_messages_name_the_largest_node_of_the_allowed_types():
    """Many infeasible jobs in one cycle (the scale bench's 1,000 on 10,000 nodes): each
    message names the biggest node among the GPU types that job allows, not another's."""
    clusters = [
        cluster("c1", nodes("c1", 3, gpu_type="A100-80GB", gpus=4)),
        cluster(
            "c2", nodes("c2", 2, gpu_type="V100-32GB", gpus=8), nodes("c2", 1, gpus=2, prefix="s")
        ),
    ]
    jobs = [job(f"a{i}", gpus=6, gpu_types=frozenset({"A100-80GB"})) for i in range(3)]
    jobs.append(job("v", gpus=16, gpu_types=frozenset({"V100-32GB"})))
    jobs.append(job("k", gpu_types=frozenset({"K80"})))
    plan = plan_cycle(snapshot(jobs=jobs, clusters=clusters))
    assert all(h.reason == WaitReason.Infeasible for h in plan.holds) and len(plan.holds) == 5
    assert "largest matching node has 4 GPUs" in hold_of(plan, "a2").message
    assert "largest matching node has 8 GPUs" in hold_of(plan, "v").message
    assert "largest matching node has 0 GPUs" in hold_of(plan, "k").message


def test_group_quota_holds_jobs_and_names_the_group():
    """A group at its quota waits with reason Quota, naming the group and the numbers."""
    policy = QueuePolicy(quotas=Quotas(groups={"team-a": GroupQuota(limit=Limit(gpus=8))}))
    jobs = [job("a1", gpus=8, group="team-a"), job("a2", gpus=8, group="team-a", submitted_s=1)]
    plan = plan_cycle(snapshot(jobs=jobs, clusters=two_types(), policy=policy))
    assert [s.job_key for s in plan.starts] == ["a1"]
    hold = hold_of(plan, "a2")
    assert hold.reason == WaitReason.Quota
    assert "team-a" in hold.message and "8" in hold.message


def test_user_quota_is_capped_inside_the_group():
    """A user's own limit applies even when the group still has room."""
    quota = GroupQuota(limit=Limit(gpus=16), users={"alice": Limit(gpus=4)})
    policy = QueuePolicy(quotas=Quotas(groups={"g": quota}))
    jobs = [
        job("x", gpus=4, group="g", user="alice"),
        job("y", gpus=4, group="g", user="alice", submitted_s=1),
    ]
    plan = plan_cycle(snapshot(jobs=jobs, clusters=two_types(), policy=policy))
    assert len(plan.starts) == 1
    assert "alice" in hold_of(plan, "y").message


def test_lending_lets_over_quota_jobs_use_idle_gpus():
    """With lending on, a group over its quota still runs on GPUs nobody else wants."""
    quotas = Quotas(groups={"g": GroupQuota(limit=Limit(gpus=4))}, lending=True)
    jobs = [job("x", gpus=4, group="g"), job("y", gpus=4, group="g", submitted_s=1)]
    plan = plan_cycle(snapshot(jobs=jobs, clusters=two_types(), policy=QueuePolicy(quotas=quotas)))
    assert {s.job_key for s in plan.starts} == {"x", "y"}


def test_per_type_quota_steers_to_another_type():
    """A per-GPU-type quota sends the job to a type its group still has room on."""
    limit = Limit(per_type={A100: 0})
    policy = QueuePolicy(quotas=Quotas(groups={"g": GroupQuota(limit=limit)}))
    plan = plan_cycle(
        snapshot(
            jobs=[job("a", group="g", runtime_s={A100: 10, V100: 30})],
            clusters=two_types(),
            policy=policy,
        )
    )
    assert [s.gpu_type for s in plan.starts] == [V100]


def _busy_cluster():
    """One 8-GPU node: 6 GPUs held until t=1000 by a running job."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[2]))
    r = running(job("r", gpus=6), "m", A100, ("m-0",), end_s=1000)
    return c, r


def test_big_job_gets_reservation_and_short_job_backfills():
    """A blocked big job is reserved at the predicted release; a job ending before it backfills."""
    c, r = _busy_cluster()
    policy = QueuePolicy(reservation=Reservation(min_gpus=8))
    jobs = [
        job("big", gpus=8, submitted_s=0, priority=1),
        job("short", gpus=2, submitted_s=1, runtime_s=500),
    ]
    plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], running_jobs=[r], policy=policy))
    big = hold_of(plan, "big")
    assert big.reserved_start_s == 1000
    assert big.reserved_end_s == 1000 + 3600  # its predicted runtime there, no transfer
    assert [s.job_key for s in plan.starts] == ["short"]


def test_backfill_that_would_delay_reservation_is_refused():
    """A job that would still run when the reservation starts may not take its nodes."""
    c, r = _busy_cluster()
    policy = QueuePolicy(reservation=Reservation(min_gpus=8))
    jobs = [job("big", gpus=8, priority=1), job("long", gpus=2, submitted_s=1, runtime_s=5000)]
    plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], running_jobs=[r], policy=policy))
    assert plan.starts == ()
    assert hold_of(plan, "long").reason == WaitReason.Reservation


def test_long_waiting_job_gets_reservation_whatever_its_size():
    """Past aging.max_wait_s even a small job is reserved (the starvation guard)."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[0]))
    r = running(job("r", gpus=8), "m", A100, ("m-0",), end_s=30000)
    snap = snapshot(
        jobs=[job("old", gpus=4, submitted_s=0)], clusters=[c], running_jobs=[r], now_s=7 * 3600
    )
    assert hold_of(plan_cycle(snap), "old").reserved_start_s == 30000


def test_strict_fifo_blocks_behind_the_head():
    """Under fifo, a head job that does not fit blocks smaller jobs behind it."""
    c, r = _busy_cluster()
    jobs = [job("head", gpus=8), job("small", gpus=1, submitted_s=1)]
    plan = plan_cycle(
        snapshot(jobs=jobs, clusters=[c], running_jobs=[r], policy=preset_policy("fifo"))
    )
    assert plan.starts == ()
    assert hold_of(plan, "small").reason == WaitReason.Priority
    assert "head" in hold_of(plan, "small").message


def test_sjf_orders_by_predicted_runtime():
    """Under sjf the shorter job gets the only free slot."""
    c = cluster("m", nodes("m", 1, gpus=4))
    jobs = [job("long", gpus=4, runtime_s=900), job("short", gpus=4, submitted_s=5, runtime_s=10)]
    plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], policy=preset_policy("sjf")))
    assert [s.job_key for s in plan.starts] == ["short"]
    assert hold_of(plan, "long").position == 2


def test_aging_lifts_a_long_job_over_newer_short_ones():
    """The default formula's aging term (with a rate: 0 by default) puts a job that waited
    long enough first."""
    c = cluster("m", nodes("m", 1, gpus=4))
    jobs = [
        job("old-long", gpus=4, runtime_s=2000, submitted_s=0),
        job("new-short", gpus=4, runtime_s=60, submitted_s=3000),
    ]
    aging = QueuePolicy(aging=Aging(rate=4.0))
    plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], now_s=3000, policy=aging))
    assert [s.job_key for s in plan.starts] == ["old-long"]


def test_suspended_and_backing_off_jobs_wait_with_their_reason():
    """Suspended jobs and jobs in retry backoff are held and say so."""
    jobs = [job("s", suspended=True), job("b", not_before_s=100, attempts=1)]
    plan = plan_cycle(snapshot(jobs=jobs, clusters=two_types(), now_s=10))
    assert plan.starts == ()
    assert hold_of(plan, "s").reason == WaitReason.Suspended
    assert hold_of(plan, "b").reason == WaitReason.Backoff


def test_node_above_cpu_ceiling_takes_no_work():
    """A node whose CPU utilisation is above the policy's ceiling is skipped."""
    hot = Node(
        cluster="m",
        name="hot",
        gpu_type=A100,
        gpus=8,
        free_gpus=8,
        cpu=64,
        free_cpu=64,
        memory_gib=512,
        free_memory_gib=512,
        gpu_memory_gib=80,
        cpu_util=0.95,
    )
    plan = plan_cycle(snapshot(jobs=[job("a")], clusters=[Cluster(name="m", nodes=(hot,))]))
    assert plan.starts == ()
    held = hold_of(plan, "a")
    assert held.reason == WaitReason.NodeLoad
    # the node and the cause are named, no measured figure (the message changes only with them)
    assert held.message == (
        "nodes with room for 1 x 1 GPU(s) take no new job (m/hot: CPU above the ceiling (0.7))"
    )
    relaxed = QueuePolicy(node_cpu_ceiling=None)
    assert plan_cycle(
        snapshot(jobs=[job("a")], clusters=[Cluster(name="m", nodes=(hot,))], policy=relaxed)
    ).starts


def test_a_job_held_off_unusable_nodes_is_told_which_and_why():
    """Each cause names its nodes (three, then how many more): a cluster not ready, a node
    cordoned; a node without room for the job is not named."""
    down = cluster("down", nodes("down", 5))
    up = cluster("up", nodes("up", 2, free=[8, 0]))
    cordoned = replace(up, nodes=(replace(up.nodes[0], schedulable=False), up.nodes[1]))
    plan = plan_cycle(
        snapshot(jobs=[job("a", gpus=8)], clusters=[replace(down, ready=False), cordoned])
    )
    held = hold_of(plan, "a")
    assert held.reason == WaitReason.NodeLoad
    assert held.message == (
        "nodes with room for 1 x 8 GPU(s) take no new job (down/down-0, down/down-1, "
        "down/down-2 and 2 more: its cluster not ready; up/up-0: not schedulable)"
    )


def test_not_ready_cluster_gets_no_work():
    """A cluster marked not ready is not placed on."""
    fast, slow = two_types()
    plan = plan_cycle(
        snapshot(
            jobs=[job("a", runtime_s={A100: 1, V100: 100})],
            clusters=[replace(fast, ready=False), slow],
        )
    )
    assert [s.cluster for s in plan.starts] == ["slow"]


def test_gpu_memory_requirement_filters_nodes():
    """A job asking 40 GiB per GPU does not land on 32 GiB cards."""
    c1 = cluster("small", nodes("small", 1, gpu_type=V100, gpu_memory_gib=32))
    c2 = cluster("big", nodes("big", 1, gpu_type=A100, gpu_memory_gib=80))
    j = job("mem", gpu_memory_gib=40, runtime_s={A100: 100, V100: 10})
    assert [s.cluster for s in plan_cycle(snapshot(jobs=[j], clusters=[c1, c2])).starts] == ["big"]


def test_shared_gpu_fractions_pack_onto_one_gpu():
    """Two half-GPU jobs share a node with one GPU."""
    c = cluster("m", nodes("m", 1, gpus=1))
    jobs = [job("h1", gpu_share=0.5), job("h2", gpu_share=0.5, submitted_s=1)]
    assert len(plan_cycle(snapshot(jobs=jobs, clusters=[c])).starts) == 2


def test_waits_for_a_much_faster_gpu_about_to_free():
    """When the fast GPU frees soon, waiting for it beats starting now on a slow one."""
    fast = cluster("fast", nodes("fast", 1, gpu_type=A100, gpus=8, free=[0]))
    slow = cluster("slow", nodes("slow", 1, gpu_type=V100, gpus=8))
    r = running(job("r", gpus=8), "fast", A100, ("fast-0",), end_s=60)
    j = job("a", runtime_s={A100: 1000, V100: 10000})
    policy = QueuePolicy(placement=Placement(wait_for_faster=True))
    plan = plan_cycle(snapshot(jobs=[j], clusters=[fast, slow], running_jobs=[r], policy=policy))
    assert plan.starts == ()
    assert hold_of(plan, "a").reason == WaitReason.Waiting


@pytest.mark.parametrize("others", [0, 1])
def test_waits_for_a_faster_gpu_no_longer_than_it_would_save(others: int):
    """A job waits for the faster GPU only while it has waited less than that GPU would
    save it; past that it takes the slow GPU that fits now (greedy path with no other
    job, the MILP's with one more job in the window)."""
    fast = cluster("fast", nodes("fast", 1, gpu_type=A100, gpus=8, free=[0]))
    slow = cluster("slow", nodes("slow", 2, gpu_type=V100, gpus=8))
    r = running(job("r", gpus=8), "fast", A100, ("fast-0",), end_s=110000)
    policy = QueuePolicy(placement=Placement(wait_for_faster=True))
    extra = [job(f"o{i}", submitted_s=1, runtime_s={V100: 50}) for i in range(others)]
    a = job("a", runtime_s={A100: 1000, V100: 100000})  # the A100 saves it 99,000 s

    def plan_at(now_s: float) -> tuple[str, ...]:
        snap = snapshot(
            jobs=[a, *extra], clusters=[fast, slow], running_jobs=[r], now_s=now_s, policy=policy
        )
        return tuple(s.cluster for s in plan_cycle(snap).starts if s.job_key == "a")

    # the A100 frees at 110,000 s: waiting for it is worth it at both instants, but at
    # 100,000 s the job has already waited longer than the A100 would save it
    assert plan_at(50000) == ()
    assert plan_at(100000) == ("slow",)


def test_work_conserving_by_default_starts_on_the_slower_gpu():
    """Without wait_for_faster, a job that fits somewhere starts now."""
    fast = cluster("fast", nodes("fast", 1, gpu_type=A100, gpus=8, free=[0]))
    slow = cluster("slow", nodes("slow", 1, gpu_type=V100, gpus=8))
    r = running(job("r", gpus=8), "fast", A100, ("fast-0",), end_s=60)
    j = job("a", runtime_s={A100: 1000, V100: 10000})
    plan = plan_cycle(snapshot(jobs=[j], clusters=[fast, slow], running_jobs=[r]))
    assert [s.cluster for s in plan.starts] == ["slow"]


@pytest.mark.parametrize("checkpoint", [True, False])
def test_las_preempts_the_job_with_most_service_only_if_it_checkpoints(checkpoint: bool):
    """Under las a fresh job preempts a running job that already received a lot of
    service, when that job checkpoints; one that would lose all its work is never stopped."""
    c = cluster("m", nodes("m", 1, gpus=4, free=[0]))
    veteran = job("veteran", gpus=4, checkpoint=checkpoint)
    r = running(veteran, "m", A100, ("m-0",), start_s=0, end_s=99999)
    snap = snapshot(
        jobs=[job("fresh", gpus=4, submitted_s=10000)],
        clusters=[c],
        running_jobs=[r],
        now_s=10000,
        policy=preset_policy("las"),
    )
    plan = plan_cycle(snap)
    expected = [("veteran", "fresh")] if checkpoint else []
    assert [(p.job_key, p.for_key) for p in plan.preemptions] == expected


def test_milp_places_jointly_better_than_greedy_order():
    """The MILP gives the flexible job the slower GPU so the A100-only job can start too."""
    fast = cluster("fast", nodes("fast", 1, gpu_type=A100, gpus=8))
    slow = cluster("slow", nodes("slow", 1, gpu_type=V100, gpus=8))
    flexible = job("flex", gpus=8, runtime_s={A100: 100, V100: 120})
    picky = job("picky", gpus=8, submitted_s=1, runtime_s={A100: 100}, gpu_types=frozenset({A100}))
    plan = plan_cycle(snapshot(jobs=[flexible, picky], clusters=[fast, slow]))
    assert {(s.job_key, s.gpu_type) for s in plan.starts} == {("flex", V100), ("picky", A100)}
    assert plan.stats.method == "milp"


def test_holds_carry_queue_positions_in_order():
    """Every waiting job gets its 1-based position in the queue."""
    c = cluster("m", nodes("m", 1, gpus=1))
    jobs = [job(f"j{i}", submitted_s=i) for i in range(4)]
    plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], policy=preset_policy("fifo")))
    assert [s.job_key for s in plan.starts] == ["j0"]
    assert [(h.job_key, h.position) for h in plan.holds] == [("j1", 2), ("j2", 3), ("j3", 4)]


@pytest.mark.parametrize("name", ["fifo", "sjf", "oracle", "las", "gavel", "default"])
def test_every_preset_starts_a_job_on_an_empty_cluster(name):
    """Each named policy starts a fitting job when the cluster is empty."""
    plan = plan_cycle(snapshot(jobs=[job("a")], clusters=two_types(), policy=preset_policy(name)))
    assert [s.job_key for s in plan.starts] == ["a"]


def _free_for_all() -> tuple[Cluster, list]:
    """Two free 8-GPU nodes; an old 16-GPU long job and a new short 1-GPU one."""
    c = cluster("m", nodes("m", 2, gpus=8))
    jobs = [
        job("big", gpus=8, workers=2, submitted_s=0, runtime_s=100_000),
        job("small", gpus=1, submitted_s=50, runtime_s=60),
    ]
    return c, jobs


@pytest.mark.parametrize(("claim", "want"), [(False, ["small"]), (True, ["big"])])
def test_reserved_big_job_keeps_the_room_that_frees(claim, want):
    """With claim_big a big job keeps free room; without, a higher-ranked small job takes it."""
    c, jobs = _free_for_all()
    # Greedy placement: the MILP would weigh the 16-GPU job's deferral above the 1-GPU one's.
    policy = QueuePolicy(
        reservation=Reservation(claim_big=claim), placement=Placement(method="greedy")
    )
    plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], now_s=100, policy=policy))
    assert [s.job_key for s in plan.starts] == want


@pytest.mark.parametrize("method", ["milp", "greedy"])
def test_small_jobs_ranked_after_a_bigger_one_do_not_take_its_room(method):
    """Deferring a 4-GPU job costs what deferring four 1-GPU jobs of its rank would: four
    1-GPU jobs ranked just after it may not take the 4 free GPUs it fits (Gavel's b436b2
    had a 0.38 h 4-GPU job wait 118 h that way)."""
    c = cluster("m", nodes("m", 1, gpus=4))
    jobs = [job("four", gpus=4, submitted_s=0, runtime_s=100)]
    jobs += [job(f"one{i}", gpus=1, submitted_s=1 + i, runtime_s=100) for i in range(4)]
    policy = QueuePolicy(ordering="fifo", placement=Placement(method=method))
    plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], now_s=10, policy=policy))
    assert [s.job_key for s in plan.starts] == ["four"]


@pytest.mark.parametrize(("drain_s", "want"), [(None, ["new"]), (3600.0, ["old"])])
def test_draining_job_claims_room_whatever_its_size(drain_s, want):
    """A job past drain_after_s claims the room it fits; before, a higher-ranked job takes it."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[4]))
    jobs = [
        job("old", gpus=4, submitted_s=0, runtime_s=100_000),
        job("new", gpus=1, submitted_s=7000, runtime_s=60),
    ]
    policy = QueuePolicy(reservation=Reservation(drain_after_s=drain_s, drain_ratio=1.5))
    plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], now_s=7200, policy=policy))
    assert [s.job_key for s in plan.starts] == want


def test_no_draining_when_the_whole_queue_waits_as_long():
    """A job waiting less than drain_ratio x the mean pending wait does not drain."""
    c = cluster("m", nodes("m", 1, gpus=8, free=[4]))
    jobs = [
        job("old", gpus=4, submitted_s=0, runtime_s=100_000),
        job("new", gpus=1, submitted_s=1000, runtime_s=60),
    ]
    policy = QueuePolicy(reservation=Reservation(drain_after_s=3600, drain_ratio=1.5))
    plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], now_s=7200, policy=policy))
    assert [s.job_key for s in plan.starts] == ["new"]


def test_draining_jobs_hold_reservations_before_big_ones():
    """Draining jobs are served first when reservations are scarce."""
    c = cluster("m", nodes("m", 2, gpus=8, free=[0, 0]))
    r = running(job("r", gpus=8, workers=2), "m", A100, ("m-0", "m-1"), end_s=20_000)
    jobs = [
        job("big", gpus=8, workers=2, submitted_s=200),
        job("old", gpus=4, submitted_s=0),
    ]
    policy = QueuePolicy(
        reservation=Reservation(max_reservations=1, drain_after_s=3600, drain_ratio=0)
    )
    plan = plan_cycle(
        snapshot(jobs=jobs, clusters=[c], running_jobs=[r], now_s=3700, policy=policy)
    )
    assert hold_of(plan, "old").reserved_start_s == 20_000
    assert hold_of(plan, "big").reserved_start_s is None


def test_without_backfill_nothing_starts_on_reserved_nodes():
    """backfill: false keeps even a job that ends in time off a reservation's nodes."""
    c, r = _busy_cluster()
    policy = QueuePolicy(reservation=Reservation(min_gpus=8, backfill=False))
    jobs = [
        job("big", gpus=8, submitted_s=0, priority=1),
        job("short", gpus=2, submitted_s=1, runtime_s=500),
    ]
    plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], running_jobs=[r], policy=policy))
    assert plan.starts == ()
    assert hold_of(plan, "short").reason == WaitReason.Reservation


def _stream(policy: QueuePolicy, horizon_s: float) -> float | None:
    """Cycles every 50 s on one 4-GPU node fed a 1-GPU, 200 s job every 50 s (it stays
    full); returns when the 4-GPU, 100,000 s job submitted at 0 starts (None: never)."""
    step, short_s = 50.0, 200.0
    pending = [job("long", gpus=4, submitted_s=0, runtime_s=100_000)]
    pending += [job(f"s{i:04d}", gpus=1, submitted_s=0, runtime_s=short_s) for i in range(4)]
    runs: list = []
    now, arrivals = 0.0, 0
    while now <= horizon_s:
        runs = [r for r in runs if r.predicted_end_s > now]
        busy = sum(r.job.gpus for r in runs)
        c = cluster("m", nodes("m", 1, gpus=4, free=[4 - busy]))
        snap = snapshot(jobs=pending, clusters=[c], running_jobs=runs, now_s=now, policy=policy)
        plan = plan_cycle(snap)
        by_key = {j.key: j for j in pending}
        for s in plan.starts:
            if s.job_key == "long":
                return now
            end = now + s.predicted_runtime_s
            runs.append(running(by_key[s.job_key], "m", A100, s.nodes, start_s=now, end_s=end))
        started = {s.job_key for s in plan.starts}
        pending = [j for j in pending if j.key not in started]
        arrivals += 1
        now += step
        pending.append(job(f"n{arrivals:04d}", gpus=1, submitted_s=now, runtime_s=short_s))
    return None


def test_draining_bounds_the_wait_of_a_job_always_passed_over():
    """Without draining a long 4-GPU job never starts under a stream of short ones; with it,
    it starts by drain_after_s plus the runtime of what runs on its node (plus one cycle)."""
    quiet = Aging(max_wait_s=None)
    off = QueuePolicy(aging=quiet, reservation=Reservation(drain_after_s=None))
    assert _stream(off, horizon_s=4000) is None
    on = QueuePolicy(aging=quiet, reservation=Reservation(drain_after_s=1000))
    started = _stream(on, horizon_s=4000)
    assert started is not None and 1000 <= started <= 1000 + 200 + 50


@pytest.mark.parametrize(
    ("fresh_runtime_s", "shorter_by", "preempted"),
    [
        (10_000.0, 2.0, True),  # a quarter of the victim's remaining time: worth a restart
        (30_000.0, 2.0, False),  # ranks above, but not twice as short: no swap
        (30_000.0, 1.0, True),  # shorter_by 1: rank and price alone decide
    ],
)
def test_preemption_needs_a_job_shorter_by_the_policy_factor(
    fresh_runtime_s: float, shorter_by: float, preempted: bool
):
    """Under the formula a waiting job preempts a checkpointing one only when it is expected
    to end ``shorter_by`` times sooner than the victim's remaining time, so two long jobs do
    not swap places over and over."""
    from cpn.core.policy import Preemption

    c = cluster("m", nodes("m", 1, gpus=4, free=[0]))
    veteran = job("veteran", gpus=4, runtime_s=40_000.0, checkpoint=True)
    r = running(veteran, "m", A100, ("m-0",), start_s=0, end_s=40_000)
    rules = Preemption(enabled=True, shorter_by=shorter_by)
    snap = snapshot(
        jobs=[job("fresh", gpus=4, runtime_s=fresh_runtime_s, submitted_s=1000)],
        clusters=[c],
        running_jobs=[r],
        now_s=1000,
        policy=QueuePolicy(name="p", preemption=rules),
    )
    plan = plan_cycle(snap)
    want = [("veteran", "fresh")] if preempted else []
    assert [(p.job_key, p.for_key) for p in plan.preemptions] == want


@pytest.mark.parametrize(("min_gpus", "preempted"), [(16, False), (32, True)])
def test_a_victim_that_would_reserve_its_room_back_is_not_preempted(min_gpus: int, preempted: bool):
    """A checkpointing job of at least reservation.min_gpus would take a reservation once
    requeued and claim its room straight back: preempting it frees nothing for anyone."""
    from cpn.core.policy import Preemption

    c = cluster("m", nodes("m", 2, gpus=8, free=[0, 0]))
    big = job("big", gpus=8, workers=2, runtime_s=40_000.0, checkpoint=True)
    r = running(big, "m", A100, ("m-0", "m-1"), start_s=0, end_s=40_000)
    policy = QueuePolicy(
        name="p",
        preemption=Preemption(enabled=True, min_run_s=0),
        reservation=Reservation(min_gpus=min_gpus),
    )
    snap = snapshot(
        jobs=[job("short", gpus=8, workers=2, runtime_s=600.0, submitted_s=1000)],
        clusters=[c],
        running_jobs=[r],
        now_s=1000,
        policy=policy,
    )
    want = [("big", "short")] if preempted else []
    assert [(p.job_key, p.for_key) for p in plan_cycle(snap).preemptions] == want


@pytest.mark.parametrize(
    ("around", "blocker_end_s", "preempted"),
    [
        (False, 5_000.0, False),  # a reservation in the group forbids preemption there
        (True, 5_000.0, True),  # due later, it keeps its nodes: the room beside is free to take
        (True, 1_000.0, False),  # due now: it would move to the freed room
    ],
)
def test_preemption_around_a_reservation_due_later(
    around: bool, blocker_end_s: float, preempted: bool
):
    """``preemption.around_reservations``: a big job reserves the two nodes whose jobs end
    first; a short job may stop the checkpointing job on the third node only where that
    reservation is due later (it keeps its own nodes), never where it is due now."""
    from cpn.core.policy import Preemption

    c = cluster("m", nodes("m", 3, gpus=4, free=[0, 0, 0]))
    veteran = job("veteran", gpus=4, runtime_s=40_000.0, checkpoint=True)
    ones = [job(f"blocker{i}", gpus=4, runtime_s=blocker_end_s) for i in (1, 2)]
    runs = [
        running(veteran, "m", A100, ("m-0",), start_s=0, end_s=40_000),
        *(
            running(b, "m", A100, (f"m-{i}",), start_s=0, end_s=blocker_end_s)
            for i, b in zip((1, 2), ones, strict=True)
        ),
    ]
    big = job("big", gpus=4, workers=2, runtime_s=2_000.0, submitted_s=0)
    fresh = job("fresh", gpus=4, runtime_s=1_000.0, submitted_s=1000)
    policy = QueuePolicy(
        name="p",
        preemption=Preemption(enabled=True, min_run_s=0, around_reservations=around),
        reservation=Reservation(min_gpus=8),
    )
    snap = snapshot(jobs=[big, fresh], clusters=[c], running_jobs=runs, now_s=1000, policy=policy)
    plan = plan_cycle(snap)
    assert hold_of(plan, "big").reserved_start_s == blocker_end_s
    want = [("veteran", "fresh")] if preempted else []
    assert [(p.job_key, p.for_key) for p in plan.preemptions] == want


@pytest.mark.parametrize("around", [False, True])
def test_a_victim_that_would_reserve_only_for_its_wait_is_stopped_around_reservations(
    around: bool,
):
    """A checkpointing job that waited past aging.max_wait_s before it started would reserve
    once requeued: never stopped for rank, unless ``around_reservations`` (its reservation
    is for its wait only, not its size or a drain)."""
    from cpn.core.policy import Preemption

    c = cluster("m", nodes("m", 1, gpus=4, free=[0]))
    veteran = job("veteran", gpus=4, runtime_s=90_000.0, checkpoint=True, submitted_s=0)
    r = running(veteran, "m", A100, ("m-0",), start_s=25_200, end_s=115_200)
    policy = QueuePolicy(
        name="p", preemption=Preemption(enabled=True, min_run_s=0, around_reservations=around)
    )
    fresh = job("fresh", gpus=4, runtime_s=1_000.0, submitted_s=30_000)
    snap = snapshot(jobs=[fresh], clusters=[c], running_jobs=[r], now_s=30_000, policy=policy)
    want = [("veteran", "fresh")] if around else []
    assert [(p.job_key, p.for_key) for p in plan_cycle(snap).preemptions] == want


@pytest.mark.parametrize(
    ("waited_before_s", "protect", "preempted"),
    [
        (0.0, 0.5, True),  # never waited: rank decides
        (6_000.0, 0.5, False),  # waited 6,000 s of FIFO's longest 10,000 before it started
        (6_000.0, 0.7, True),  # under 0.7 of it
        (6_000.0, None, True),  # option off
    ],
)
def test_a_victim_that_waited_a_share_of_fifos_longest_wait_is_not_preempted_for_rank(
    waited_before_s: float, protect: float | None, preempted: bool
):
    """preemption.protect_waited_share: a checkpointing job that waited that share of FIFO's
    longest wait (the widest budget of the pending jobs: 10,000 s) before its attempt is not
    stopped for a shorter job; requeued, it would have only the rest of the limit left."""
    from cpn.core.policy import Preemption

    c = cluster("m", nodes("m", 1, gpus=4, free=[0]))
    submitted = 20_000.0 - waited_before_s
    veteran = job(
        "veteran", gpus=4, runtime_s=40_000.0, checkpoint=True, submitted_s=submitted,
        fifo_due_s=submitted + 30_000.0, fifo_calibrated_due_s=submitted + 30_000.0,
    )  # fmt: skip
    r = running(veteran, "m", A100, ("m-0",), start_s=20_000.0, end_s=60_000.0)
    policy = QueuePolicy(
        name="p",
        preemption=Preemption(enabled=True, protect_waited_share=protect),
        reservation=Reservation(drain_after_s=None),
    )
    fresh = job("fresh", gpus=4, runtime_s=600.0, submitted_s=21_000.0, fifo_due_s=31_000.0)
    snap = snapshot(jobs=[fresh], clusters=[c], running_jobs=[r], now_s=21_000.0, policy=policy)
    want = [("veteran", "fresh")] if preempted else []
    assert [(p.job_key, p.for_key) for p in plan_cycle(snap).preemptions] == want


def test_a_preempted_jobs_running_time_is_not_waiting():
    """aging.max_wait_s counts waiting only: a job submitted 10 h ago that ran 9 h of it
    has waited 1 h and takes no long-wait reservation (6 h) yet."""
    from cpn.core.capacity import Capacity
    from cpn.core.quota import QuotaLedger
    from cpn.core.reservations import Reservations

    policy = QueuePolicy(name="p", aging=Aging(max_wait_s=6 * 3600))
    ran = job("ran", gpus=4, attained_gpu_s=4 * 9 * 3600.0)
    fresh = job("waited", gpus=4)
    snap = snapshot(jobs=[ran, fresh], clusters=[], now_s=10 * 3600, policy=policy)
    capacity, quota = Capacity.from_snapshot(snap), QuotaLedger(policy, ())
    reservations = Reservations(snap, capacity, quota, cands_of=lambda _: [])
    assert reservations.waited(ran) == pytest.approx(3600)
    assert not reservations.reserves(ran) and reservations.reserves(fresh)


@pytest.mark.parametrize(
    ("share", "now_h", "want"),
    [(0.0, 7, True), (0.25, 7, False), (0.25, 11, True), (0.1, 7, True)],
)
def test_max_wait_fifo_share_scales_the_long_wait_guard_to_fifos_longest_wait(
    share: float, now_h: float, want: bool
):
    """aging.max_wait_fifo_share: with FIFO's longest wait budget 40 h, a share of 0.25 makes
    the guard 10 h (a job that waited 7 h does not reserve for its wait, one that waited
    11 h does); a share giving less than max_wait_s (0.1: 4 h) leaves the 6 h guard."""
    from cpn.core.capacity import Capacity
    from cpn.core.policy import Reservation
    from cpn.core.quota import QuotaLedger
    from cpn.core.reservations import Reservations

    policy = QueuePolicy(
        name="p",
        aging=Aging(max_wait_s=6 * 3600, max_wait_fifo_share=share),
        reservation=Reservation(drain_fifo=False, drain_after_s=None),
    )
    waited = job("waited", gpus=4, submitted_s=0, fifo_due_s=40 * 3600.0)
    fleet = [cluster("m", nodes("m", 2, gpus=8))]
    snap = snapshot(jobs=[waited], clusters=fleet, now_s=now_h * 3600, policy=policy)
    capacity, quota = Capacity.from_snapshot(snap), QuotaLedger(policy, ())
    reservations = Reservations(snap, capacity, quota, cands_of=lambda _: [])
    assert reservations.wait_guard_s == max(6 * 3600, share * 40 * 3600)
    assert reservations.reserves(waited) == want


def test_a_higher_priority_job_preempts_whatever_its_runtime():
    """shorter_by compares runtimes only between jobs of one priority: a higher-priority
    job preempts on rank and price alone, even when it is expected to run as long."""
    from cpn.core.policy import Preemption

    c = cluster("m", nodes("m", 1, gpus=4, free=[0]))
    veteran = job("veteran", gpus=4, runtime_s=40_000.0, checkpoint=True)
    r = running(veteran, "m", A100, ("m-0",), start_s=0, end_s=40_000)
    urgent = job("urgent", gpus=4, runtime_s=40_000.0, submitted_s=1000, priority=5)
    policy = QueuePolicy(
        name="p", preemption=Preemption(enabled=True), quotas=Quotas(max_priority=None)
    )
    snap = snapshot(jobs=[urgent], clusters=[c], running_jobs=[r], now_s=1000, policy=policy)
    assert [(p.job_key, p.for_key) for p in plan_cycle(snap).preemptions] == [("veteran", "urgent")]


def test_a_cycle_is_freed_by_reference_counting_alone():
    """plan_cycle leaves no reference cycle behind: its working state (candidates, holds,
    reservations) goes as soon as it returns, not at the next cyclic collection. A bound
    method kept by the reservations once kept several dead cycles alive at once (13 MiB with
    10,000 waiting jobs)."""
    import gc

    from cpn.core import cycle as cycle_module

    c, r = _busy_cluster()
    policy = QueuePolicy(reservation=Reservation(min_gpus=8))
    jobs = [job("big", gpus=8, priority=1), job("short", gpus=2, submitted_s=1, runtime_s=500)]
    gc.collect()
    gc.disable()
    try:
        plan = plan_cycle(snapshot(jobs=jobs, clusters=[c], running_jobs=[r], policy=policy))
        alive = [o for o in gc.get_objects() if type(o) is cycle_module._Cycle]
    finally:
        gc.enable()
    assert hold_of(plan, "big").reserved_start_s == 1000  # the reservation path ran
    assert alive == []


@pytest.mark.parametrize(
    ("no_bigger", "priority", "victim"),
    [(False, 0, "wide"), (True, 0, "narrow"), (True, 5, "wide")],
)
def test_no_bigger_victims_stops_only_jobs_the_waiting_job_can_replace(
    no_bigger: bool, priority: int, victim: str
):
    """``preemption.no_bigger_victims``: a 1-GPU job ranked above two checkpointing jobs
    stops the 4-GPU one (ranked lowest: most GPU-time left) unless the option holds it to
    victims of at most its own GPUs; then it stops the 1-GPU one. A job of higher priority
    is not held to it."""
    from cpn.core.policy import Preemption

    c = cluster("m", nodes("m", 2, gpus=4, free=[0, 0]))
    wide = job("wide", gpus=4, runtime_s=40_000.0, checkpoint=True)
    narrow = job("narrow", gpus=1, runtime_s=40_000.0, checkpoint=True)
    filler = job("filler", gpus=3, runtime_s=40_000.0)
    runs = [
        running(wide, "m", A100, ("m-0",), start_s=0, end_s=40_000),
        running(narrow, "m", A100, ("m-1",), start_s=0, end_s=40_000),
        running(filler, "m", A100, ("m-1",), start_s=0, end_s=40_000),
    ]
    fresh = job("fresh", gpus=1, runtime_s=1_000.0, submitted_s=1000, priority=priority)
    policy = QueuePolicy(
        name="p",
        preemption=Preemption(enabled=True, min_run_s=0, no_bigger_victims=no_bigger),
        quotas=Quotas(max_priority=None),
    )
    snap = snapshot(jobs=[fresh], clusters=[c], running_jobs=runs, now_s=1000, policy=policy)
    assert [(p.job_key, p.for_key) for p in plan_cycle(snap).preemptions] == [(victim, "fresh")]
