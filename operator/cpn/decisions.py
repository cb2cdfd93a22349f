"""The decision log: one JSON record per scheduling cycle, complete enough to replay it.

A record holds the cycle's whole :class:`~cpn.core.model.Snapshot` (clock,
policy with its version, pending jobs with their estimates, running jobs,
clusters and nodes with what is free, bandwidth) and the resulting
:class:`~cpn.core.model.CyclePlan`, plus the cycle number and its wall time.
``cpn replay`` (:mod:`cpn.cli.replay`) reads it back.

The codec is lossless: :func:`decode` of :func:`encode` gives an object equal to
the original. It is driven by the dataclasses' own type hints, so a field added
to the model is logged without touching this file. Frozensets are written as
sorted lists, mappings as JSON objects (keys are strings throughout the model),
tuples as lists; floats keep their exact value (``repr`` round trip; infinities
as ``Infinity``, which Python's ``json`` reads back).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import logging.handlers
import os
import sys
import types
import typing
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import structlog

from cpn.core import model, policy
from cpn.core.model import CyclePlan, Snapshot

T = TypeVar("T")

#: Version of the record layout; bumped when a record could no longer be read as before.
FORMAT = 1
EVENT = "cpn.decision"

# Names the model's annotations use (QueuePolicy is imported only for type checking there).
_NAMES: dict[str, Any] = {**vars(model), **vars(policy)}
_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    found = _HINTS.get(cls)
    if found is None:
        found = typing.get_type_hints(cls, globalns=_NAMES)
        _HINTS[cls] = found
    return found


# -- encoding ---------------------------------------------------------------------------------
def encode(value: Any) -> Any:
    """A JSON-ready form of a model value (dataclass, mapping, frozenset, tuple, enum, scalar)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, frozenset | set):
        return sorted((encode(v) for v in value), key=lambda v: json.dumps(v))
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"cannot encode {type(value).__name__} in the decision log")


# -- decoding ---------------------------------------------------------------------------------
def decode(cls: type[T], data: Any) -> T:
    """The value of type ``cls`` that :func:`encode` turned into ``data``."""
    result: T = _decode(cls, data)
    return result


def _decode(hint: Any, data: Any) -> Any:
    if hint is Any:
        return data
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _decode(options[0], data)
        raise TypeError(f"ambiguous union {hint} in the decision log")
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        hints = _hints(hint)
        values = {
            f.name: _decode(hints[f.name], data[f.name])
            for f in dataclasses.fields(hint)
            if f.name in data
        }
        return hint(**values)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(data)
    if origin in (frozenset, set):
        (item,) = args or (Any,)
        return frozenset(_decode(item, v) for v in data)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v) for v in data)
        if args:
            return tuple(_decode(a, v) for a, v in zip(args, data, strict=True))
        return tuple(data)
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        key, item = args or (Any, Any)
        return types.MappingProxyType({_decode(key, k): _decode(item, v) for k, v in data.items()})
    if hint in (float, int, str, bool):
        # As written: JSON keeps 8 and 8.0 apart, so a value whose runtime type differs from
        # its annotation (an int in a float field) still comes back equal.
        if not isinstance(data, int | float | str | bool):
            raise TypeError(f"expected {hint.__name__}, got {data!r}")
        return data
    raise TypeError(f"cannot decode {hint!r} from the decision log")


# -- records ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """One cycle as logged: what it read and what it decided."""

    cycle: int
    wall_s: float
    snapshot: Snapshot
    plan: CyclePlan
    timestamp: str = ""


def record(cycle: int, wall_s: float, snapshot: Snapshot, plan: CyclePlan) -> dict[str, Any]:
    """The fields of one decision record (structlog adds the event name and timestamp)."""
    return {
        "format": FORMAT,
        "cycle": cycle,
        "wall_s": wall_s,
        "now_s": snapshot.now_s,
        "policy_version": snapshot.policy.version,
        "pending": len(snapshot.pending),
        "running": len(snapshot.running),
        "snapshot": encode(snapshot),
        "plan": encode(plan),
    }


def parse_record(line: str) -> Decision | None:
    """A decision from one log line; None for lines that are not decision records."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("event") != EVENT or "snapshot" not in data:
        return None
    if int(data.get("format", FORMAT)) > FORMAT:
        raise ValueError(f"decision record format {data['format']} is newer than this cpn")
    return Decision(
        cycle=int(data["cycle"]),
        wall_s=float(data.get("wall_s", 0.0)),
        snapshot=decode(Snapshot, data["snapshot"]),
        plan=decode(CyclePlan, data["plan"]),
        timestamp=str(data.get("timestamp", "")),
    )


def read_log(*paths: Path, mentioning: Collection[str] = ()) -> Iterator[Decision]:
    """Every decision of the given files, in file order (other lines are skipped). With
    ``mentioning``, only the records whose line holds one of these strings as JSON writes
    them (a job's key, say): the others are not decoded, which is most of the work."""
    needles = [json.dumps(text)[1:-1] for text in mentioning]
    for path in paths:
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if needles and not any(needle in line for needle in needles):
                    continue
                found = parse_record(line)
                if found is not None:
                    yield found


class DecisionLog:
    """Writes decision records, one JSON line each, through structlog.

    ``destination`` is a file path (rotated by size, ``backups`` old files kept)
    or ``-`` for standard output. Records go to a private stdlib logger that does
    not propagate, so kopf's log format never wraps them.
    """

    def __init__(self, destination: str, *, max_bytes: int = 64 << 20, backups: int = 5) -> None:
        self.destination = destination
        self._logger = logging.Logger(f"cpn.decisions.{id(self)}", logging.INFO)
        self._logger.propagate = False
        handler: logging.Handler
        if destination == "-":
            handler = logging.StreamHandler(sys.stdout)
        else:
            path = Path(destination)
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = _PrivateRotatingFileHandler(
                path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
            )
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._handler = handler
        self._logger.addHandler(handler)
        self._log = structlog.wrap_logger(
            self._logger,
            processors=[
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.JSONRenderer(),
            ],
            wrapper_class=structlog.BoundLogger,
        )

    def write(self, cycle: int, wall_s: float, snapshot: Snapshot, plan: CyclePlan) -> None:
        """Append the record of one cycle (safe to call from a worker thread)."""
        self._log.info(EVENT, **record(cycle, wall_s, snapshot, plan))

    def close(self) -> None:
        self._logger.removeHandler(self._handler)
        self._handler.close()


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """Log files readable by their owner only: the log holds every namespace's jobs."""

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.fchmod(fd, 0o600)  # also when the file existed with wider rights
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


def open_log(
    destination: str, *, max_bytes: int = 64 << 20, backups: int = 5
) -> DecisionLog | None:
    """The decision log for a configuration value ("" = off)."""
    if not destination:
        return None
    return DecisionLog(destination, max_bytes=max_bytes, backups=backups)
