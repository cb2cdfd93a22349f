"""Whether a member cluster answers, from the results of probing its API server.

The adapters ask each member's API server on a schedule of their own (not from watch
traffic: a hung server keeps its watch connections open and sends nothing, which looks
like a quiet cluster) and hand each result over as a :class:`Probe`. :class:`Probes`
folds the results into what the verdict needs (constant memory), and :func:`health`
reads the verdict at an instant: a member is ready unless its probes have failed for
``grace_s`` since the first miss of the current run of misses. A probe whose result is
overdue counts as missed from when it became overdue, so a probe that hangs itself
cannot keep a member ready. Times are seconds on one monotonic clock, given by the
caller.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Probe:
    """One probe of a member's API server: answered or not, when it was sent, why not."""

    ok: bool
    at_s: float
    error: str = ""


@dataclass(frozen=True, slots=True)
class Probes:
    """What a member's probes said so far, folded by :meth:`add`."""

    last_s: float | None = None
    """When the latest probe was sent (None: no probe yet)."""
    first_miss_s: float | None = None
    """When the first of the current run of failed probes was sent (None: the latest
    probe answered)."""
    misses: int = 0
    """Failed probes in the current run."""
    error: str = ""
    """The latest failed probe's error."""

    def add(self, probe: Probe) -> Probes:
        """The fold with one more result (one sent before the latest is ignored)."""
        if self.last_s is not None and probe.at_s < self.last_s:
            return self
        if probe.ok:
            return Probes(last_s=probe.at_s)
        first = self.first_miss_s if self.first_miss_s is not None else probe.at_s
        return Probes(
            last_s=probe.at_s, first_miss_s=first, misses=self.misses + 1, error=probe.error
        )


@dataclass(frozen=True, slots=True)
class Health:
    """A member's verdict at one instant."""

    ready: bool
    since_s: float | None
    """Not ready: the first missed probe (what the requeue timeout counts from).
    Ready: None."""
    reason: str
    """``Answers``; ``Missing`` (probes fail, still within the grace); ``Unreachable``;
    ``NotProbed`` (no result yet)."""
    message: str
    """Why not ready, with the latest probe error ("" when ready)."""


def health(probes: Probes, now_s: float, *, grace_s: float, overdue_s: float) -> Health:
    """The verdict at ``now_s``: not ready once probes have failed for ``grace_s`` from
    the first miss. No result for ``overdue_s`` after the latest probe was sent counts as
    a miss from then on (the prober promises a result within that)."""
    if probes.last_s is None:
        return Health(False, None, "NotProbed", "not probed yet")
    first, error = probes.first_miss_s, probes.error
    if first is None and now_s >= probes.last_s + overdue_s:
        first, error = probes.last_s + overdue_s, f"no probe result for over {overdue_s:g}s"
    if first is None:
        return Health(True, None, "Answers", "")
    if now_s - first < grace_s:
        return Health(True, None, "Missing", "")
    return Health(
        False, first, "Unreachable", f"no answer to probes for over {grace_s:g}s: {error}"
    )
