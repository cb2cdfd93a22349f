"""Runtime distributions learned from finished jobs, for jobs that declare no work.

Most submissions to a real cluster say nothing but a user, a group, a GPU count and
perhaps a model. What such a job will run is best told by what similar jobs ran:
:class:`RuntimeHistory` keeps the runtimes of finished jobs (normalised to one
reference GPU) under every key a job falls in, from the most specific to the most
general::

    (model, user, gpus) (model, user) (model, gpus) (model)   -- when a model is given
    (user, gpus) (user) (group, gpus) (group) (gpus) ()

and answers with a log-normal law (median and 90th percentile) fitted by
hierarchical shrinkage: starting from the most general key that has data (and
from a wide prior spread, sigma 1), each key with ``n`` runtimes moves the
log-median and the log-spread toward its own by ``n / (n + prior_n)``, and the
p90 reaches at least every key's own median (disagreement is uncertainty). A key
with a handful of runtimes thus counts a little; one with dozens decides. Each
key keeps only its last ``window`` runtimes, so the law follows a workload that
drifts.

Most specific of all are a job's *siblings*: jobs of the same submitter (user, else
group), model and GPU count submitted within ``sibling_s`` of it (a sweep, a job
array, a run resubmitted after a crash). Where any of them finished, their median is
the job's median (the spread still shrinks as above, and stays wide on one sibling):
on a cluster whose jobs carry no model, what the job just before it ran is the best
evidence there is. Siblings are found by submit time, so a job's law can change while
it waits (whoever keeps estimates must ask again when a sibling finishes).

The law's ``n`` (runtimes under the most specific key that had any) and ``key`` say
how much it rests on: the confidence the estimate states.

Pure: no clock, no I/O; O(window) per observation and O(keys) per query.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from predictor.features import total_gpus

#: z-score of the 90th percentile.
Z90 = 1.2815515655446004

Key = tuple[str, ...]

#: Jobs of one submitter, model and GPU count submitted this close together are siblings
#: (a sweep, an array, a resubmission): the runtimes of those that finished are the most
#: specific evidence about the rest.
SIBLING_S = 600.0
SIBLINGS = "siblings"  # the law's key name when finished siblings decided it


@dataclass(frozen=True, slots=True)
class RuntimeLaw:
    """A log-normal runtime law on the reference GPU, and what it rests on."""

    median_s: float
    p90_s: float
    n: int  # runtimes under the most specific key that had any
    key: str  # that key's name, e.g. "group+gpus"

    @property
    def sigma(self) -> float:
        """Log-space standard deviation."""
        return max(0.0, math.log(self.p90_s / self.median_s) / Z90)

    @property
    def mean_s(self) -> float:
        """Expected runtime under the law."""
        return self.median_s * math.exp(0.5 * self.sigma**2)


class _Window:
    """The last ``size`` log-runtimes of one key, kept sorted for quantiles."""

    __slots__ = ("order", "sorted")

    def __init__(self, size: int) -> None:
        self.order: deque[float] = deque(maxlen=size)
        self.sorted: list[float] = []

    def add(self, value: float) -> None:
        if len(self.order) == self.order.maxlen:
            old = self.order[0]
            del self.sorted[bisect.bisect_left(self.sorted, old)]
        self.order.append(value)
        bisect.insort(self.sorted, value)

    def quantile(self, q: float) -> float:
        return _quantile(self.sorted, q)


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``values`` (linear between neighbours)."""
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def sibling_key(model: str, user: str, group: str, gpus: float) -> Key | None:
    """Jobs that are siblings when submitted close together: same submitter (the user,
    else the group), model and GPU count. None with no submitter: nothing says who
    submitted such a job, so it has no siblings."""
    submitter = user or group
    return ("s", submitter, model, f"{gpus:g}") if submitter else None


def siblings(a: Any, b: Any) -> bool:
    """True if jobs ``a`` and ``b`` (anything with ``model``, ``user``, ``group``,
    ``gpus_per_worker``, ``workers`` and ``submit_s``) are siblings: same submitter, model
    and GPU count, submitted within :data:`SIBLING_S` of each other."""
    key = sibling_of(a)
    return (
        key is not None
        and key == sibling_of(b)
        and abs(float(a.submit_s) - float(b.submit_s)) <= SIBLING_S
    )


def sibling_of(job: Any) -> Key | None:
    return sibling_key(job.model, job.user, job.group, total_gpus(job))


def keys_of(model: str, user: str, group: str, gpus: float) -> list[tuple[str, Key]]:
    """(name, key) pairs ``job`` falls under, most specific first."""
    count = f"{gpus:g}"
    out: list[tuple[str, Key]] = []
    if model:
        out += [
            ("model+user+gpus", ("mug", model, user, count)),
            ("model+user", ("mu", model, user)),
            ("model+gpus", ("mg", model, count)),
            ("model", ("m", model)),
        ]
    if user:
        out += [("user+gpus", ("ug", user, count)), ("user", ("u", user))]
    if group:
        out += [("group+gpus", ("gg", group, count)), ("group", ("g", group))]
    out += [("gpus", ("n", count)), ("all", ("*",))]
    return out


class RuntimeHistory:
    """Runtimes of finished jobs per key; :meth:`law` gives a job's runtime law."""

    def __init__(
        self,
        *,
        window: int = 50,
        prior_n: float = 3.0,
        prior_sigma: float = 1.0,
        sibling_s: float = SIBLING_S,
    ) -> None:
        if window < 2:
            raise ValueError("window must be at least 2")
        self.window = window
        self.sibling_s = sibling_s
        self._recent: dict[Key, deque[tuple[float, float]]] = {}
        self.prior_n = prior_n
        #: log-distance from median to p90 before any key says otherwise (sigma 1: the
        #: 90th percentile 3.6x the median; a few runtimes say little about the spread)
        self.prior_spread = prior_sigma * Z90
        self._keys: dict[Key, _Window] = {}
        self.observed = 0

    def add(
        self,
        model: str,
        user: str,
        group: str,
        gpus: float,
        runtime_s: float,
        submit_s: float | None = None,
    ) -> None:
        """Learn that a job of this description, submitted at ``submit_s`` (when known),
        ran ``runtime_s`` on the reference GPU."""
        if not (runtime_s > 0 and math.isfinite(runtime_s)):
            return
        value = math.log(runtime_s)
        sibling = sibling_key(model, user, group, gpus)
        if sibling is not None and submit_s is not None and math.isfinite(submit_s):
            self._recent.setdefault(sibling, deque(maxlen=self.window)).append((submit_s, value))
        for _, key in keys_of(model, user, group, gpus):
            found = self._keys.get(key)
            if found is None:
                found = self._keys[key] = _Window(self.window)
            found.add(value)
        self.observed += 1

    def siblings(
        self, model: str, user: str, group: str, gpus: float, submit_s: float
    ) -> list[float]:
        """Log-runtimes of finished siblings: same submitter, model and GPU count,
        submitted within ``sibling_s`` of ``submit_s``."""
        sibling = sibling_key(model, user, group, gpus)
        recent = self._recent.get(sibling, ()) if sibling is not None else ()
        near = self.sibling_s
        return sorted(v for s, v in recent if abs(s - submit_s) <= near)

    def law(
        self, model: str, user: str, group: str, gpus: float, submit_s: float | None = None
    ) -> RuntimeLaw | None:
        """The runtime law of a job so described (submitted at ``submit_s`` when known),
        or None before any job finished."""
        mu: float | None = None
        spread = self.prior_spread
        n, name = 0, ""
        layers: list[tuple[str, list[float]]] = [
            (key_name, found.sorted)
            for key_name, key in reversed(keys_of(model, user, group, gpus))
            if (found := self._keys.get(key)) is not None and found.sorted
        ]
        if submit_s is not None and (near := self.siblings(model, user, group, gpus, submit_s)):
            layers.append((SIBLINGS, near))
        for key_name, values in layers:
            count = len(values)
            own_mu = _quantile(values, 0.5)
            own_spread = _quantile(values, 0.9) - own_mu if count >= 2 else None
            # Siblings are near-replicas of the job: their median is its median.
            weight = 1.0 if key_name == SIBLINGS else count / (count + self.prior_n)
            before = own_mu if mu is None or key_name != SIBLINGS else mu
            if mu is None:
                mu, spread = own_mu, self.prior_spread
            else:
                mu += weight * (own_mu - mu)
            if own_spread is not None:
                spread += weight * (own_spread - spread)
            # Where a key's own runtimes disagree with the shrunk median, the law is that
            # uncertain: its p90 reaches at least this key's median (and, when siblings
            # decide, the median of everything else).
            spread = max(spread, own_mu - mu, before - mu)
            n, name = count, key_name
        if mu is None:
            return None
        return RuntimeLaw(
            median_s=math.exp(mu), p90_s=math.exp(mu + max(spread, 0.0)), n=n, key=name
        )
