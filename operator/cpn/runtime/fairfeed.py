"""The live operator's fair share and budgets: the same :class:`cpn.core.fairshare.FairShare`
the simulator feeds, fed from the operator's GPU-hour accounting (runtime/accounting.py).

**Where the runs come from.** At start-up (before the first cycle) every row of the usage
store: the runs kept one by one as they ran; a rolled-up day total of a (group, user, GPU
type, domain) as one run spread evenly over that UTC day (up to now, for today); an
archived month total as one run spread evenly over that month. That is the approximation:
inside a rolled-up day (or month) the decay is computed as if the GPU-hours were used at a
constant rate, which shifts each total by at most a factor ``2^(day/H)`` either way (a
month's: ``2^(month/H)``, and months reach the archive only after 32 days, when they weigh
little); budgets are exact for day totals (a budget period is whole UTC days) and for
months (the archive holds only months before the current ``day``/``week`` period).

Then every run the accounting records as ended (the one hook,
:meth:`cpn.runtime.accounting.Accounting.saw`): while it waits to be written it counts
from the pending records (:meth:`FairFeed.view`), and once the store took it, in the sums
(runs the store had already, e.g. recovered after a restart, are not counted twice).
Running attempts are not fed: the core adds what they used so far from the snapshot's
``running``. So a cycle's factor and budget are as fresh as the cycle: runs that ended
before it count, running ones up to its instant. The cost per cycle is O(runs ended since
the last one) (plus the pending ones' overlay, O(groups + users) while any wait), however
many finished AIJobs there are.

A policy whose ``fair_share.half_life_h`` or ``quotas.budget_period`` changes needs the
sums again: the feed is emptied and refed from the store on the next flush (meanwhile the
snapshot has no usage and every factor is 1, no budget reached).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

from cpn.core.accounting import DAY_S, Archive, DayUsage, UsageRecord, day_start_s, month_bounds_s
from cpn.core.fairshare import FairShare, standing
from cpn.core.model import Snapshot, Usage
from cpn.core.policy import QueuePolicy

log = logging.getLogger(__name__)


class FairFeed:
    """The fair-share sums of the runs the store holds, and of those waiting to be written."""

    def __init__(self) -> None:
        self._fair: FairShare | None = None
        self.ready = False  # fed from the store (or there is none)
        self.fed = 0  # runs (and rolled-up totals) fed since the last reset
        self._over: set[str] = set()  # groups over budget (an Event when one is new)

    def configure(self, policy: QueuePolicy) -> bool:
        """Follow ``policy``'s half-life and budget period; True when they changed (the
        sums are then emptied and must be refed from the store)."""
        half_life_s = policy.fair_share.half_life_h * 3600.0
        period = policy.quotas.budget_period
        fair = self._fair
        if fair is not None and (fair.half_life_s, fair.period) == (half_life_s, period):
            return False
        self._fair = FairShare(half_life_s, period)
        self.ready = False
        self.fed = 0
        return fair is not None

    def load(self, days: Iterable[DayUsage], archive: Archive, now_s: float) -> None:
        """Feed every row of the store (see the module docstring for the roll-ups)."""
        fair = self._fair
        if fair is None:
            return
        for usage in days:
            self.add(usage.runs.values())
            if usage.totals:
                begins = day_start_s(usage.day)
                ends = max(min(begins + DAY_S, now_s), begins + 1.0)
                for (group, user, _gpu_type, _domain), total in usage.totals.items():
                    fair.add_run(group, user, total.gpu_s / (ends - begins), begins, ends)
                    self.fed += 1
        for (month, group, user, _gpu_type, _domain), total in archive.months.items():
            begins, ends = month_bounds_s(month)
            ends = max(min(ends, now_s), begins + 1.0)
            fair.add_run(group, user, total.gpu_s / (ends - begins), begins, ends)
            self.fed += 1
        fair.advance(now_s)
        self.ready = True

    def add(self, records: Iterable[UsageRecord]) -> None:
        """Feed runs the store did not have (just written)."""
        fair = self._fair
        if fair is None:
            return
        for record in records:
            fair.add_run(record.group, record.user, record.gpus, record.start_s, record.end_s)
            self.fed += 1

    def view(self, pending: Iterable[UsageRecord], now_s: float) -> Usage | None:
        """The snapshot's usage: the sums, with the runs still ``pending`` a write on top
        (a copy only when there are any); None before the store was read."""
        fair = self._fair
        if fair is None or not self.ready:
            return None
        fair.advance(now_s)
        waiting = list(pending)
        if not waiting:
            return fair.view()
        overlay = fair.copy()
        for record in waiting:
            overlay.add_run(record.group, record.user, record.gpus, record.start_s, record.end_s)
        return overlay.view()

    def newly_over(self, snapshot: Snapshot) -> list[str]:
        """Groups over budget in ``snapshot`` that were not at the last call (sorted)."""
        if snapshot.usage is None or not any(
            q.gpu_hours is not None for q in snapshot.policy.quotas.groups.values()
        ):
            self._over = set()
            return []
        over = set(standing(snapshot).over_budget)
        new = sorted(over - self._over)
        self._over = over
        return new

    def forget(self, group: str) -> None:
        """``group`` counts as newly over budget again at the next :meth:`newly_over`."""
        self._over.discard(group)


def budget_message(policy: QueuePolicy, snapshot: Snapshot, group: str) -> str:
    """The Event's message when ``group`` goes over its GPU-hour budget."""
    quota = policy.quotas.groups[group]
    used = standing(snapshot).period_gpu_s.get(group, 0.0) / 3600.0
    budget = quota.gpu_hours if quota.gpu_hours is not None else math.inf
    then = "its jobs wait (reason Budget)"
    if policy.quotas.over_budget != "hold":
        then = "its jobs run only at the lowest level"
    return (
        f"group {group} used {used:.3g} of its {budget:g} GPU-hour budget this "
        f"{policy.quotas.budget_period}: {then} until the next {policy.quotas.budget_period}"
    )
