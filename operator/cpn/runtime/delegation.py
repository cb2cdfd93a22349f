"""Delegated quotas carried out: GroupQuotas watched on the hub (their users' quotas go into
the store's policy, :meth:`cpn.runtime.store.Store.set_group_quota`), their status written
(group, users, ``WithinBound``), and the ``cpn-group-bounds`` ConfigMap in cpn's namespace
kept equal to each bound namespace's group and the group's bound in the policy (the params of
the ValidatingAdmissionPolicy that refuses a GroupQuota above it, or in a namespace bound to
no group: manifests/common/groupquota-admission.yaml).

What to write is decided by :func:`wanted_bounds` and :func:`wanted_statuses` (pure); after
each cycle (:meth:`Delegation.after_cycle`) the differences are written, one pass at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from cpn.api.groupquota import bound_data, render_groupquota_status
from cpn.core.delegated import above_bound
from cpn.runtime.ports import describe
from cpn.runtime.state import RuntimeState
from cpn.runtime.store import Store

log = logging.getLogger(__name__)


def wanted_bounds(store: Store) -> dict[str, str]:
    """The data of the ``cpn-group-bounds`` ConfigMap: every existing namespace bound to a
    group, with the group's bound (:func:`cpn.api.groupquota.bound_data`)."""
    bound = {ns: store.bound_group(ns) for ns in store.namespaces}
    return bound_data({ns: g for ns, g in bound.items() if g}, store.base_policy)


def wanted_statuses(store: Store, now_s: float) -> dict[str, dict[str, Any]]:
    """The status of each GroupQuota whose status says otherwise, by ``namespace/name``."""
    out = {}
    for item in store.delegated():
        body = store.group_quotas[item.key]
        old = body.get("status") or {}
        generation = int((body.get("metadata") or {}).get("generation") or 0)
        status = render_groupquota_status(
            item,
            above_bound(item, store.base_policy) if item.group else [],
            generation=generation,
            now_s=now_s,
            previous=old.get("conditions") or (),
        )
        if status != old:
            out[item.key] = status
    return out


class Delegation:
    """GroupQuotas and group bounds on the hub, for the runtime sharing ``state``."""

    def __init__(self, state: RuntimeState) -> None:
        self.state = state
        self.listed = False
        self._bounds: dict[str, str] | None = None  # written (None: not yet as the leader)
        self._busy = False

    def watch(self) -> None:
        """Start the GroupQuota watch (not waited for: a hub without the CRD still schedules)."""

        def on_event(event: str, obj: Mapping[str, Any] | None) -> None:
            if obj is not None and event in {"LIST", "ADDED", "MODIFIED", "DELETED"}:
                self.state.threadsafe(self.groupquota_event, event, obj)

        self.state.hub_informers.append(self.state.hub.watch_groupquotas(on_event))

    def groupquota_event(self, event: str, obj: Mapping[str, Any]) -> None:
        store = self.state.store
        if event == "LIST":
            for key in list(store.group_quotas):
                store.set_group_quota(key, None)
            for item in obj.get("items") or []:
                store.set_group_quota(_key(item), item)
            self.listed = True
        else:
            store.set_group_quota(_key(obj), None if event == "DELETED" else obj)
        self.state.kick()

    def after_cycle(self) -> None:
        """Write what differs (statuses, group bounds), in the background, one pass at a time."""
        if self._busy or self.state.loop is None:
            return
        self._busy = True
        self.state.loop.create_task(self._write())

    async def _write(self) -> None:
        try:
            await self._write_bounds()
            if self.listed:
                await self._write_statuses()
        except Exception as err:  # noqa: BLE001 - the hub unreachable in any way: next cycle
            log.warning("delegated quotas: hub write failed: %s", describe(err))
        finally:
            self._busy = False

    async def _write_bounds(self) -> None:
        wanted = wanted_bounds(self.state.store)
        if wanted != self._bounds:
            namespace = self.state.config.namespace
            await self.state.call(self.state.hub.put_group_bounds, namespace, wanted)
            self._bounds = wanted
            log.info(
                "group bounds written: %d namespaces bound to a group",
                len([key for key in wanted if key.endswith(".group")]),
            )

    async def _write_statuses(self) -> None:
        now_s = self.state.clock.wall()
        for key, status in wanted_statuses(self.state.store, now_s).items():
            namespace, name = key.split("/", 1)
            await self.state.call(self.state.hub.patch_groupquota_status, namespace, name, status)


def _key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
