"""Render what the operator knows of an AIJob into its ``.status``.

Pure: takes the values and ``now_s`` (for condition transition times) and
returns the dict to merge-patch. Conditions follow the Kubernetes API
conventions (type, status, reason, message, observedGeneration,
lastTransitionTime); a condition keeps its transition time while its status
does not change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any


def rfc3339(epoch_s: float | None) -> str | None:
    """Epoch seconds as an RFC 3339 UTC timestamp (seconds precision)."""
    if epoch_s is None or epoch_s <= 0:
        return None
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def human_duration(seconds: float | None) -> str:
    """1h12m, 45s, 3d4h: short, for printer columns."""
    if seconds is None or seconds != seconds or seconds < 0:
        return ""
    s = round(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{s:02d}s"
    return f"{s}s"


def clock(epoch_s: float | None) -> str:
    """HH:MM:SSZ (UTC) for printer columns; absolute, so it only changes when the ETA does."""
    if epoch_s is None or epoch_s <= 0:
        return ""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%H:%M:%SZ")


def condition(
    type_: str,
    ok: bool | None,
    reason: str,
    message: str,
    *,
    generation: int,
    now_s: float,
    previous: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """One condition; keeps the previous transition time if the status is unchanged."""
    status = "Unknown" if ok is None else ("True" if ok else "False")
    since = rfc3339(now_s)
    for old in previous:
        if old.get("type") == type_ and old.get("status") == status:
            since = old.get("lastTransitionTime") or since
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:1024],
        "observedGeneration": generation,
        "lastTransitionTime": since,
    }


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``: None deletes a key.
    A server merges an object in the patch into the object it has, so an object present
    on both sides is patched key by key, its keys gone set to None too (else a range's
    ``earliest`` left out of the new status would stay on the hub, passing its time)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        was = old.get(key)
        if was == value:
            continue
        if isinstance(was, Mapping) and isinstance(value, Mapping):
            patch[key] = merge_patch(was, value)
        else:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


#: A projected start closer than this to the moment the status is written is shown as
#: "imminent", not as an instant (which would pass before the next refresh could move it).
IMMINENT_S = 30.0
#: What the ``eta`` column shows for such a start.
IMMINENT = "imminent"


def queue_positions(order: Iterable[tuple[str, str]]) -> dict[str, int]:
    """The place of each waiting job in its queue: 1..n per queue, no duplicates, no holes.

    ``order`` is (job key, queue) of the jobs still waiting, best first (the cycle's
    order); a key met twice keeps its first place.
    """
    taken: dict[str, int] = {}
    places: dict[str, int] = {}
    for key, queue in order:
        if key in places:
            continue
        taken[queue] = taken.get(queue, 0) + 1
        places[key] = taken[queue]
    return places


def upcoming(at_s: float | None, now_s: float, imminent_s: float = IMMINENT_S) -> float | None:
    """``at_s`` when it is more than ``imminent_s`` after ``now_s``; else None (unknown, or
    so near or past that it is shown as imminent)."""
    if at_s is None or at_s != at_s or at_s <= now_s + imminent_s:
        return None
    return at_s


def start_fields(
    start_s: float | None,
    low_s: float | None,
    high_s: float | None,
    now_s: float,
    imminent_s: float = IMMINENT_S,
) -> tuple[dict[str, Any], float | None]:
    """A waiting job's start as its status shows it at ``now_s``, and when to render it
    again.

    The fields: ``estimatedStart`` (RFC 3339), ``eta`` (clock time, or "imminent"),
    ``estimatedStartRange`` {earliest, latest}; None leaves a field out. No instant shown
    is before ``now_s + imminent_s``; a bound of the range that near is left out
    (earliest: it could be any moment; latest: then the whole range). The second value is
    the imminent window before the first instant shown (None when none is): render again
    by then (that render shows "imminent" instead), and no instant shown is ever in the
    past, even when the write lands up to the whole window late (a loaded operator).
    """
    point = upcoming(start_s, now_s, imminent_s)
    fields: dict[str, Any] = {
        "estimatedStart": rfc3339(point),
        "eta": IMMINENT if start_s is not None and point is None else (clock(point) or None),
        "estimatedStartRange": None,
    }
    shown = [point]
    latest = upcoming(high_s, now_s, imminent_s)
    if low_s is not None and latest is not None and low_s <= latest:
        earliest = upcoming(low_s, now_s, imminent_s)
        bounds = (("earliest", earliest), ("latest", latest))
        fields["estimatedStartRange"] = {k: rfc3339(at) for k, at in bounds if at is not None}
        shown += [earliest, latest]
    instants = [at for at in shown if at is not None]
    return fields, (min(instants) - imminent_s if instants else None)


def likely(span: Mapping[str, str] | None) -> str:
    """ " (likely 14:05:00Z to 15:30:00Z)" of a start range, " (likely by ...)" without an
    earliest bound, "" without a range."""
    if not span or "latest" not in span:
        return ""
    if "earliest" not in span:
        return f" (likely by {span['latest'][11:]})"
    return f" (likely {span['earliest'][11:]} to {span['latest'][11:]})"
