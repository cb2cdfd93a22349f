"""MemberCluster objects: connect to each member (kubeconfig from its Secret) and watch it."""

from __future__ import annotations

from typing import Any

import kopf

from cpn.api import constants as k


@kopf.on.event(k.GROUP, k.VERSION, k.MEMBER_PLURAL)
async def member_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    runtime = memo.runtime
    name = body["metadata"]["name"]
    if (
        type != "DELETED"
        and name in runtime.members
        and runtime.member_specs.get(name) == (body.get("spec"))
    ):
        return  # a status update of ours
    runtime.member_specs[name] = body.get("spec")
    await runtime.member_event(type or "ADDED", body)
