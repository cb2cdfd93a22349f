"""What a preemption costs: the arithmetic the cycle prices and the simulator charges.

A job that checkpoints every ``interval`` seconds of compute keeps, when stopped after
``elapsed`` seconds of compute, the work up to its last checkpoint
(:func:`saved_s`) and loses the rest; resuming costs a restart overhead on top
(:func:`preemption_cost_gpu_s`). The cycle preempts only when the waiting job ranks
above its victim by more than this cost (see :meth:`cpn.core.cycle._Cycle._preempt`),
and the simulator charges exactly this, so both agree on what a preemption wastes.
"""

from __future__ import annotations

import math

from cpn.core.model import Running
from cpn.core.policy import Preemption


def saved_s(elapsed_s: float, interval_s: float) -> float:
    """Compute kept by the last checkpoint after ``elapsed_s`` seconds of compute."""
    if elapsed_s <= 0:
        return 0.0
    if interval_s <= 0 or not math.isfinite(interval_s):
        return elapsed_s if interval_s <= 0 else 0.0
    return math.floor(elapsed_s / interval_s + 1e-9) * interval_s


def interval_of(item: Running, policy: Preemption) -> float:
    """The checkpoint interval of a running job (its own, else the policy's)."""
    return item.job.checkpoint_interval_s or policy.checkpoint_interval_s


def preemption_cost_gpu_s(item: Running, now_s: float, policy: Preemption) -> float:
    """GPU-seconds a preemption of ``item`` now wastes: work since its last checkpoint
    (counted from its start, which includes any transfer: an upper bound) plus the restart."""
    elapsed = max(0.0, now_s - item.start_s)
    lost = elapsed - saved_s(elapsed, interval_of(item, policy))
    return item.job.gpus * (lost + policy.restart_cost_s)
