"""Leader election with a coordination.k8s.io Lease: two replicas, one active.

:func:`acquire` blocks until this process holds the Lease; :class:`Renewer`
then renews it in a thread and calls ``on_lost`` (the process exits and comes
back as a standby) when no renewal has succeeded for the *renew deadline*,
two thirds of the lease duration. A standby takes the Lease only after it has
seen the Lease unchanged for a whole duration, timed by its own monotonic
clock (never by comparing another machine's timestamps). So the old leader
has stopped at least a third of a duration before a new one starts: no
cycle ever runs on both.
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
        # The other holder's record as last seen, and when (our monotonic clock).
        self._seen: tuple[Any, ...] = ()
        self._seen_at = 0.0

    @property
    def renew_deadline_s(self) -> float:
        """The holder gives up when it has not renewed for this long."""
        return self.duration_s * 2.0 / 3.0

    def _expired(self, record: tuple[Any, ...], duration_s: float) -> bool:
        """True once ``record`` (holder, renew time) has not changed for ``duration_s``."""
        now = time.monotonic()
        if record != self._seen:
            self._seen, self._seen_at = record, now
            return False
        return now - self._seen_at > duration_s

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
        duration = lease.spec.lease_duration_seconds or self.duration_s
        record = (holder, _parse(lease.spec.renew_time))
        if holder not in (None, "", self.identity) and not self._expired(record, duration):
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

    def release(self) -> bool:
        """Give the Lease up if we hold it (no holder: a standby takes it at its next poll
        instead of waiting out a whole duration); True when released."""
        lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=10)
        if lease.spec.holder_identity != self.identity:
            return False
        body = {
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": lease.metadata.resource_version,
            },
            "spec": {
                "holderIdentity": None,
                "leaseDurationSeconds": 1,
                "renewTime": _stamp(_now()),
                "acquireTime": None,
                "leaseTransitions": lease.spec.lease_transitions or 0,
            },
        }
        self.api.replace_namespaced_lease(self.name, self.namespace, body, _request_timeout=10)
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
        except Exception as err:  # noqa: BLE001 - API unreachable in any way: logged, keep trying
            log.warning("lease %s: %s", lease.name, err)
        if not waiting_logged:
            log.info("standby: lease %s/%s is held by another replica", lease.namespace, lease.name)
            waiting_logged = True
        time.sleep(period)
    return False


class Renewer(threading.Thread):
    """Renew the Lease every third of its duration; call ``on_lost`` once it is lost.

    A watchdog, not the renewing call, enforces the renew deadline, so a request
    that hangs cannot keep a deposed leader running.
    """

    def __init__(self, lease: Lease, on_lost: Callable[[], None]) -> None:
        super().__init__(name="lease-renewer", daemon=True)
        self.lease = lease
        self.on_lost = on_lost
        self.stopped = threading.Event()
        self.last_ok = time.monotonic()  # the start of the last successful renewal
        self._lost = threading.Event()

    def run(self) -> None:
        threading.Thread(target=self._watchdog, name="lease-watchdog", daemon=True).start()
        period = max(self.lease.duration_s / 3.0, 0.5)
        while not self.stopped.wait(period) and not self._lost.is_set():
            started = time.monotonic()
            try:
                if self.lease.try_acquire():
                    self.last_ok = started
                    continue
                log.error("lease %s taken by another replica", self.lease.name)
                self._lose()
                return
            except Exception as err:  # noqa: BLE001 - a failed renewal is logged; the watchdog steps down
                log.warning("lease renewal failed: %s", err)

    def holding(self) -> bool:
        """Whether this process may still act as the leader (renewed within the deadline)."""
        return not self._lost.is_set() and (
            time.monotonic() - self.last_ok <= self.lease.renew_deadline_s
        )

    def _watchdog(self) -> None:
        deadline = self.lease.renew_deadline_s
        while not self.stopped.wait(0.1):
            if time.monotonic() - self.last_ok > deadline:
                log.error("lease %s not renewed for %.1fs", self.lease.name, deadline)
                self._lose()
                return

    def _lose(self) -> None:
        if not self._lost.is_set():
            self._lost.set()
            self.on_lost()

    def step_down(self) -> None:
        """Stop leading at once (:func:`leading` answers False) and renew no more."""
        self._lost.set()
        self.stopped.set()


_renewer: Renewer | None = None


def install(renewer: Renewer) -> None:
    """Make :func:`leading` answer from ``renewer`` (one per process)."""
    global _renewer
    _renewer = renewer


def step_down() -> None:
    """Shutting down: stop acting as the leader now (every cycle and dispatch asks)."""
    if _renewer is not None:
        _renewer.step_down()


def release() -> None:
    """After :func:`step_down` and once the loop has stopped: give the Lease up, so the
    next instance starts at once. Best effort: otherwise it expires after its duration."""
    if _renewer is None:
        return
    try:
        if _renewer.lease.release():
            log.info("lease %s released", _renewer.lease.name)
    except Exception as err:  # noqa: BLE001 - best effort at exit: logged, the Lease expires
        log.warning("lease %s not released (it expires instead): %s", _renewer.lease.name, err)


def leading() -> bool:
    """False once this process may no longer act as the leader; True without election.
    The scheduling loop asks before every cycle and every dispatch (fencing)."""
    return _renewer is None or _renewer.holding()


class LeaseLeadership:
    """The runtime's :class:`~cpn.runtime.ports.Leadership` port: :func:`leading`."""

    def leading(self) -> bool:
        return leading()
