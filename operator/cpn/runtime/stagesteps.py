"""A record's staging transitions, pure (as :mod:`cpn.runtime.lifecycle`'s): placed with
inputs to copy -> ``Staging``; every input there -> ``Dispatched`` (its member Job to be
created); a staging out of attempts -> ``Failed``. And the member caches' bookkeeping:
what a staging that succeeded, a job that reads its inputs and the eviction rule do to
one member's cache (:mod:`cpn.core.datacache`), and what its MemberCluster status shows.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from cpn.api import constants as k
from cpn.api.aijob import parse_time
from cpn.api.status import human_duration, rfc3339
from cpn.core.datacache import evict
from cpn.core.model import Cached
from cpn.runtime.effects import KICK, WRITE, Count, CreateJob, Event
from cpn.runtime.lifecycle import Step
from cpn.runtime.store import Record

#: entries a MemberCluster's ``status.cache`` lists (the most recently used first)
MAX_LISTED = 20
_GB = 1e9


def staging_begun(
    record: Record, waits: tuple[str, ...], moving: tuple[str, ...], predicted_s: float
) -> Step:
    """Placed (its GPUs held), its member Job not created yet: it waits for ``waits`` (input
    idents) to be on its member, ``moving`` of them copied by stagings it starts."""
    shared = [ident for ident in waits if ident not in moving]
    parts = []
    if moving:
        parts.append(f"copying {', '.join(moving)}")
    if shared:
        parts.append(f"waiting for {', '.join(shared)} (staged there by another job)")
    message = (
        f"staging on {record.cluster}: {'; '.join(parts)}; predicted "
        f"{human_duration(predicted_s) or '0s'}"
    )
    new = replace(
        record,
        phase=k.PHASE_STAGING,
        staging=waits,
        staging_predicted_s=predicted_s,
        staging_actual_s=0.0,
        reason="Staging",
        message=message,
    )
    return Step(new, (Event("Staging", message), WRITE))


def staging_done(record: Record, took_s: float, now_s: float, create: CreateJob) -> Step:
    """Every input it waits for is on its member: Dispatched from now (its start deadline
    counts from now, its transfer done), its member Job to be created."""
    message = (
        f"inputs staged on {record.cluster} in {human_duration(took_s) or '0s'} "
        f"(predicted {human_duration(record.staging_predicted_s) or '0s'}); "
        f"starting on {record.gpu_type}, predicted {human_duration(record.predicted_runtime_s)}"
    )
    new = _out_of_staging(
        record,
        k.PHASE_DISPATCHED,
        "Dispatched",
        message,
        staging_actual_s=took_s,
        dispatch_s=now_s,
        transfer_s=0.0,  # the transfer is over: its end no longer waits on it
    )
    return Step(new, (Event("Staged", message), create))


def _out_of_staging(
    record: Record, phase: str, reason: str, message: str, **changes: Any
) -> Record:
    return replace(record, phase=phase, staging=(), reason=reason, message=message, **changes)


def staging_retrying(record: Record, ident: str, attempt: int, why: str, delay_s: float) -> Step:
    """A staging it waits for failed and is retried after ``delay_s``: told, nothing else."""
    message = (
        f"staging {ident} on {record.cluster}: attempt {attempt} failed ({why}); "
        f"retrying in {delay_s:.0f}s"
    )
    return Step(replace(record, message=message), (Event("StagingRetry", message, True), WRITE))


def staging_failed(record: Record, ident: str, attempts: int, why: str, now_s: float) -> Step:
    """A staging it waits for failed ``attempts`` times, the policy's most: the AIJob fails
    (its GPUs released; nothing of it was marked present)."""
    message = (
        f"staging {ident} on {record.cluster} failed {attempts} time(s), the last: {why}; "
        "no staging attempts left (policy data.staging_attempts)"
    )
    new = _out_of_staging(
        record, k.PHASE_FAILED, "StagingFailed", message, failure=why, finish_s=now_s
    )
    return Step(new, (Count("ended"), Event("StagingFailed", message, True), WRITE, KICK))


def present(
    cache: Mapping[str, Cached], ident: str, size_bytes: int, now_s: float
) -> dict[str, Cached]:
    """``cache`` once ``ident`` (``size_bytes`` long) was staged there, complete at ``now_s``;
    a size of 0 (not known) keeps the size the cache already has for it."""
    out = dict(cache)
    held = out.get(ident)
    size_gb = held.size_gb if size_bytes <= 0 and held is not None else size_bytes / _GB
    out[ident] = Cached(size_gb=size_gb, last_used_s=now_s, ready_s=now_s)
    return out


def used(cache: Mapping[str, Cached], idents: Collection[str], now_s: float) -> dict[str, Cached]:
    """``cache`` once a job started reading ``idents`` at ``now_s``."""
    out = dict(cache)
    for ident in idents:
        held = out.get(ident)
        if held is not None:
            out[ident] = replace(held, last_used_s=max(held.last_used_s, now_s))
    return out


def kept(
    cache: Mapping[str, Cached], capacity_gb: float | None, needed: Collection[str]
) -> tuple[dict[str, Cached], tuple[str, ...]]:
    """``cache`` under the policy's capacity (:func:`cpn.core.datacache.evict`) and the
    idents evicted."""
    out = evict(cache, capacity_gb, needed)
    return out, tuple(sorted(set(cache) - set(out)))


def cache_status(cache: Mapping[str, Cached], capacity_gb: float | None) -> dict[str, Any]:
    """A MemberCluster's ``status.cache``: bytes used of the capacity, how many inputs,
    and the :data:`MAX_LISTED` most recently used (name@version, bytes, last use)."""
    rows = sorted(cache.items(), key=lambda item: (-item[1].last_used_s, item[0]))
    return {
        "usedBytes": round(sum(c.size_gb for c in cache.values()) * _GB),
        "capacityBytes": None if capacity_gb is None else round(capacity_gb * _GB),
        "count": len(cache),
        "entries": [
            {
                "input": ident,
                "sizeBytes": round(held.size_gb * _GB),
                "lastUsed": rfc3339(held.last_used_s),
            }
            for ident, held in rows[:MAX_LISTED]
        ],
    }


def cache_from_status(status: Mapping[str, Any]) -> dict[str, Cached]:
    """The cache a MemberCluster's ``status.cache`` lists (after a restart; entries beyond
    :data:`MAX_LISTED` were not listed and are not known again; unreadable ones skipped)."""
    out: dict[str, Cached] = {}
    section = status.get("cache")
    if not isinstance(section, Mapping):
        return out
    for row in section.get("entries") or ():
        if not isinstance(row, Mapping) or not isinstance(row.get("input"), str):
            continue
        try:
            size = float(row.get("sizeBytes") or 0)
        except (TypeError, ValueError):
            continue
        last = parse_time(row.get("lastUsed")) or 0.0
        out[row["input"]] = Cached(size_gb=size / _GB, last_used_s=last, ready_s=last)
    return out
