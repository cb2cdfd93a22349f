"""High availability: two operator replicas behind a Lease on the real hub, one active.

Stated bound: a standby takes over at most one lease duration plus one poll (a third of
a duration) after the leader's last renewal, plus its own start-up; a deposed leader
stops acting a third of a duration before anyone else may start."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from cpn.adapters.kube import client_from_kubeconfig
from cpn.adapters.lease import Lease, Renewer
from cpn.cli.devbed import start_operator, stop_process, wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import (
    Hub,
    aijob,
    apply,
    free_port,
    get,
    new_namespace,
    running_hub,
    wait_status,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DURATION_S = 6


def lease_holder(hub: Hub, name: str = "cpn-operator") -> tuple[str, int]:
    lease = client.CoordinationV1Api(hub.api).read_namespaced_lease(name, "cpn-system")
    return lease.spec.holder_identity or "", lease.spec.lease_transitions or 0


def cycles(log: Path) -> int:
    return log.read_text(errors="replace").count("cycle cycle=")


def leads(log: Path) -> bool:
    """Whether the replica writing ``log`` leads now: a replica restarted as the standby
    appends to the log it wrote as the leader before."""
    text = log.read_text(errors="replace")
    return text.rfind("leader: holding lease") > text.rfind("standby: lease")


class Pair:
    """Two replicas of the operator, each with its own log."""

    def __init__(self, hub: Hub, folder: Path, health: list[str]) -> None:
        self.hub = hub
        self.health = health  # each replica's liveness endpoint
        self.logs = [hub.log, folder / "replica-2.log"]
        self.procs: list[subprocess.Popen[bytes]] = [hub.proc, self.start(1)]

    def start(self, i: int) -> subprocess.Popen[bytes]:
        args = ("--leader-elect", "--liveness", self.health[i])
        return start_operator(self.hub.kubeconfig, self.logs[i], args=args, **self.hub.settings)

    def leader(self) -> int:
        """Index of the replica that holds the Lease (waits until exactly one says it leads:
        a replica restarted as the standby says so only once it is up)."""

        def only_leader() -> int:
            leading = [i for i, log in enumerate(self.logs) if leads(log)]
            return leading[0] + 1 if len(leading) == 1 else 0

        found: int = wait_until(only_leader, timeout_s=60, what="exactly one leader")
        return found - 1


@pytest.fixture(scope="module")
def pair(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    folder = tmp_path_factory.mktemp("ha")
    settings = {"lease_duration_s": DURATION_S}
    health = [f"http://127.0.0.1:{free_port()}/healthz" for _ in range(2)]
    args = ("--leader-elect", "--liveness", health[0])
    # the fail-over is the test's to check: no restart by the hub behind its back
    with running_hub(testbed, folder, args=args, supervise=False, **settings) as hub:
        pair = Pair(hub, folder, health)
        try:
            yield pair
        finally:
            for proc in pair.procs:
                if proc.poll() is None:
                    stop_process(proc)


def test_killed_leader_is_replaced_and_no_cycle_runs_on_both(pair: Pair) -> None:
    """SIGKILL the active replica: the standby, which ran no cycle while standing by, takes
    the Lease within the stated bound and schedules what comes next."""
    hub = pair.hub
    first = pair.leader()
    standby = 1 - first
    with new_namespace(hub, "ha") as ns:
        assert apply(hub, ns, aijob("before")).returncode == 0
        wait_status(hub, ns, "before", timeout_s=90, phase="Succeeded")
        assert cycles(pair.logs[first]) > 0
        assert cycles(pair.logs[standby]) == 0, "the standby must not schedule"
        # Both answer their liveness probes (a standby that did not would be restarted
        # by the kubelet again and again).
        assert get(pair.health[standby]) == (200, "standby: waiting for the lease\n")
        assert get(pair.health[first])[0] == 200
        holder, transitions = lease_holder(hub)
        killed_at = time.monotonic()
        pair.procs[first].send_signal(signal.SIGKILL)
        pair.procs[first].wait(timeout=10)
        wait_until(lambda: leads(pair.logs[standby]), timeout_s=60, what="standby takes over")
        takeover_s = time.monotonic() - killed_at
        print(f"takeover after SIGKILL: {takeover_s:.1f}s (lease duration {DURATION_S}s)")
        assert takeover_s <= DURATION_S * 4 / 3 + 5.0
        new_holder, new_transitions = lease_holder(hub)
        assert new_holder != holder and new_transitions == transitions + 1
        assert apply(hub, ns, aijob("after")).returncode == 0
        wait_status(hub, ns, "after", timeout_s=120, phase="Succeeded")
        assert cycles(pair.logs[standby]) > 0
    # The killed replica comes back as the standby.
    pair.procs[first] = pair.start(first)


def test_paused_leader_is_deposed_and_acts_no_more(pair: Pair) -> None:
    """A leader frozen past the renew deadline (SIGSTOP: a long GC pause, a partition) loses
    the Lease to the standby; when it wakes it runs no cycle and exits."""
    hub = pair.hub
    first = pair.leader()
    standby = 1 - first
    wait_until(
        lambda: "standby: lease" in pair.logs[standby].read_text(errors="replace"),
        timeout_s=60,
        what="the other replica standing by",
    )
    leads_before = pair.logs[standby].read_text(errors="replace").count("leader: holding lease")
    os.kill(pair.procs[first].pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: (
                pair.logs[standby].read_text(errors="replace").count("leader: holding lease")
                > leads_before
            ),
            timeout_s=60,
            what="standby takes over from the paused leader",
        )
        ran = cycles(pair.logs[first])
    finally:
        os.kill(pair.procs[first].pid, signal.SIGCONT)
    assert pair.procs[first].wait(timeout=30) == 3, "the deposed leader exits with code 3"
    assert cycles(pair.logs[first]) == ran, "no cycle after waking up deposed"
    with new_namespace(hub, "ha") as ns:
        assert apply(hub, ns, aijob("later")).returncode == 0
        wait_status(hub, ns, "later", timeout_s=120, phase="Succeeded")


def test_lease_expires_by_the_standbys_clock(testbed: Testbed) -> None:
    """On the real API server: a standby takes a Lease only after seeing it unchanged for a
    whole duration; the holder's watchdog gives up after two thirds of it."""
    api = client_from_kubeconfig(testbed.kubeconfig("hub").read_text())
    name = f"ha-probe-{os.getpid()}"
    a = Lease(api, "default", name, "a", 3.0)
    b = Lease(api, "default", name, "b", 3.0)
    assert a.try_acquire()
    renewed_at = time.monotonic()
    assert not b.try_acquire()
    taken = wait_until(b.try_acquire, timeout_s=15, what="b takes the expired lease", every_s=0.1)
    assert taken and time.monotonic() - renewed_at >= 3.0
    assert not a.try_acquire(), "a sees b's fresh record: not expired by a's clock"
    lost = threading.Event()
    created = time.monotonic()
    renewer = Renewer(b, lost.set)
    # From now on renewals fail (nothing listens there): the watchdog must give up.
    unreachable = client.Configuration(host="https://127.0.0.1:1")
    b.api = client.CoordinationV1Api(client.ApiClient(configuration=unreachable))
    renewer.start()
    assert renewer.holding()
    assert lost.wait(10), "on_lost called"
    assert 1.9 <= time.monotonic() - created <= 3.5  # the renew deadline: 2/3 of 3 s
    assert not renewer.holding()
    renewer.stopped.set()
