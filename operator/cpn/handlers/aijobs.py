"""AIJob and Namespace events feed the runtime's store; deletion removes the member Job."""

from __future__ import annotations

from typing import Any

import kopf

from cpn.api import constants as k


@kopf.on.event(k.GROUP, k.VERSION, k.AIJOB_PLURAL)
def aijob_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    memo.runtime.aijob_event(type or "ADDED", body)


@kopf.on.delete(k.GROUP, k.VERSION, k.AIJOB_PLURAL, optional=False)
async def aijob_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    try:
        await memo.runtime.aijob_deleting(body)
    except RuntimeError as err:
        raise kopf.TemporaryError(str(err), delay=10) from err


@kopf.on.event("", "v1", "namespaces")
def namespace_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    memo.runtime.namespace_event(type or "ADDED", body)
