"""Staging, the pure part: what a staging is predicted to take, and the links' bandwidth
learned from the stagings that finished.

Every staging that succeeds is one measurement of its link (source -> member): its bytes
over its seconds. A link's estimate is the median of its last :data:`WINDOW` measurements
(robust: one staging slowed by a busy node or a slow start does not drag the estimate),
with the static figure (MemberCluster ``spec.bandwidthGbps``) counted as one more
measurement while fewer than :data:`TRUSTED` are in: the static figure is the prior, and
from the third staging on it no longer counts. A link with no staging yet keeps its
static figure.

An input declared without ``sizeBytes`` is staged all the same; the copy program reports
the bytes it copied (its termination message, :func:`copied_bytes`), and that size is
kept per (source, input) (:func:`sized`): the member's cache entry, later transfer
estimates of that input from that source and the link's measurement all use it.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from cpn.core.model import Job

#: measurements kept per link, and how many before the prior no longer counts
WINDOW = 9
TRUSTED = 3
_BITS_PER_BYTE = 8.0
_GBIT = 1e9
_BYTES_PER_GB = 1e9


def gbps(size_bytes: float, seconds: float) -> float | None:
    """The bandwidth (Gbit/s) of moving ``size_bytes`` in ``seconds``; None when either is
    not positive (nothing learned from an empty or instant copy)."""
    if size_bytes <= 0 or seconds <= 0:
        return None
    return size_bytes * _BITS_PER_BYTE / _GBIT / seconds


def seconds(size_bytes: float, link_gbps: float | None) -> float:
    """Seconds to move ``size_bytes`` over a ``link_gbps`` link (0 when either is unknown)."""
    if size_bytes <= 0 or not link_gbps or link_gbps <= 0:
        return 0.0
    return size_bytes * _BITS_PER_BYTE / _GBIT / link_gbps


@dataclass(slots=True)
class Links:
    """The learned links: (source, member) -> its last measurements, oldest first."""

    samples: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def observe(self, source: str, member: str, size_bytes: float, took_s: float) -> bool:
        """Count one staging of ``size_bytes`` from ``source`` to ``member`` that took
        ``took_s``; False when it teaches nothing (see :func:`gbps`)."""
        measured = gbps(size_bytes, took_s)
        if measured is None or not source or source == member:
            return False
        kept = self.samples.setdefault((source, member), [])
        kept.append(measured)
        del kept[:-WINDOW]
        return True

    def estimate(self, source: str, member: str, prior: float | None) -> float | None:
        """The link's bandwidth (Gbit/s): its measurements' median, with ``prior`` as one
        more while fewer than :data:`TRUSTED` are in; ``prior`` alone when none is."""
        kept = self.samples.get((source, member), [])
        if not kept:
            return prior
        values = list(kept)
        if len(values) < TRUSTED and prior is not None and prior > 0:
            values.append(prior)
        return statistics.median(values)

    def count(self, source: str, member: str) -> int:
        return len(self.samples.get((source, member), ()))

    def overlay(self, table: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
        """``table`` (member -> member -> static Gbit/s, read either way) with every learned
        link's estimate in place of its static figure."""
        out = {name: dict(row) for name, row in table.items()}
        for source, member in self.samples:
            prior = _static(table, source, member)
            value = self.estimate(source, member, prior)
            if value is not None:
                out.setdefault(source, {})[member] = value
        return out

    def rows(self, links: Iterable[tuple[str, str]] = ()) -> list[tuple[str, str, float, int]]:
        """(source, member, estimate, measurements) of every learned link (and of ``links``)."""
        keys = sorted(set(self.samples) | set(links))
        out = []
        for source, member in keys:
            value = self.estimate(source, member, None)
            if value is not None:
                out.append((source, member, value, self.count(source, member)))
        return out


def _static(table: Mapping[str, Mapping[str, float]], source: str, member: str) -> float | None:
    value = table.get(source, {}).get(member)
    if value is None:
        value = table.get(member, {}).get(source)
    return value


def copied_bytes(messages: Iterable[str]) -> int | None:
    """The bytes a staging copied, from its pod's termination messages: the first that is
    a JSON object with a positive integer ``bytes`` (the copy program's report); None when
    none is."""
    for message in messages:
        try:
            doc = json.loads(message)
        except ValueError:
            continue
        value = doc.get("bytes") if isinstance(doc, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def sized(job: Job, learned: Mapping[tuple[str, str], int]) -> Job:
    """``job`` with each input declared without a size given the size learned when it was
    staged from its source (``learned``: (source, ident) -> bytes); as is when none is."""
    inputs = tuple(
        replace(i, size_gb=learned[(i.location or "", i.ident)] / _BYTES_PER_GB)
        if i.size_gb <= 0 and (i.location or "", i.ident) in learned
        else i
        for i in job.inputs
    )
    return job if inputs == job.inputs else replace(job, inputs=inputs)
