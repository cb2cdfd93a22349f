"""Errors of the core and of the parsers that feed it.

::

    CpnError
    ├── InvalidSpec        an AIJob, trace row or cluster file is malformed or impossible
    ├── PolicyError        a policy document is invalid (lists every field error)
    └── FormulaError       a priority formula is not in the safe grammar

Every error names where the problem is: a field path (``spec.resources.gpus``,
``levels[2].formula``), a file and row, or a formula column. An infeasible or
timed-out MILP is not an error: it is data in :class:`cpn.core.model.SolveStats`.
"""

from __future__ import annotations

from dataclasses import dataclass


class CpnError(Exception):
    """Base of every error cpn raises on purpose."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem at one field path."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidSpec(CpnError):
    """A job, trace row or cluster description is malformed or impossible."""

    def __init__(self, errors: list[FieldError] | str, *, where: str = "") -> None:
        self.errors = [FieldError("", errors)] if isinstance(errors, str) else list(errors)
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(prefix + "; ".join(str(e) for e in self.errors))


class PolicyError(CpnError):
    """A policy document is invalid. ``errors`` lists every problem found."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))


class FormulaError(CpnError):
    """A formula is not in the safe grammar. ``column`` is 1-based (0 = unknown)."""

    def __init__(self, message: str, *, column: int = 0) -> None:
        self.column = column
        super().__init__(f"{message} (at column {column})" if column else message)
