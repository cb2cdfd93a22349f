"""The discrete-event world with a tiny hand-made plan function: pure unit tests."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pytest
from simkit import clusters, greedy_plan, no_transfer, tjob

from cpn.core.estimator import Estimator
from cpn.core.model import CyclePlan, Estimate, Hold, Job, Preempt, Snapshot, Start, WaitReason
from cpn.core.policy import Preemption, QueuePolicy
from cpn.sim.estimators import OracleEstimator
from cpn.sim.jobs import truth_for, worker_shape
from cpn.sim.world import InvalidPlan, World

POLICY = QueuePolicy(name="test")


def world(jobs, cl=None, plan=greedy_plan, **kw) -> World:
    cl = cl or clusters()
    truth = truth_for(jobs, cl.reference_gpu)
    kw.setdefault("transfer", no_transfer)
    estimator = kw.pop("estimator", None) or OracleEstimator(truth)
    return World(jobs, cl, kw.pop("policy", POLICY), estimator, truth=truth, plan=plan, **kw)


def by_id(result):
    return {r.job_id: r for r in result.records}


@pytest.mark.parametrize(
    ("gpus", "largest", "want"),
    [
        pytest.param(1, 4, (1, 1, 1.0), id="one GPU"),
        pytest.param(8, 4, (4, 2, 1.0), id="two full nodes"),
        pytest.param(6, 4, (3, 2, 1.0), id="largest divisor that fits"),
        pytest.param(7, 4, (1, 7, 1.0), id="prime: one GPU per worker"),
        pytest.param(4, 8, (4, 1, 1.0), id="fits one node"),
        pytest.param(0.5, 4, (1, 1, 0.5), id="shared GPU"),
    ],
)
def test_worker_shape(gpus, largest, want):
    """GPUs per worker is the largest divisor of the job's GPUs that fits the largest node."""
    assert worker_shape(gpus, largest) == want


def test_lone_job_runs_its_duration():
    """On an idle reference-GPU cluster a job's JCT is its duration and it never waits."""
    result = world([tjob("a", submit_s=10, duration_s=500)]).run()
    rec = by_id(result)["a"]
    assert (rec.first_start_s, rec.finish_s, rec.jct_s, rec.wait_s) == (10, 510, 500, 0)


def test_runtime_scales_to_the_gpu_type_it_runs_on():
    """A job measured on V100 runs slower on a K80 by the catalog's throughput ratio."""
    from cpn.sim.speed import throughput_ratio

    cl = clusters({"k": [(1, "K80", 4)]})
    rec = by_id(world([tjob("a", duration_s=1000, model="resnet50", batch_size=64)], cl).run())["a"]
    ratio = throughput_ratio("resnet50", 64, "V100-16GB", "K80", 1)
    assert ratio < 1
    assert rec.jct_s == pytest.approx(1000 / ratio)


def test_every_job_finishes_and_nodes_are_never_overcommitted(recorder):
    """Under a valid plan every job finishes; every snapshot's free GPUs match the running jobs."""
    jobs = [
        tjob(f"j{i}", submit_s=i * 7.0, gpus=(1, 2, 4, 8)[i % 4], duration_s=50 + 13 * i)
        for i in range(40)
    ]
    plan, seen = recorder(greedy_plan)
    result = world(jobs, plan=plan).run()
    assert all(r.finish_s is not None for r in result.records)
    for snap in seen:
        used: dict[tuple[str, str], float] = defaultdict(float)
        for run in snap.running:
            for name in run.nodes:
                used[(run.cluster, name)] += run.job.gpus_per_worker
        for cluster in snap.clusters:
            for n in cluster.nodes:
                assert n.free_gpus == pytest.approx(n.gpus - used[(n.cluster, n.name)])
                assert n.free_gpus >= 0


def test_a_job_larger_than_any_cluster_is_refused_at_submission(recorder):
    """A job that no cluster can hold is counted infeasible and never shown to the plan."""
    plan, seen = recorder(greedy_plan)
    result = world([tjob("big", gpus=16), tjob("ok", gpus=8)], plan=plan).run()
    recs = by_id(result)
    assert recs["big"].infeasible and recs["big"].finish_s is None
    assert recs["ok"].finish_s is not None
    assert all(j.key != "big" for s in seen for j in s.pending)


def test_events_at_one_instant_make_one_cycle(recorder):
    """Arrivals at the same instant are batched into a single cycle that sees them all."""
    plan, seen = recorder(greedy_plan)
    world([tjob(k, submit_s=5) for k in "abc"], plan=plan).run()
    at_five = [s for s in seen if s.now_s == 5]
    assert len(at_five) == 1
    assert sorted(j.key for j in at_five[0].pending) == ["a", "b", "c"]


def test_estimates_are_attached_on_arrival_and_predicted_ends_shown(recorder):
    """Pending jobs carry their estimate; running jobs carry a predicted end."""
    plan, seen = recorder(greedy_plan)
    world(
        [tjob("a", duration_s=300), tjob("b", submit_s=1, gpus=8, duration_s=10)], plan=plan
    ).run()
    first = seen[0]
    assert first.pending[0].estimate.on("V100-16GB") == pytest.approx(300)
    later = next(s for s in seen if s.running)
    assert later.running[0].predicted_end_s == pytest.approx(300)


class Recorder(Estimator):
    """An estimator that remembers what it was told."""

    def __init__(self) -> None:
        self.observed: list[tuple[str, str, float]] = []

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> Estimate:
        return Estimate(runtime_s={g: 1.0 for g in gpu_types})

    def observe(self, job: Job, gpu_type: str, actual_s: float) -> None:
        self.observed.append((job.key, gpu_type, actual_s))


def test_completions_are_observed_with_the_true_runtime():
    """The estimator learns each finished job's true runtime on the GPU type it ran on."""
    jobs = [tjob("a", duration_s=120), tjob("b", submit_s=3, duration_s=40)]
    cl = clusters()
    est = Recorder()
    World(jobs, cl, POLICY, est, plan=greedy_plan, transfer=no_transfer).run()
    assert sorted(est.observed) == [("a", "V100-16GB", 120.0), ("b", "V100-16GB", 40.0)]


def test_transfer_time_is_added_to_the_runtime():
    """A job whose data sits in another cluster first moves it over the link (real transfer_s)."""
    cl = clusters({"a": [(1, "V100", 4)], "b": [(1, "V100", 4)]}, bandwidth={"a": {"b": 8}})
    only_b = clusters({"b": [(1, "V100", 4)], "a": [(1, "V100", 0)]}, bandwidth={"a": {"b": 8}})
    job = tjob("j", duration_s=100, data_cluster="a", data_gb=100)
    near = by_id(world([job], cl, transfer=None).run())["j"]
    assert near.jct_s == pytest.approx(100)  # greedy picks cluster a: data is local
    far = by_id(world([job], only_b, transfer=None).run())["j"]
    assert far.jct_s == pytest.approx(100 + 100 * 8 / 8)


def plan_that(make):
    """A plan function that returns ``make(snapshot)`` on the first cycle, then nothing."""
    calls = []

    def plan(snapshot: Snapshot) -> CyclePlan:
        calls.append(snapshot)
        return make(snapshot) if len(calls) == 1 else CyclePlan()

    return plan


def start(key, *nodes, gpu="V100-16GB", cluster="a"):
    return Start(
        job_key=key, cluster=cluster, gpu_type=gpu, nodes=tuple(nodes), predicted_runtime_s=1
    )


N0, N1 = "a-g0-000", "a-g0-001"


@pytest.mark.parametrize(
    ("make", "want"),
    [
        pytest.param(
            lambda s: CyclePlan(starts=(start("x", N0), start("y", N0))),
            "overcommits",
            id="over capacity",
        ),
        pytest.param(
            lambda s: CyclePlan(starts=(start("ghost", N0),)), "not pending", id="unknown job"
        ),
        pytest.param(
            lambda s: CyclePlan(starts=(start("y", N0), start("y", N1))),
            "twice",
            id="started twice",
        ),
        pytest.param(
            lambda s: CyclePlan(starts=(start("y", N0, gpu="K80"),)),
            "has V100-16GB",
            id="wrong GPU",
        ),
        pytest.param(
            lambda s: CyclePlan(starts=(start("y", N0, N1),)), "worker", id="wrong worker count"
        ),
        pytest.param(
            lambda s: CyclePlan(starts=(start("y", "nowhere"),)), "no node", id="unknown node"
        ),
        pytest.param(
            lambda s: CyclePlan(starts=(start("y", N0, cluster="zz"),)),
            "cluster",
            id="unknown cluster",
        ),
        pytest.param(
            lambda s: CyclePlan(preemptions=(Preempt(job_key="y", for_key="x"),)),
            "not running",
            id="preempt pending",
        ),
        pytest.param(
            lambda s: CyclePlan(
                holds=(Hold(job_key="ghost", reason=WaitReason.Capacity, message=""),)
            ),
            "unknown job",
            id="hold unknown",
        ),
    ],
)
def test_invalid_plans_raise(make, want):
    """A plan that overcommits, names an unknown job or node, or starts a job twice is a bug."""
    jobs = [tjob("x", gpus=4), tjob("y", gpus=4)]
    w = world(jobs, clusters({"a": [(2, "V100", 4)]}), plan=plan_that(make))
    with pytest.raises(InvalidPlan, match=want):
        w.run()


def preempting_plan(snapshot: Snapshot) -> CyclePlan:
    """Start ``a`` alone; when ``b`` arrives, preempt ``a`` for it; restart ``a`` when free."""
    pending = {j.key for j in snapshot.pending}
    running = {r.job.key for r in snapshot.running}
    if "b" in pending and "a" in running:
        return CyclePlan(preemptions=(Preempt(job_key="a", for_key="b"),), starts=(start("b", N0),))
    if pending and not running:
        key = sorted(pending)[0]
        return CyclePlan(starts=(start(key, N0),))
    return CyclePlan()


@pytest.mark.parametrize(
    ("checkpoint", "interval_s", "want_finish", "lost_s"),
    [
        (True, 20, 150 + 60 + 60, 10),  # checkpoints at 20 and 40 s: 40 s kept, 10 s lost
        (True, 1800, 150 + 60 + 100, 50),  # no checkpoint written yet: all 50 s lost
        (False, 20, 150 + 60 + 100, 50),  # starts over
    ],
)
def test_preemption_requeues_and_resumes_only_from_a_checkpoint(
    recorder, checkpoint, interval_s, want_finish, lost_s
):
    """A preempted job is requeued with its attained service; it keeps the progress up to its
    last checkpoint only if it checkpoints, and pays the policy's restart cost."""
    rules = Preemption(enabled=True, restart_cost_s=60, checkpoint_interval_s=interval_s)
    policy = QueuePolicy(name="p", preemption=rules)
    jobs = [
        tjob("a", gpus=4, duration_s=100, checkpoint=checkpoint),
        tjob("b", submit_s=50, gpus=4, duration_s=100),
    ]
    plan, seen = recorder(preempting_plan)
    # The scripted plan preempts even a job that does not checkpoint (the core never does):
    # with no checkpointing job running the world would skip the cycle at b's arrival.
    w = world(jobs, clusters({"a": [(1, "V100", 4)]}), plan=plan, policy=policy)
    w.skip_full_cycles = checkpoint
    result = w.run()
    recs = by_id(result)
    assert recs["b"].finish_s == 150
    assert recs["a"].finish_s == pytest.approx(want_finish)
    assert recs["a"].preemptions == 1 and result.preemptions == 1
    assert recs["a"].lost_gpu_s == pytest.approx(lost_s * 4)  # 4 GPUs idle for the lost work
    requeued = next(j for s in seen if s.now_s == 150 for j in s.pending if j.key == "a")
    assert requeued.attained_gpu_s == pytest.approx(50 * 4)
    # Attempts counted as the operator counts them (bumped at each dispatch): none for a
    # new job, one for ``a`` while its first attempt runs and while it waits after it.
    at_50 = next(s for s in seen if s.now_s == 50)
    assert [j.attempts for j in at_50.pending if j.key == "b"] == [0]
    assert [r.job.attempts for r in at_50.running if r.job.key == "a"] == [1]
    assert requeued.attempts == 1
    # Its FIFO due time (0: nothing ahead of it at its arrival) moves by the 50 s it ran.
    assert requeued.fifo_due_s == pytest.approx(50)
    assert recs["a"].wait_s == pytest.approx(100)  # pending from 50 to 150


def test_ticks_run_cycles_only_when_asked(recorder):
    """With ``tick_s`` a cycle runs every tick while jobs wait behind running ones; else none."""
    jobs = [tjob("a", gpus=8, duration_s=1000), tjob("b", submit_s=1, gpus=8, duration_s=10)]
    plan, seen = recorder(greedy_plan)
    world(jobs, plan=plan, skip_full_cycles=False).run()
    assert [s.now_s for s in seen] == [0, 1, 1000]
    plan, seen = recorder(greedy_plan)
    world(jobs, plan=plan, tick_s=300, skip_full_cycles=False).run()
    assert [s.now_s for s in seen] == [0, 1, 301, 601, 901, 1000]


def test_cycles_are_skipped_only_when_nothing_could_start(recorder):
    """While no node has room for any pending job's worker the plan is not called, and the
    outcome is the same as calling it at every event."""
    jobs = [
        tjob("a", gpus=8, duration_s=1000),
        tjob("b", submit_s=1, gpus=4),
        tjob("c", submit_s=2),
    ]
    plan, seen = recorder(greedy_plan)
    skipping = world(jobs, plan=plan).run()
    assert [s.now_s for s in seen] == [0, 1000]
    assert skipping.skipped_cycles == 2
    mixed = [
        tjob(f"j{i}", submit_s=i * 5.0, gpus=(1, 2, 4, 8)[i % 4], duration_s=40 + 17 * (i % 7))
        for i in range(60)
    ]
    a, b = world(mixed).run(), world(mixed, skip_full_cycles=False).run()
    assert a.skipped_cycles > 0 and b.skipped_cycles == 0
    assert [(r.first_start_s, r.finish_s) for r in a.records] == [
        (r.first_start_s, r.finish_s) for r in b.records
    ]


def test_a_skipped_cycle_still_stamps_new_jobs_fifo_due_time_as_the_operator_does(recorder):
    """A job arriving while every GPU is busy gets its FIFO due time at its arrival, from
    what the estimator knew then, whether or not the world skips that cycle: the operator
    stamps due times at every cycle, and a later stamp rests on later estimates. Recording
    ETAs (whose projections read a snapshot at each arrival) changes no stamp."""
    from cpn.sim.estimators import HistoryEstimator

    jobs = [
        tjob("a", gpus=1, duration_s=100, model="resnet50", batch_size=64),
        tjob("b", gpus=1, duration_s=1000, model="resnet50", batch_size=64),
        tjob("c", submit_s=50, gpus=1, duration_s=100, model="resnet50", batch_size=64),
    ]
    cl = clusters({"a": [(1, "V100", 2)]})
    due: dict[str, float | None] = {}
    for label, kw in {
        "skipping": {},
        "every cycle": {"skip_full_cycles": False},
        "ETAs recorded": {"eta": True},
    }.items():
        plan, seen = recorder(greedy_plan)
        estimator = HistoryEstimator(cl.reference_gpu)
        world(jobs, cl, plan, estimator=estimator, **kw).run()
        (c,) = [j for snap in seen if snap.now_s == 100 for j in snap.pending if j.key == "c"]
        due[label] = c.fifo_due_s
    assert len(set(due.values())) == 1, due
    stamp = due["skipping"]
    assert stamp is not None and stamp > 100  # the unseen estimate of 'a', not 'a' done


def test_recording_etas_does_not_change_the_schedule():
    """The ETA projections (every job or one in three) read the world and change nothing in
    it: with a learning estimator under `default` every job starts and ends as without them."""
    from cpn.core.presets import preset_policy
    from cpn.sim.estimators import HistoryEstimator

    models = ("resnet50", "vgg16", "transformer")
    jobs = [
        tjob(
            f"j{i}",
            submit_s=i * 40.0,
            gpus=(1, 2, 4, 8)[i % 4],
            duration_s=300 + 170 * (i % 7),
            model=models[i % 3],
            batch_size=64,
        )
        for i in range(60)
    ]
    cl = clusters({"a": [(2, "V100", 8)]})

    def schedule(**kw):  # type: ignore[no-untyped-def]
        estimator = HistoryEstimator(cl.reference_gpu)
        policy = preset_policy("default")
        result = world(jobs, cl, estimator=estimator, policy=policy, **kw).run()
        return [(r.job_id, r.first_start_s, r.finish_s) for r in result.records]

    plain = schedule()
    assert plain == schedule(eta=True) == schedule(eta=True, eta_every=3)
    submitted = {j.job_id: j.submit_s for j in jobs}
    assert any(start > submitted[key] for key, start, _ in plain)  # some jobs waited


def test_a_stalled_plan_ends_the_run_with_unfinished_jobs():
    """A plan that never starts anything ends the run (no busy loop) with jobs unfinished."""
    result = world([tjob("a"), tjob("b", submit_s=5)], plan=lambda s: CyclePlan(), tick_s=10).run()
    assert [r.finish_s for r in result.records] == [None, None]


@pytest.mark.parametrize(
    ("extra", "want_infeasible"),
    [
        pytest.param({"gpu_memory_gib": 40.0}, True, id="more GPU memory than any GPU"),
        pytest.param({"gpu_memory_gib": 16.0}, False, id="GPU memory that fits"),
        pytest.param({"cpu": 64.0}, False, id="CPU spread over two workers"),
        pytest.param({"cpu": 66.0}, True, id="CPU beyond two nodes"),
        pytest.param({"memory_gib": 257.0}, True, id="memory beyond two nodes"),
    ],
)
def test_feasibility_counts_gpu_memory_cpu_and_memory(extra, want_infeasible):
    """A job no cluster could hold is refused at submission, counting every resource kind."""
    result = world([tjob("a", gpus=8, **extra)]).run()  # 2 nodes x (4 V100-16GB, 32 CPU, 128 GiB)
    rec = by_id(result)["a"]
    assert rec.infeasible is want_infeasible
    assert (rec.finish_s is None) is want_infeasible


def test_each_job_is_stamped_its_fifo_due_time_once_when_first_seen(recorder):
    """The world stamps a job's FIFO due time (cpn.core.fifodue) in the first snapshot that
    holds it: running work left plus the work pending before it, over the fleet's 8 GPUs.
    Later snapshots keep it."""
    jobs = [
        tjob("a", submit_s=0, gpus=8, duration_s=1000),
        tjob("c", submit_s=10, gpus=4, duration_s=300),
        tjob("b", submit_s=9, gpus=4, duration_s=500),
    ]
    plan, seen = recorder(greedy_plan)
    world(jobs, plan=plan).run()
    due: dict[str, set[float]] = defaultdict(set)
    for snap in seen:
        for job in snap.pending:
            assert job.fifo_due_s is not None
            due[job.key].add(job.fifo_due_s)
    assert {key: sorted(times) for key, times in due.items()} == {
        "a": [0.0],
        "b": [pytest.approx(9 + 8 * 991 / 8)],
        "c": [pytest.approx(10 + (8 * 990 + 4 * 500) / 8)],
    }
