"""Leader election with a coordination.k8s.io Lease: two replicas, one active.

:func:`acquire` blocks until this process holds the Lease; :class:`Renewer`
then renews it in a thread and calls ``on_lost`` if it cannot for a whole
lease duration (the process should then exit, and come back as a standby).
A standby takes over once the holder has not renewed for the lease duration.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


class Lease:
    """One Lease object and this process's identity."""

    def __init__(
        self, api: client.ApiClient, namespace: str, name: str, identity: str, duration_s: float
    ) -> None:
        self.api: Any = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration_s = duration_s

    def try_acquire(self) -> bool:
        """Take or renew the Lease if free, expired or ours; True when we hold it."""
        now = _now()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.duration_s),
            "renewTime": _stamp(now),
        }
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=10)
        except ApiException as err:
            if err.status != 404:
                raise
            body = {
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {**spec, "acquireTime": _stamp(now), "leaseTransitions": 0},
            }
            try:
                self.api.create_namespaced_lease(self.namespace, body, _request_timeout=10)
                return True
            except ApiException as create_err:
                if create_err.status == 409:
                    return False
                raise
        holder = lease.spec.holder_identity
        renewed = _parse(lease.spec.renew_time)
        duration = lease.spec.lease_duration_seconds or self.duration_s
        expired = renewed is None or (now - renewed).total_seconds() > duration
        if holder not in (None, "", self.identity) and not expired:
            return False
        new_spec: dict[str, Any] = dict(spec)
        if holder != self.identity:
            new_spec["acquireTime"] = _stamp(now)
            new_spec["leaseTransitions"] = (lease.spec.lease_transitions or 0) + 1
        body = {
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": lease.metadata.resource_version,
            },
            "spec": new_spec,
        }
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, body, _request_timeout=10)
        except ApiException as err:
            if err.status == 409:  # someone else moved first
                return False
            raise
        return True


def acquire(lease: Lease, *, stop: threading.Event | None = None) -> bool:
    """Wait until this process holds the Lease (or ``stop`` is set)."""
    period = max(lease.duration_s / 3.0, 0.5)
    waiting_logged = False
    while stop is None or not stop.is_set():
        try:
            if lease.try_acquire():
                log.info(
                    "leader: holding lease %s/%s as %s", lease.namespace, lease.name, lease.identity
                )
                return True
        except Exception as err:  # API unreachable: keep trying
            log.warning("lease %s: %s", lease.name, err)
        if not waiting_logged:
            log.info("standby: lease %s/%s is held by another replica", lease.namespace, lease.name)
            waiting_logged = True
        time.sleep(period)
    return False


class Renewer(threading.Thread):
    """Renew the Lease every third of its duration; call ``on_lost`` when it is lost."""

    def __init__(self, lease: Lease, on_lost: Callable[[], None]) -> None:
        super().__init__(name="lease-renewer", daemon=True)
        self.lease = lease
        self.on_lost = on_lost
        self.stopped = threading.Event()

    def run(self) -> None:
        period = max(self.lease.duration_s / 3.0, 0.5)
        last_ok = time.monotonic()
        while not self.stopped.wait(period):
            try:
                if self.lease.try_acquire():
                    last_ok = time.monotonic()
                    continue
                log.error("lease %s taken by another replica", self.lease.name)
                self.on_lost()
                return
            except Exception as err:
                log.warning("lease renewal failed: %s", err)
            if time.monotonic() - last_ok > self.lease.duration_s:
                log.error("lease %s not renewed for %.0fs", self.lease.name, self.lease.duration_s)
                self.on_lost()
                return
