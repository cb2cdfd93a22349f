"""The simulator applies placement.first_of_model_alone through the same plan_cycle: the
first job of a model its estimator never saw finish runs alone, nothing joins it while it
runs (the world carries Start.alone into its running jobs), and with the switch off the
jobs pack by best fit."""

from __future__ import annotations

from dataclasses import replace

from simkit import clusters, no_transfer, tjob

from cpn.core.cycle import plan_cycle
from cpn.core.model import CyclePlan, Job, Snapshot
from cpn.core.policy import Placement, QueuePolicy
from cpn.sim.estimators import HistoryEstimator
from cpn.sim.jobs import truth_for
from cpn.sim.world import World

ON = QueuePolicy(name="alone", placement=Placement(first_of_model_alone=True))

Started = dict[str, tuple[tuple[str, ...], bool, float]]  # job -> (nodes, alone, when)


def run(policy: QueuePolicy) -> Started:
    """resnet50 is known (one finished before), newnet is not. On two nodes of 4 V100s: a
    (resnet50, 3 GPUs) at 0, b (newnet, 1 GPU) at 1, c (resnet50, 2 GPUs) at 2."""
    jobs = [
        tjob("a", 0, gpus=3, duration_s=1000, model="resnet50"),
        tjob("b", 1, gpus=1, duration_s=1000, model="newnet"),
        tjob("c", 2, gpus=2, duration_s=1000, model="resnet50"),
    ]
    cl = clusters()
    truth = truth_for(jobs, cl.reference_gpu)
    estimator = HistoryEstimator(cl.reference_gpu)
    estimator.observe(Job(key="old", submit_s=0.0, model="resnet50"), "V100-16GB", 900.0)
    started: Started = {}

    def plan(snapshot: Snapshot) -> CyclePlan:
        made = plan_cycle(snapshot)
        started.update({s.job_key: (s.nodes, s.alone, snapshot.now_s) for s in made.starts})
        return made

    World(jobs, cl, policy, estimator, truth=truth, plan=plan, transfer=no_transfer).run()
    return started


def test_the_new_models_job_runs_alone_in_the_simulator() -> None:
    started = run(ON)
    (a_nodes, a_alone, _), (b_nodes, b_alone, _) = started["a"], started["b"]
    assert b_alone and not a_alone and not started["c"][1]
    assert b_nodes != a_nodes  # best fit would have put b in the GPU left beside a
    c_nodes, _, c_at = started["c"]
    # c fits only beside b, which runs alone until 1001: it waits for a's node (free at 1000)
    assert c_at >= 1000 and c_nodes != b_nodes


def test_switch_off_packs_them_by_best_fit() -> None:
    started = run(replace(ON, placement=Placement()))
    assert not any(alone for _, alone, _ in started.values())
    assert started["a"][0] == started["b"][0]
    assert started["c"][2] == 2
