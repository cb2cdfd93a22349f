"""Render what the operator knows of an AIJob into its ``.status``.

Pure: takes the values and ``now_s`` (for condition transition times) and
returns the dict to merge-patch. Conditions follow the Kubernetes API
conventions (type, status, reason, message, observedGeneration,
lastTransitionTime); a condition keeps its transition time while its status
does not change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    """The JSON merge patch that turns ``old`` into ``new`` (None deletes a key)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        if old.get(key) != value:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch
