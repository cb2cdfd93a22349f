"""Fair share over time and GPU-hour budgets (pure).

**Decayed usage.** Every run (a whole run, or one fragment of a preempted job) adds its
GPU-seconds to its group and to its user, decayed with the policy's half-life ``H``
(``fair_share.half_life_h``): a GPU-second used ``H`` ago counts one half, ``2H`` ago one
quarter. A run of ``g`` GPUs from ``s`` to ``e`` counts, at instant ``t >= e``::

    g * ∫_s^e 2^(-(t - τ)/H) dτ

exactly (not as if all at its end). :class:`FairShare` keeps these sums in one frame,
values scaled to a reference instant ``T0`` (``V = U(t) * 2^((t - T0)/H)``), so adding a
run is O(1) and touches no other sum, whatever its age or the order runs arrive in; the
frame moves (every sum rescaled once) only when its exponent passes
:data:`REBASE_EXPONENT`. Running jobs are not in the sums: the cycle adds what their
current attempt used so far from the snapshot's ``running`` (so the runtime calls
:meth:`FairShare.add_run` only when an attempt ends, with its start and end).

**Shares.** A group's share is its quota's ``gpus`` relative to the other active groups'
(a group without a GPU quota counts with the mean of those that have one, or 1 when none
does: equal shares). Active: a group with decayed usage or a job pending or running now.
Within a group the active users share equally. Shares are normalised to sum to 1.

**The factor** (the formula's ``fair_share``, like Slurm's classic ``2^(-usage/share)``)::

    r_group = (U_group / U_all) / S_group          1 = used exactly its share
    r_user  = (U_user / U_all) / (S_group * S_user)
    fair_share = 2^(-(r_group + r_user) / 2)        in (0, 1]; 1 = nothing used

It falls as the group's or the user's recent usage grows; a job whose group and user
used exactly their share gets 0.5. ``group_fair_share`` (``2^-r_group``) and
``user_fair_share`` (``2^-r_user``) are there for formulas that weigh them apart.
Without usage data (no :class:`Usage` in the snapshot) every factor is 1.

**Budgets.** ``quotas.groups.G.gpu_hours`` is what group G may use per
``quotas.budget_period`` (``day``, ``week`` from Monday or ``month``, UTC calendar). The
period's GPU-seconds count finished runs' overlap with the period plus running attempts'
overlap up to now. A group at or past its budget runs only at the lowest level
(``quotas.over_budget: lowest``: below every level, so only what no one else can use) or
not at all (``hold``: its pending jobs wait with reason ``Budget``; running ones finish).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

from cpn.core.formula import compile_formula
from cpn.core.model import LN2, Job, Running, Snapshot, Usage
from cpn.core.policy import QueuePolicy

#: Rescale the frame once ``(t - T0) / H`` passes this (2^512 is far below float64's max).
REBASE_EXPONENT = 512.0
#: The level name of an over-budget job under ``over_budget: lowest``.
OVER_BUDGET_LEVEL = "over-budget"
PERIODS = ("day", "week", "month")
HOLD, LOWEST = "hold", "lowest"


def user_key(group: str, user: str) -> str:
    """The key of a user's sums: users are counted within their group."""
    return f"{group}/{user}"


def lowest_level(policy: QueuePolicy) -> int:
    """The level index of an over-budget job under ``over_budget: lowest``: after every
    level of the policy (1 when it has none, whose jobs are all at 0)."""
    return max(len(policy.levels), 1)


def period_start_s(now_s: float, period: str) -> float:
    """Start (epoch seconds) of the UTC calendar ``period`` (day|week|month) holding ``now_s``."""
    moment = datetime.fromtimestamp(now_s, UTC)
    start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        start -= timedelta(days=start.weekday())
    elif period == "month":
        start = start.replace(day=1)
    return start.timestamp()


def _frame_gpu_s(
    gpus: float, start_s: float, end_s: float, origin_s: float, half_s: float
) -> float:
    """``gpus`` over [start, end], decayed exactly, in the frame of ``origin_s``:
    ``gpus * ∫ 2^((τ - origin)/H) dτ``. ``end_s`` is at most :data:`REBASE_EXPONENT`
    half-lives after ``origin_s`` (callers keep it so), so nothing overflows however long
    the run."""
    if end_s <= start_s or gpus <= 0:
        return 0.0
    rate = LN2 / half_s
    low, high = (start_s - origin_s) * rate, (end_s - origin_s) * rate
    if high - low < 1.0:  # short: expm1 keeps the digits a difference would lose
        return gpus / rate * math.exp(low) * math.expm1(high - low)
    return gpus / rate * (math.exp(high) - math.exp(low))


class FairShare:
    """The running sums behind :class:`Usage`, updated in O(1) per finished attempt.

    The entry point of the runtime and the simulator: call :meth:`add_run` when an attempt
    ends (or for each accounting record at start-up, in any order), and put :meth:`view`
    in each snapshot. Built for one half-life and period (a policy that changes them needs
    a new one, fed again from the records).
    """

    def __init__(self, half_life_s: float, period: str = "month") -> None:
        if not half_life_s > 0:
            raise ValueError("half_life_s must be positive")
        if period not in PERIODS:
            raise ValueError(f"period must be one of {', '.join(PERIODS)}")
        self.half_life_s = half_life_s
        self.period = period
        self._origin: float | None = None
        self._groups: dict[str, float] = {}
        self._users: dict[str, float] = {}
        self._period_start = -math.inf
        self._period_used: dict[str, float] = {}
        self._view: Usage | None = None

    def add_run(self, group: str, user: str, gpus: float, start_s: float, end_s: float) -> None:
        """Count an attempt of ``gpus`` GPUs that ran from ``start_s`` to ``end_s``."""
        if end_s <= start_s or gpus <= 0:
            return
        if self._origin is None:
            self._origin = end_s
        elif (end_s - self._origin) / self.half_life_s > REBASE_EXPONENT:
            self._rebase(end_s)
        add = _frame_gpu_s(gpus, start_s, end_s, self._origin, self.half_life_s)
        self._groups[group] = self._groups.get(group, 0.0) + add
        key = user_key(group, user)
        self._users[key] = self._users.get(key, 0.0) + add
        self.advance(end_s)
        overlap = end_s - max(start_s, self._period_start)
        if overlap > 0:
            self._period_used[group] = self._period_used.get(group, 0.0) + overlap * gpus
        self._view = None

    def advance(self, now_s: float) -> None:
        """Move the budget period forward to the one holding ``now_s`` (never back)."""
        start = period_start_s(now_s, self.period)
        if start > self._period_start:
            self._period_start = start
            self._period_used = {}
            self._view = None

    def copy(self) -> FairShare:
        """A copy to add to without touching these sums (O(groups + users))."""
        other = FairShare(self.half_life_s, self.period)
        other._origin, other._period_start = self._origin, self._period_start
        other._groups, other._users = dict(self._groups), dict(self._users)
        other._period_used = dict(self._period_used)
        return other

    def _rebase(self, origin_s: float) -> None:
        assert self._origin is not None
        scale = 2.0 ** (-(origin_s - self._origin) / self.half_life_s)
        for sums in (self._groups, self._users):
            for key in sums:
                sums[key] *= scale
        self._origin = origin_s

    def view(self) -> Usage:
        """The sums as a frozen :class:`Usage` (copied once per change, not per call)."""
        if self._view is None:
            self._view = Usage(
                half_life_s=self.half_life_s,
                origin_s=self._origin or 0.0,
                groups=MappingProxyType(dict(self._groups)),
                users=MappingProxyType(dict(self._users)),
                period=self.period,
                period_start_s=self._period_start,
                period_gpu_s=MappingProxyType(dict(self._period_used)),
            )
        return self._view


@dataclass(frozen=True, slots=True, kw_only=True)
class Standing:
    """Each group's and user's fair-share factors and budget state at one instant."""

    group_factor: Mapping[str, float]
    user_factor: Mapping[str, float]  # key group/user
    over_budget: frozenset[str] = frozenset()
    period_gpu_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def factors(self, job: Job) -> tuple[float, float, float]:
        """(fair_share, group_fair_share, user_fair_share) of ``job``; 1 when unknown."""
        g = self.group_factor.get(job.group, 1.0)
        u = self.user_factor.get(user_key(job.group, job.user), 1.0)
        return math.sqrt(g * u), g, u


NEUTRAL = Standing(group_factor=MappingProxyType({}), user_factor=MappingProxyType({}))


def _running_sums(
    usage: Usage, running: Iterable[Running], now_s: float
) -> tuple[dict[str, float], dict[str, float]]:
    """Decayed GPU-seconds at ``now_s`` (the frame of ``now_s``: no overflow however far
    ``now_s`` is from the usage's frame), running attempts' use so far included."""
    rate = LN2 / usage.half_life_s
    scale = math.exp(min((usage.origin_s - now_s) * rate, 700.0))
    groups = {key: value * scale for key, value in usage.groups.items()}
    users = {key: value * scale for key, value in usage.users.items()}
    for item in running:
        job = item.job
        add = _frame_gpu_s(job.gpus, item.start_s, now_s, now_s, usage.half_life_s)
        if add > 0:
            groups[job.group] = groups.get(job.group, 0.0) + add
            key = user_key(job.group, job.user)
            users[key] = users.get(key, 0.0) + add
    return groups, users


def _shares(policy: QueuePolicy, active: Iterable[str]) -> dict[str, float]:
    """Normalised shares of the active groups (see the module docstring)."""
    quotas = policy.quotas.groups
    raw: dict[str, float | None] = {}
    for group in active:
        quota = quotas.get(group)
        gpus = quota.limit.gpus if quota is not None else None
        raw[group] = gpus if gpus else None
    given = [v for v in raw.values() if v is not None]
    fill = sum(given) / len(given) if given else 1.0
    filled = {g: (v if v is not None else fill) for g, v in raw.items()}
    total = sum(filled.values())
    return {g: v / total for g, v in filled.items()}


def _period_used(snapshot: Snapshot, usage: Usage) -> dict[str, float]:
    start = period_start_s(snapshot.now_s, usage.period)
    used = dict(usage.period_gpu_s) if start <= usage.period_start_s else {}
    for item in snapshot.running:
        overlap = snapshot.now_s - max(item.start_s, start)
        if overlap > 0:
            used[item.job.group] = used.get(item.job.group, 0.0) + overlap * item.job.gpus
    return used


FACTOR_NAMES = frozenset(("fair_share", "group_fair_share", "user_fair_share"))


def in_use(policy: QueuePolicy) -> bool:
    """True when the policy reads past usage: a fair-share weight, a formula naming a
    fair-share factor, or a group budget."""
    if policy.fair_share.weight or any(
        q.gpu_hours is not None for q in policy.quotas.groups.values()
    ):
        return True
    texts = [policy.formula, *(level.formula for level in policy.levels if level.formula)]
    return any(compile_formula(text).names & FACTOR_NAMES for text in texts)


def standing(snapshot: Snapshot) -> Standing:
    """Every group's and user's factor, and the groups over budget, at ``snapshot.now_s``.

    O(groups + users + running + pending): what the cycle pays for fair share, and only
    when the policy uses it (:func:`in_use`)."""
    usage = snapshot.usage
    if usage is None or not in_use(snapshot.policy):
        return NEUTRAL
    groups, users = _running_sums(usage, snapshot.running, snapshot.now_s)
    total = sum(groups.values())
    jobs = [*snapshot.pending, *(r.job for r in snapshot.running)]
    floor = total * 1e-12
    active = {g for g, v in groups.items() if v > floor} | {j.group for j in jobs}
    group_factor: dict[str, float] = {}
    user_factor: dict[str, float] = {}
    if total > 0:
        shares = _shares(snapshot.policy, sorted(active))
        members: dict[str, set[str]] = {}
        for key, value in users.items():
            if value > floor:
                group, _, user = key.partition("/")
                members.setdefault(group, set()).add(user)
        for job in jobs:
            members.setdefault(job.group, set()).add(job.user)
        for group in active:
            share = shares[group]
            group_factor[group] = 2.0 ** (-(groups.get(group, 0.0) / total) / share)
            user_share = share / max(1, len(members.get(group, ())))
            for user in members.get(group, ()):
                key = user_key(group, user)
                user_factor[key] = 2.0 ** (-(users.get(key, 0.0) / total) / user_share)
    used = _period_used(snapshot, usage)
    over = frozenset(
        group
        for group, quota in snapshot.policy.quotas.groups.items()
        if quota.gpu_hours is not None and used.get(group, 0.0) >= quota.gpu_hours * 3600.0
    )
    return Standing(
        group_factor=MappingProxyType(group_factor),
        user_factor=MappingProxyType(user_factor),
        over_budget=over,
        period_gpu_s=MappingProxyType(used),
    )
