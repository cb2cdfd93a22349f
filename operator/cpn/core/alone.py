"""The first job of a model runs alone on its node, so that its measurement is clean.

A job of a model the estimator has never seen (no benchmark row and no finished job
of that model: :attr:`cpn.core.model.Estimate.new_model`) is, under the policy
switch ``placement.first_of_model_alone``, placed only on nodes that no other job
uses (all their GPUs free, no cpn job on them), and while it runs no other job is
placed on those nodes. Its workers may share a node with each other. A job that
names no model is never new. Every job of the model that starts before the
estimator has seen one finish runs alone (usually the first one only).

Pure: :class:`cpn.core.capacity.Capacity` applies the rule node by node (with the
running jobs' :attr:`~cpn.core.model.Running.alone`, which the operator and the
simulator carry over from :attr:`~cpn.core.model.Start.alone`), the cycle marks the
starts, and :func:`started_alone` and :func:`no_empty_node` are what a job is told.
"""

from __future__ import annotations

from cpn.core.model import Job
from cpn.core.policy import QueuePolicy


def runs_alone(job: Job, policy: QueuePolicy) -> bool:
    """True if ``job`` must run alone on its nodes under ``policy``."""
    return policy.placement.first_of_model_alone and bool(job.model) and job.estimate.new_model
