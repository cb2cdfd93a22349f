"""The runtime's side of delegated quotas, on fake ports: GroupQuotas from their watch go into
the policy in force (the group's bound wins), and after a cycle the group bounds and the
GroupQuotas' status are written to the hub, once each until something changes."""

from __future__ import annotations

import asyncio
from typing import Any

from cpn.api.policy import parse_policy
from cpn.config import OperatorConfig
from cpn.runtime.engine import Runtime
from tests.runtime.fakes import FakeClock, FakeHub, FakeLeadership
from tests.runtime.test_store import FixedEstimator


def split(gpus: float, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": "split", "namespace": "team-a", "generation": 1},
        "spec": {"users": {"alice": {"gpus": gpus}}},
    }
    if status is not None:
        body["status"] = status
    return body


def test_groupquotas_are_applied_and_their_bounds_and_status_written() -> None:
    hub = FakeHub()
    runtime = Runtime(
        OperatorConfig(), hub, FixedEstimator(), clock=FakeClock(), leadership=FakeLeadership()
    )
    delegation = runtime.scheduler.delegation
    store = runtime.store
    store.set_policy(parse_policy("quotas: {groups: {vision: {gpus: 4}}}"))
    store.set_namespace("team-a", {"cpn.io/group": "vision"})
    store.set_namespace("kube-system", {})
    delegation.groupquota_event("LIST", {"items": [split(6)]})
    assert store.policy.quotas.groups["vision"].users["alice"].gpus == 4  # the bound wins

    async def written() -> list[tuple[str, str, dict[str, Any]]]:
        hub.patches.clear()
        delegation.after_cycle()
        await asyncio.sleep(0)
        while delegation._busy:
            await asyncio.sleep(0.01)
        return list(hub.patches)

    async def scenario() -> None:
        runtime.state.loop = asyncio.get_running_loop()
        bounds, status = await written()
        assert bounds == (
            "group-bounds",
            "cpn-system",
            {"team-a.group": "vision", "team-a.gpus": "4"},
        )
        assert status[:2] == ("groupquota", "team-a/split")
        (cond,) = status[2]["conditions"]
        assert (cond["status"], cond["reason"]) == ("False", "AboveGroupBound")
        assert "spec.users.alice.gpus: 6 exceeds the group's bound 4" in cond["message"]
        # its status came back with the object: nothing more to write
        delegation.groupquota_event("MODIFIED", split(6, status[2]))
        assert await written() == []
        # the group admin lowers it: applied as written, and the status says so
        delegation.groupquota_event("MODIFIED", split(2, status[2]))
        assert store.policy.quotas.groups["vision"].users["alice"].gpus == 2
        ((_, _, new),) = await written()
        assert new["conditions"][0]["reason"] == "WithinBound"
        # deleted: the policy's users again (none)
        delegation.groupquota_event("DELETED", split(2))
        assert "alice" not in store.policy.quotas.groups["vision"].users

    asyncio.run(scenario())
