"""What the hub says: Namespaces (owners of jobs), AIJobs and the policy ConfigMap, from
their watches, and the last good policy saved and restored.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from cpn.api import constants as k
from cpn.api.aijobread import read_aijob
from cpn.api.policy import CONFIGMAP_KEY, parse_policy, parse_policy_configmap
from cpn.core.domains import check_domains
from cpn.core.errors import PolicyError
from cpn.core.policy import QueuePolicy
from cpn.runtime import lifecycle
from cpn.runtime.following import Following
from cpn.runtime.ports import Watch, WatchFn, describe, last_good_name
from cpn.runtime.state import RuntimeState
from cpn.runtime.store import Arrival, Record

log = logging.getLogger(__name__)


class HubWatch:
    """The hub's Namespaces, AIJobs and policy, as they change, into the runtime's shared
    ``state`` (its store and namespaces); record transitions go through ``following``."""

    def __init__(self, state: RuntimeState, following: Following) -> None:
        self.state = state
        self.following = following
        self.policy_loaded = asyncio.Event()  # a policy from the cluster is in force
        self.policy_settled = asyncio.Event()  # ... or the defaults, and it is known why
        self.policy_error = ""
        self.policy_warnings: list[str] = []  # of the policy last taken (domains with no node)
        self._restoring: asyncio.Task[None] | None = None
        self._saving: asyncio.Task[None] | None = None
        self._last_good: tuple[str, str] | None = None  # (document, version) to save
        self._policy_version: str | None = None
        self._listed: set[str] = set()  # keys of the AIJob list being taken, page by page
        self._learned_in_list = 0  # finished AIJobs learned from in it so far

    def namespace_event(self, event: str, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        labels = None if event == "DELETED" else meta.get("labels") or {}
        self.state.store.set_namespace(meta["name"], labels)

    def aijob_event(self, event: str, body: Mapping[str, Any]) -> None:
        """A watch event of an AIJob: read (:func:`cpn.api.aijobread.read_aijob`), taken by
        the store, and what follows from it (:func:`cpn.runtime.lifecycle.arrived`) done."""
        aijob = read_aijob(body)
        arrival: Arrival | None = self.state.store.put(aijob, gone=event == "DELETED")
        if arrival is not None:
            step = lifecycle.arrived(arrival)
            self.following.carry_out(arrival.record, step)

    def _aijobs_listed(self, items: list[Mapping[str, Any]]) -> None:
        """A (re-)list of every AIJob in one: :meth:`_aijobs_page`, then :meth:`_aijobs_end`."""
        self._aijobs_page(items, first=True)
        self._aijobs_end()

    def _aijobs_page(self, items: list[Mapping[str, Any]], *, first: bool) -> None:
        """One page of a (re-)list of every AIJob (``first``: a new list begins): each taken,
        and the estimator fed the Succeeded ones (:meth:`_learn_finished`)."""
        if first:
            self._listed = set()
        records = []
        with _no_collection():
            for item in items:
                key = f"{item['metadata']['namespace']}/{item['metadata']['name']}"
                self._listed.add(key)
                self.aijob_event("ADDED", item)
                record = self.state.store.records.get(key)
                if record is not None:
                    records.append(record)
            self._learned_in_list += self._learn_finished(records)

    def _aijobs_end(self) -> None:
        """A (re-)list of every AIJob is whole: those missing from it were deleted meanwhile;
        waiting jobs are estimated again if the list taught the estimator anything."""
        for key, record in list(self.state.store.records.items()):
            if key not in self._listed:
                meta = {"namespace": record.namespace, "name": record.name, "uid": record.uid}
                self.aijob_event("DELETED", {"metadata": meta})
        self._listed = set()
        count, self._learned_in_list = self._learned_in_list, 0
        if count:
            for record in self.state.store.pending():
                assert record.job is not None
                record.job = self.state.store.attach_estimate(record.job)
            log.info("learned from %d finished AIJobs on the hub", count)

    def _learn_finished(self, records: list[Record]) -> int:
        """Feed the estimator each Succeeded AIJob of ``records`` it has not seen (once per
        UID): the hub is where what was learned survives a restart or fail-over. Returns how
        many it learned from."""
        learn = self.state.estimator.recall
        count = 0
        for record in records:
            if record.phase != k.PHASE_SUCCEEDED or record.uid in self.state.learned:
                continue
            self.state.learned.add(record.uid)
            if record.job is None or record.actual_s <= 0 or not record.gpu_type:
                continue
            try:
                learn(record.job, record.gpu_type, record.actual_s)
            except Exception:  # the predictor must never take the operator down
                log.exception("predictor failed to learn from %s", record.key)
            count += 1
        return count

    def _namespaces_listed(self, items: list[Mapping[str, Any]]) -> None:
        self.state.store.namespaces = {}
        for item in items:
            self.namespace_event("ADDED", item)

    async def watch_hub(self) -> None:
        """Watch Namespaces (owners of jobs), then AIJobs, each listed before going on."""
        await self._watch_hub(
            self.state.hub.watch_namespaces, self.namespace_event, self._namespaces_listed
        )
        await self._watch_hub(
            self.state.hub.watch_aijobs,
            self.aijob_event,
            self._aijobs_listed,
            (self._aijobs_page, self._aijobs_end),
        )
        self.state.aijobs_listed = True

    async def _watch_hub(
        self,
        watch: Callable[[WatchFn], Watch],
        on_change: Callable[[str, Mapping[str, Any]], None],
        on_list: Callable[[list[Mapping[str, Any]]], None],
        paged: tuple[Callable[..., None], Callable[[], None]] | None = None,
    ) -> None:
        """Watch one kind; ``paged``: (take a page, the list is whole) for a paged watch."""
        listed = asyncio.Event()

        def on_event(event: str, obj: Mapping[str, Any] | None) -> None:
            if event == "PAGE" and obj is not None and paged is not None:
                take = functools.partial(paged[0], first=bool(obj.get("first")))
                self.state.threadsafe(take, list(obj.get("items") or []))
            elif event == "LIST" and obj is not None and obj.get("paged") and paged is not None:
                self.state.threadsafe(paged[1])
            elif event == "LIST" and obj is not None:
                self.state.threadsafe(on_list, list(obj.get("items") or []))
            elif event in {"ADDED", "MODIFIED", "DELETED"} and obj is not None:
                self.state.threadsafe(on_change, event, obj)
            elif event == "SYNCED":  # after the LIST, in order, on the loop
                self.state.threadsafe(listed.set)

        self.state.hub_informers.append(watch(on_event))
        await listed.wait()

    def watch_policy(self) -> Watch:
        """Watch the one policy ConfigMap (namespaced, by name: least privilege)."""

        def on_event(event: str, obj: Mapping[str, Any] | None) -> None:
            if event == "LIST" and obj is not None:
                self.state.threadsafe(self._policy_listed, list(obj.get("items") or []))
            elif event in {"ADDED", "MODIFIED", "DELETED"} and obj is not None:
                self.state.threadsafe(self._policy_from_watch, event, obj)

        informer = self.state.hub.watch_policy(
            self.state.config.namespace, self.state.config.policy_configmap, on_event
        )
        self.state.policy_informer = informer
        return informer

    def _policy_listed(self, items: list[Mapping[str, Any]]) -> None:
        """The policy ConfigMap listed: taken when valid; otherwise, while nothing is in force
        yet (at start), the last good policy saved in the cluster is."""
        for item in items:
            self._policy_from_watch("ADDED", item)
        if not self.policy_loaded.is_set() and self._restoring is None:
            cm = {"apiVersion": "v1", "kind": "ConfigMap", **items[0]} if items else None
            self._restoring = asyncio.get_running_loop().create_task(self._restore_last_good(cm))

    def _in_force(self) -> str:
        """What the refusal of a new policy leaves in force, for its Event."""
        if self.policy_loaded.is_set():
            return f"the last good policy (version {self.state.store.policy.version}) stays"
        if self.policy_settled.is_set():
            return "the built-in defaults stay"
        return "the last good policy saved in the cluster is looked for (next Event)"

    def _policy_from_watch(self, event: str, body: Mapping[str, Any]) -> None:
        cm = {"apiVersion": "v1", "kind": "ConfigMap", **body}
        version = (body.get("metadata") or {}).get("resourceVersion")
        if event == "DELETED":
            self.state.post_event(cm, "PolicyDeleted", f"policy deleted; {self._in_force()}", True)
            return
        if version == self._policy_version:
            return
        self._policy_version = version
        error = self.policy_event(body)
        if error:
            self.state.post_event(
                cm, "InvalidPolicy", f"refused, {self._in_force()}: {error}", True
            )
        else:
            self.state.post_event(cm, "PolicyAccepted", f"policy version {version} in force", False)
            for warning in self.policy_warnings:
                self.state.post_event(cm, "PolicyWarning", warning, True)

    def policy_event(self, body: Mapping[str, Any]) -> str:
        """A new policy ConfigMap; returns "" when taken, else why it was refused. A taken
        one is saved as the last good policy (:meth:`~cpn.runtime.ports.Hub.save_last_good`)."""
        try:
            policy = parse_policy_configmap(body)
        except PolicyError as err:
            self.policy_error = str(err)
            return self.policy_error
        refused, self.policy_warnings = check_domains(policy.domains, self._gpu_nodes())
        self.policy_error = "; ".join(f"domains: {why}" for why in refused)
        if refused:
            return self.policy_error
        for warning in self.policy_warnings:
            log.warning("policy version %s: domains: %s", policy.version, warning)
        self.use_policy(policy)
        text = (body.get("data") or {}).get(CONFIGMAP_KEY, "")
        self._last_good = (text, policy.version)
        if self._saving is None or self._saving.done():
            self._saving = asyncio.get_running_loop().create_task(self._save_last_good())
        return ""

    def _gpu_nodes(self) -> list[tuple[str, str, Mapping[str, str]]]:
        """The GPU nodes of the members as the last cycle saw them, with their labels (none
        before the members are connected: a policy taken then is checked node by node,
        :func:`cpn.core.domains.node_domain`)."""
        out = []
        for name, view in sorted(self.state.views.items()):
            member = self.state.members.get(name)
            mirror = member.nodes if member is not None else {}
            for node in view.nodes:
                labels = ((mirror.get(node.name) or {}).get("metadata") or {}).get("labels")
                out.append((name, node.name, labels or {}))
        return out

    async def _save_last_good(self) -> None:
        """Write the latest accepted policy to the last-good ConfigMap (the newest wins)."""
        name = last_good_name(self.state.config.policy_configmap)
        saved = None
        while self._last_good is not None and self._last_good != saved:
            saved = self._last_good
            try:
                await self.state.call(
                    self.state.hub.save_last_good, self.state.config.namespace, name, *saved
                )
            except Exception as err:  # noqa: BLE001 - hub unreachable in any way: logged
                log.warning("last good policy not saved in %s: %s", name, describe(err))
                return
            log.info("policy version %s saved as the last good one (%s)", saved[1], name)

    async def _restore_last_good(self, live: Mapping[str, Any] | None) -> None:
        """Start from the saved last good policy (the live one is broken or gone)."""
        name = last_good_name(self.state.config.policy_configmap)
        why = "is refused" if live is not None else "is missing"
        try:
            saved = await self.state.call(
                self.state.hub.load_last_good, self.state.config.namespace, name
            )
            if saved is None:
                raise LookupError(f"there is no {name}")
            policy = parse_policy(saved.text, version=saved.version)
        except Exception as err:  # noqa: BLE001 - unreadable in any way: logged, defaults
            message = (
                f"the policy ConfigMap {why} and no last good policy could be read "
                f"({describe(err)}): scheduling with the built-in defaults"
            )
            log.warning("%s", message)
            if live is not None:
                self.state.post_event(live, "PolicyDefaults", message, True)
        else:
            if self.policy_loaded.is_set():
                return  # a valid live policy came first
            self.use_policy(policy)
            message = (
                f"the policy ConfigMap {why}: the last good policy, version {saved.version} "
                f"(accepted {saved.accepted_at}, kept in {name}), is in force"
            )
            log.warning("%s", message)
            self.state.post_event(live or saved.body, "PolicyRestored", message, True)
        finally:
            self.policy_settled.set()

    def use_policy(self, policy: QueuePolicy) -> None:
        self.state.store.set_policy(policy)
        log.info("policy %s in force (version %s)", policy.name, policy.version)
        self.policy_loaded.set()
        self.policy_settled.set()
        for record in self.state.store.recheck_queues():
            self.state.event(record, "UnknownQueue", record.unknown_queue, warning=True)
        self.state.kick()


@contextmanager
def _no_collection() -> Iterator[None]:
    """No cyclic garbage collection inside: taking a page of AIJobs makes thousands of
    objects that all live on, and each collection they trigger walks every object
    already there (one hub of 100,000 AIJobs took a third longer to list with it on). After
    the first cycle they leave the collector's reach (:func:`cpn.runtime.loop.freeze_heap`)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
