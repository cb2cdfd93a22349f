"""Fixtures of the simulator's tests (builders live in ``simkit``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cpn.core.model import CyclePlan, Snapshot

PlanFn = Callable[[Snapshot], CyclePlan]


@pytest.fixture
def recorder() -> Callable[[PlanFn], tuple[PlanFn, list[Snapshot]]]:
    """Wrap a plan function so that the test sees every snapshot it was given."""

    def wrap(plan: PlanFn) -> tuple[PlanFn, list[Snapshot]]:
        seen: list[Snapshot] = []

        def recorded(snapshot: Snapshot) -> CyclePlan:
            seen.append(snapshot)
            return plan(snapshot)

        return recorded, seen

    return wrap
