"""The policy's ``fair_share`` section and the budget fields of ``quotas``.

::

    fair_share:
      half_life_h: 168          # past usage counts half after a week
      weight: 86400             # adds 86400 * fair_share to every formula's score (0: none)
    quotas:
      budget_period: month      # day | week (from Monday) | month, UTC calendar
      over_budget: lowest       # lowest: rank below every level; hold: wait (reason Budget)
      groups:
        team-a: {gpus: 64, gpu_hours: 20000}

What they mean at run time is :mod:`cpn.core.fairshare`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cpn.api.policyfields import Parser, PolicyReader, choice, number
from cpn.core.fairshare import HOLD, LOWEST, PERIODS
from cpn.core.policy import FairSharePolicy

MAX_HALF_LIFE_H = 366 * 24.0  # a year
MAX_WEIGHT = 1e12  # score units (GPU-seconds): a million GPU-days
MAX_GPU_HOURS = 1e12

_FAIR_SHARE: Mapping[str, Parser] = {
    "half_life_h": number(0.0, MAX_HALF_LIFE_H, above=True),
    "weight": number(0.0, MAX_WEIGHT),
}
FAIR_SHARE_KEYS = tuple(_FAIR_SHARE)
#: ``quotas`` fields for budgets (read with the rest of ``quotas``).
BUDGET_FIELDS: Mapping[str, Parser] = {
    "budget_period": choice(PERIODS),
    "over_budget": choice((LOWEST, HOLD)),
}
#: ``quotas.groups.<group>`` field for its budget.
GROUP_BUDGET: Mapping[str, Parser] = {"gpu_hours": number(0.0, MAX_GPU_HOURS, nullable=True)}


def read_fair_share(reader: PolicyReader, value: Any) -> FairSharePolicy:
    """The ``fair_share`` section; every problem reported on ``reader``."""
    return FairSharePolicy(**reader.section(value, "fair_share", _FAIR_SHARE))
