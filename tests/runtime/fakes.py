"""Fakes of the runtime's ports for unit tests of its pure parts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cpn.api import constants as k
from cpn.api.aijobread import read_aijob
from cpn.runtime.store import Record, Store


@dataclass
class FakeClock:
    """A :class:`~cpn.runtime.ports.Clock` the test moves: ``now`` monotonic seconds and
    ``wall_s`` wall seconds, both advanced by :meth:`advance`."""

    now: float = 0.0
    wall_s: float = 1_700_000_000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_s

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall_s += seconds


class FakeLeadership:
    """A :class:`~cpn.runtime.ports.Leadership` the test sets."""

    def __init__(self, leading: bool = True) -> None:
        self.is_leading = leading

    def leading(self) -> bool:
        return self.is_leading


class FakeHub:
    """The part of :class:`~cpn.runtime.ports.Hub` the runtime writes through: status
    patches are recorded, or fail with ``fail_with`` while it is set."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self.fail_with: BaseException | None = None
        self.member_bodies: list[dict[str, Any]] = []  # the MemberClusters listed

    def list_members(self) -> list[dict[str, Any]]:
        return list(self.member_bodies)

    def patch_member_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Recorded as ("member", name, status)."""
        self.patches.append(("member", name, dict(status)))

    def patch_aijob_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.patches.append((namespace, name, dict(patch)))

    def patch_benchmark_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Recorded as ("", name, status), as AIJob status patches are."""
        self.patches.append(("", name, dict(status)))

    def put_group_bounds(self, namespace: str, data: Mapping[str, str]) -> None:
        """Recorded as ("group-bounds", namespace, data)."""
        self.patches.append(("group-bounds", namespace, dict(data)))

    def patch_groupquota_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Recorded as ("groupquota", "namespace/name", status)."""
        self.patches.append(("groupquota", f"{namespace}/{name}", dict(status)))


@dataclass
class FakeMemberInfo:
    namespace: str = "cpn-jobs"
    bandwidth_gbps: Mapping[str, float] = field(default_factory=dict)


class FakeMember:
    """A member whose Job creates fail with ``fail_with`` and deletes with
    ``fail_delete_with`` (when set); what succeeds is recorded."""

    def __init__(self, name: str, fail_with: BaseException | None = None) -> None:
        self.name = name
        self.spec = FakeMemberInfo()
        self.jobs: dict[str, Mapping[str, Any]] = {}
        self.nodes: dict[str, Mapping[str, Any]] = {}
        self.fail_with = fail_with
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.stopped = False
        self.fail_delete_with: BaseException | None = None
        self.probe_overdue_s = 6.0

    def create_job(self, manifest: Mapping[str, Any]) -> str:
        if self.fail_with is not None:
            raise self.fail_with
        self.created.append(manifest["metadata"]["name"])
        return "uid"

    def delete_job(self, name: str) -> None:
        if self.fail_delete_with is not None:
            raise self.fail_delete_with
        self.deleted.append(name)

    def synced(self) -> bool:
        return True

    def stop(self) -> None:
        self.stopped = True


def upsert(store: Store, body: Mapping[str, Any], *, user: str, group: str) -> Record:
    """What a watch event of AIJob ``body`` does to ``store``, its namespace owned by
    ``user`` and ``group`` (its labels say so, as the hub's would)."""
    namespace = body["metadata"]["namespace"]
    store.set_namespace(namespace, {k.LABEL_USER: user, k.LABEL_GROUP: group})
    arrival = store.put(read_aijob(body))
    assert arrival is not None
    return arrival.record
