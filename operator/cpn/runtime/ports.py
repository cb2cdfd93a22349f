"""What the runtime needs from outside it, as Protocols the adapters implement.

The runtime decides; the ports carry its decisions out and the world's changes in. Nothing
here talks to a cluster or reads a clock: :mod:`cpn.adapters` implements every port (the
Kubernetes client, the Lease, Prometheus, the system clock) and :mod:`cpn.handlers`
wires them. A failed call comes back as :class:`CallFailed`, never as a client
library's exception.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cpn.core.capacity import Usage
from cpn.core.health import Probe
from cpn.core.model import Cluster
from cpn.core.policy import Domain

#: A watch's events: ("LIST"|"ADDED"|"MODIFIED"|"DELETED"|"SYNCED"|"ERROR", object or None).
#: A paged watch passes a list on as it comes: "PAGE" events ({"items", "first"}: the first
#: page of a list), then "LIST" with {"items": [], "paged": True}.
WatchFn = Callable[[str, Mapping[str, Any] | None], None]
#: A member's watch events: (member, kind "nodes"|"pods"|"jobs", event, object or None).
MemberWatchFn = Callable[[str, str, str, Mapping[str, Any] | None], None]
#: A member's probe results: (member, result).
ProbeFn = Callable[[str, Probe], None]


class CallFailed(Exception):
    """A call to a cluster failed. ``str()`` is one line saying why; ``status`` is the API
    server's HTTP status when it answered; ``refused`` when retrying cannot change it."""

    def __init__(self, line: str, *, status: int | None = None, refused: bool = False) -> None:
        super().__init__(line)
        self.status = status
        self.refused = refused


class MemberUnusable(Exception):
    """A MemberCluster the operator cannot connect to (its kubeconfig); ``str()`` says why."""


def describe(err: BaseException, limit: int = 400) -> str:
    """A failure in one line: a :class:`CallFailed` as it says, else the exception's type
    and text."""
    if isinstance(err, CallFailed):
        text = str(err)
    else:
        text = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class Clock(Protocol):
    """Monotonic seconds (intervals, deadlines) and wall seconds since the epoch (what the
    hub shows, and what other processes compare)."""

    def monotonic(self) -> float: ...

    def wall(self) -> float: ...


class Watch(Protocol):
    """A running watch (list, then watch) of one kind of object."""

    def stop(self) -> None: ...


class Leadership(Protocol):
    def leading(self) -> bool:
        """False once this process may no longer act as the leader (fencing)."""
        ...


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU a pod holds, as its member's dcgm-exporter last reported it."""

    util_pct: float  # 0..100
    memory_mib: float | None  # framebuffer used; None when not reported
    at_s: float  # the sample's own timestamp (epoch seconds)


class MetricsSource(Protocol):
    """One member's Prometheus: :meth:`refresh` blocks (call it from a worker thread)."""

    def refresh(self) -> object: ...

    def cpu_util(self, now_s: float, started_s: Mapping[str, float]) -> dict[str, float]: ...

    def pod_gpus(self, now_s: float) -> Mapping[tuple[str, str], Sequence[GpuReading]]:
        """Fresh readings of the GPUs each (namespace, pod) holds."""
        ...

    def fresh(self, now_s: float) -> tuple[bool, str]: ...


class MemberInfo(Protocol):
    """What a MemberCluster object says that the runtime reads."""

    @property
    def namespace(self) -> str: ...

    @property
    def bandwidth_gbps(self) -> Mapping[str, float]: ...


class Member(Protocol):
    """One member cluster: mirrors of its nodes and cpn's Jobs, and writes to it (the
    writes block: call them from a worker thread; they raise :class:`CallFailed`)."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> MemberInfo: ...

    @property
    def jobs(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def nodes(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def probe_overdue_s(self) -> float: ...

    def synced(self) -> bool: ...

    def ready(self, grace_s: float) -> tuple[bool, str]: ...

    def cluster(
        self,
        cpn_usage: Mapping[str, Usage],
        *,
        ready: bool,
        cpu_util: Mapping[str, float] | None = None,
        domains: tuple[Domain, ...] = (),
    ) -> Cluster: ...

    def create_job(self, manifest: Mapping[str, Any]) -> str:
        """Create a member Job (AlreadyExists counts); its uid, or "" when it existed."""
        ...

    def delete_job(self, name: str) -> None:
        """Delete a member Job and its pods; a missing one counts as deleted."""
        ...

    def termination_messages(self, job: str) -> list[str]:
        """The termination messages of a member Job's pods' containers ("" for none)."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


def last_good_name(policy_configmap: str) -> str:
    """The ConfigMap the last accepted policy is saved in (:meth:`Hub.save_last_good`)."""
    return f"{policy_configmap}-last-good"


@dataclass(frozen=True, slots=True)
class SavedPolicy:
    """The last good policy saved in the cluster: the document, the version it had when
    accepted, and when; ``body`` is the ConfigMap, for Events about it."""

    text: str
    version: str
    accepted_at: str
    body: Mapping[str, Any]


class Hub(Protocol):
    """The hub cluster. Every method but the ``watch_*`` ones blocks (call it from a worker
    thread) and raises :class:`CallFailed` when the call fails."""

    def watch_namespaces(self, on_event: WatchFn) -> Watch: ...

    def watch_aijobs(self, on_event: WatchFn) -> Watch: ...

    def watch_policy(self, namespace: str, name: str, on_event: WatchFn) -> Watch: ...

    def patch_aijob_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch an AIJob's status (``status`` 404: the AIJob is gone)."""
        ...

    def patch_member_status(self, name: str, status: Mapping[str, Any]) -> None: ...

    def watch_benchmarks(self, on_event: WatchFn) -> Watch: ...

    def watch_groupquotas(self, on_event: WatchFn) -> Watch: ...

    def patch_groupquota_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None: ...

    def put_group_bounds(self, namespace: str, data: Mapping[str, str]) -> None:
        """Create or replace the ``cpn-group-bounds`` ConfigMap (params of the GroupQuota
        admission policy) in ``namespace`` (cpn's)."""
        ...

    def create_benchmark(self, body: Mapping[str, Any]) -> None:
        """Create a GPUBenchmark (one that exists counts as created)."""
        ...

    def patch_benchmark_status(self, name: str, status: Mapping[str, Any]) -> None: ...

    def list_members(self) -> list[Mapping[str, Any]]:
        """Every MemberCluster object."""
        ...

    def post_event(
        self, obj: Mapping[str, Any], reason: str, message: str, warning: bool
    ) -> None: ...

    def save_last_good(self, namespace: str, name: str, text: str, version: str) -> None: ...

    def load_last_good(self, namespace: str, name: str) -> SavedPolicy | None:
        """The saved copy, or None when there is none."""
        ...

    def connect_member(
        self, name: str, spec: Mapping[str, Any], on_event: MemberWatchFn, on_probe: ProbeFn
    ) -> Member:
        """A member (not started) from its MemberCluster spec, with the kubeconfig from its
        Secret; raises :class:`MemberUnusable` when that cannot be used."""
        ...

    def metrics_source(self, url: str, max_age_s: float) -> MetricsSource: ...
