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

The law's ``n`` (runtimes under the most specific key that had any) and ``key`` say
how much it rests on: the confidence the estimate states.

Pure: no clock, no I/O; O(window) per observation and O(keys) per query.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass

#: z-score of the 90th percentile.
Z90 = 1.2815515655446004

Key = tuple[str, ...]


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
        values = self.sorted
        pos = q * (len(values) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(values) - 1)
        return values[lo] + (values[hi] - values[lo]) * (pos - lo)


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

    def __init__(self, *, window: int = 50, prior_n: float = 3.0, prior_sigma: float = 1.0) -> None:
        if window < 2:
            raise ValueError("window must be at least 2")
        self.window = window
        self.prior_n = prior_n
        #: log-distance from median to p90 before any key says otherwise (sigma 1: the
        #: 90th percentile 3.6x the median; a few runtimes say little about the spread)
        self.prior_spread = prior_sigma * Z90
        self._keys: dict[Key, _Window] = {}
        self.observed = 0

    def add(self, model: str, user: str, group: str, gpus: float, runtime_s: float) -> None:
        """Learn that a job of this description ran ``runtime_s`` on the reference GPU."""
        if not (runtime_s > 0 and math.isfinite(runtime_s)):
            return
        value = math.log(runtime_s)
        for _, key in keys_of(model, user, group, gpus):
            found = self._keys.get(key)
            if found is None:
                found = self._keys[key] = _Window(self.window)
            found.add(value)
        self.observed += 1

    def law(self, model: str, user: str, group: str, gpus: float) -> RuntimeLaw | None:
        """The runtime law of a job so described, or None before any job finished."""
        mu: float | None = None
        spread = self.prior_spread
        n, name = 0, ""
        for key_name, key in reversed(keys_of(model, user, group, gpus)):
            found = self._keys.get(key)
            if found is None or not found.sorted:
                continue
            count = len(found.sorted)
            own_mu = found.quantile(0.5)
            own_spread = found.quantile(0.9) - own_mu if count >= 2 else None
            weight = count / (count + self.prior_n)
            if mu is None:
                mu, spread = own_mu, self.prior_spread
            else:
                mu += weight * (own_mu - mu)
            if own_spread is not None:
                spread += weight * (own_spread - spread)
            # Where a key's own runtimes disagree with the shrunk median, the law is that
            # uncertain: its p90 reaches at least this key's median.
            spread = max(spread, own_mu - mu)
            n, name = count, key_name
        if mu is None:
            return None
        return RuntimeLaw(
            median_s=math.exp(mu), p90_s=math.exp(mu + max(spread, 0.0)), n=n, key=name
        )
