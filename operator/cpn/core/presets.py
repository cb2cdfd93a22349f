"""Named policies: cpn's own (``default``) and the baselines it is measured against.

The baselines place heterogeneity-agnostically (``first-fit``: the first
cluster and GPU type with room, in name order) except ``gavel``, which puts
each job on the GPU type where it runs fastest.

- ``fifo``: arrival order, strict: a job that does not fit blocks those behind it.
- ``sjf``: shortest predicted runtime first, no reservations (may starve big jobs).
- ``oracle``: like ``sjf`` but the simulator feeds it true runtimes (the reference).
- ``las``: Tiresias-style discretised least-attained-service, preemptive.
- ``gavel``: arrival order (skipping what does not fit) on the fastest GPU type.
- ``default``: cpn: the priority formula with aging, reservations with backfill,
  and the MILP placing each job where it finishes soonest.
"""

from __future__ import annotations

from dataclasses import replace

from cpn.core.policy import Placement, Preemption, QueuePolicy, Reservation

_NO_RESERVATION = Reservation(enabled=False)
_NO_PREEMPTION = Preemption(enabled=False)  # the baselines never preempt (las does)

PRESETS: dict[str, QueuePolicy] = {
    "default": QueuePolicy(name="default"),
    "fifo": QueuePolicy(
        name="fifo",
        preemption=_NO_PREEMPTION,
        ordering="fifo",
        reservation=_NO_RESERVATION,
        placement=Placement(method="first-fit"),
    ),
    "sjf": QueuePolicy(
        name="sjf",
        preemption=_NO_PREEMPTION,
        ordering="sjf",
        reservation=_NO_RESERVATION,
        placement=Placement(method="first-fit"),
    ),
    "oracle": QueuePolicy(
        name="oracle",
        preemption=_NO_PREEMPTION,
        ordering="oracle",
        reservation=_NO_RESERVATION,
        placement=Placement(method="first-fit"),
    ),
    "las": QueuePolicy(
        name="las",
        ordering="las",
        reservation=_NO_RESERVATION,
        placement=Placement(method="first-fit"),
        preemption=Preemption(
            enabled=True,
            min_priority_gap=1,
            restart_cost_s=60.0,
            around_reservations=False,  # the published LAS: any job may be stopped for rank
            no_bigger_victims=False,
        ),
    ),
    "gavel": QueuePolicy(
        name="gavel",
        preemption=_NO_PREEMPTION,
        ordering="gavel",
        reservation=_NO_RESERVATION,
        placement=Placement(method="fastest"),
    ),
}


def preset_policy(name: str) -> QueuePolicy:
    """The named policy; raises KeyError naming the known ones."""
    try:
        return replace(PRESETS[name])
    except KeyError:
        known = ", ".join(sorted(PRESETS))
        raise KeyError(f"unknown policy {name!r}; known: {known}") from None
