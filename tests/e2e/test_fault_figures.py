"""Faults under a burst of AIJobs on the test bed, each counted (issue 19, item 3).

For every fault a burst of AIJobs runs through it, and the test counts:

- **lost**: AIJobs that ended ``Failed`` (or vanished) because of the fault;
- **stuck**: AIJobs neither ``Succeeded`` nor ``Failed`` by the deadline;
- **duplicated**: AIJobs whose result was taken more than once (more than one
  ``Succeeded`` Event) or that keep more than one member Job in the end;
- **ran twice**: AIJobs with member Jobs that completed on two attempts (a stale attempt
  that finished before it was deleted: work done twice on the members, which cpn cannot
  prevent for a job that is only cut off; reported, not a failure);
- **detect**: seconds from the fault to the member's ``Ready=False``;
- **recover**: seconds from the end of the fault to the member's ``Ready=True``, and to
  every AIJob ``Succeeded`` (for the slow Prometheus: ``MetricsFresh`` instead of
  ``Ready``, and the burst timed from the fault's start, as it runs through it).

The figures are printed (``-s``) and copied to docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from testbed.slowproxy import slow_proxy
from tests.e2e import hubkit
from tests.e2e.test_faults import member_condition

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TIMERS = {"member_grace_s": 2, "member_timeout_s": 20, "interval_s": 2}
QUICK = {"A100-80GB": "20s", "V100-32GB": "20s"}


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[hubkit.Hub]:
    # No leader election: the hub API server's restart below is longer than the test
    # Lease, and no supervisor would start the operator again (tests/e2e/test_ha.py).
    folder = tmp_path_factory.mktemp("figures")
    with hubkit.running_hub(testbed, folder, args=("--no-leader-elect",), **TIMERS) as hub:
        yield hub


@pytest.fixture
def namespace(hub: hubkit.Hub) -> Iterator[str]:
    with hubkit.new_namespace(hub, "figures", user="carol", group="speech") as name:
        yield name


@dataclass
class Figures:
    fault: str
    jobs: int
    lost: int
    stuck: int
    duplicated: int
    ran_twice: int
    detect_s: float | None
    ready_again_s: float | None
    all_done_s: float
    recovered: str = "Ready"
    since: str = "the fault ended"

    def line(self) -> str:
        def s(x: float | None) -> str:
            return "-" if x is None else f"{x:.1f}s"

        return (
            f"FIGURES {self.fault}: {self.jobs} AIJobs, lost {self.lost}, stuck {self.stuck}, "
            f"duplicated {self.duplicated}, ran twice {self.ran_twice}; detect "
            f"{s(self.detect_s)}, {self.recovered} again {s(self.ready_again_s)}, all Succeeded "
            f"{s(self.all_done_s)} after {self.since}"
        )


def burst(hub: hubkit.Hub, namespace: str, prefix: str, count: int) -> list[str]:
    """``count`` AIJobs of 2 GPUs and 20 s; every other one only on V100s (member-b), so
    both members run some (the others fit on member-a's A100s, which are preferred)."""
    names = [f"{prefix}-{i}" for i in range(count)]
    docs = [
        hubkit.aijob(name, gpus=2, durations=QUICK, gpu_types=["V100-32GB"] if i % 2 else None)
        for i, name in enumerate(names)
    ]
    assert hubkit.apply(hub, namespace, *docs).returncode == 0
    return names


def ready_is(hub: hubkit.Hub, member: str, status: str) -> bool:
    return member_condition(hub, member, "Ready").get("status") == status


def seconds_until(predicate: Any, *, timeout_s: float, what: str) -> float:
    began = time.monotonic()
    wait_until(predicate, timeout_s=timeout_s, what=what, every_s=0.2)
    return time.monotonic() - began


def settle(
    hub: hubkit.Hub,
    namespace: str,
    names: list[str],
    creations: hubkit.JobCreations,
    *,
    fault: str,
    ended: float,
    detect_s: float | None = None,
    ready_again_s: float | None = None,
    timeout_s: float = 300,
    recovered: str = "Ready",
    since: str = "the fault ended",
    on_finished: Callable[[], object] = lambda: None,
) -> Figures:
    """Wait (up to ``timeout_s``) until every AIJob of the burst has finished, and count."""

    def phases() -> Counter[str]:
        return Counter(hubkit.phases(hub, namespace))

    def finished() -> bool:
        done = phases()
        return done["Succeeded"] + done["Failed"] >= len(names)

    with contextlib.suppress(TimeoutError):  # what has not finished is counted as stuck
        # each poll lists every AIJob: a big burst is polled less often, to spare the hub
        every_s = 0.5 if len(names) <= 50 else 2.0
        wait_until(
            finished, timeout_s=timeout_s, what=f"{fault}: the burst finished", every_s=every_s
        )
    all_done_s = time.monotonic() - ended
    on_finished()  # (a fault still going on ends here)
    done = phases()
    existing = sum(done.values())
    uids = {item["metadata"]["uid"]: item["metadata"]["name"] for item in hub.aijobs(namespace)}

    def left_over() -> list[str]:  # stale attempts not deleted (yet)
        at_end = hubkit.member_jobs_by_uid(hub.tb)
        return [uid for uid in uids if at_end[uid] > 1]

    with contextlib.suppress(TimeoutError):  # the sweep runs every 5 s once members answer
        wait_until(lambda: not left_over(), timeout_s=60, what="stale attempts deleted")
    twice = {uid for uid, name in uids.items() if count_succeeded(hub, namespace, name) > 1}
    duplicated = len(twice | set(left_over()))
    runs = creations.runs()
    figures = Figures(
        fault=fault,
        jobs=len(names),
        lost=done["Failed"] + len(names) - existing,
        stuck=existing - done["Succeeded"] - done["Failed"],
        duplicated=duplicated,
        ran_twice=sum(1 for uid in uids if runs[uid] > 1),
        detect_s=detect_s,
        ready_again_s=ready_again_s,
        all_done_s=all_done_s,
        recovered=recovered,
        since=since,
    )
    print("\n" + figures.line())
    return figures


def count_succeeded(hub: hubkit.Hub, namespace: str, name: str) -> int:
    """How many times the AIJob was said Succeeded (an Event counted again counts)."""
    selector = f"involvedObject.name={name},reason=Succeeded"
    return sum(
        e.count or 1
        for e in hub.core.list_namespaced_event(namespace, field_selector=selector).items
    )


def assert_whole(figures: Figures) -> None:
    assert (figures.lost, figures.stuck, figures.duplicated) == (0, 0, 0), figures.line()


#: Ready=False within the grace (2 s here) plus a probe period and its timeout.
DETECT_WITHIN_S = 15.0


def member_outage(
    hub: hubkit.Hub,
    namespace: str,
    *,
    member: str,
    prefix: str,
    fault: str,
    outage: Callable[[], AbstractContextManager[object]],
    length_s: float,
) -> Figures:
    """A burst of 16 AIJobs, some on ``member``; then ``outage()`` held for ``length_s``
    (a fault of that length by design, not a wait for a condition); then counted."""
    wait_until(lambda: ready_is(hub, member, "True"), timeout_s=60, what=f"{member} ready")
    with hubkit.JobCreations(hub.tb) as creations:
        names = burst(hub, namespace, prefix, 16)
        wait_until(
            lambda: any(
                (i.get("status") or {}).get("cluster") == member for i in hub.aijobs(namespace)
            ),
            timeout_s=90,
            what=f"jobs dispatched to {member}",
        )
        began = time.monotonic()  # a stop takes a while (SIGTERM, then the bed waits)
        with outage():
            wait_until(lambda: ready_is(hub, member, "False"), timeout_s=60, what="not ready")
            detect_s = time.monotonic() - began
            time.sleep(max(0.0, length_s - (time.monotonic() - began)))
        ended = time.monotonic()
        ready_s = seconds_until(
            lambda: ready_is(hub, member, "True"), timeout_s=90, what=f"{member} ready again"
        )
        return settle(
            hub,
            namespace,
            names,
            creations,
            fault=fault,
            ended=ended,
            detect_s=detect_s,
            ready_again_s=ready_s,
        )


@contextlib.contextmanager
def stopped(tb: Testbed, cluster: str, component: str) -> Iterator[None]:
    """A component stopped for the body of the ``with``, started again after."""
    tb.stop_component(cluster, component)
    try:
        yield
    finally:
        tb.start_component(cluster, component)


def test_member_apiserver_hung_for_two_minutes(hub: hubkit.Hub, namespace: str) -> None:
    """SIGSTOP member-b's kube-apiserver for 120 s while 16 AIJobs run: detected within
    15 s, its jobs requeued to member-a, none lost, stuck or taken twice."""
    figures = member_outage(
        hub,
        namespace,
        member="member-b",
        prefix="hung",
        fault="member-b kube-apiserver SIGSTOP 120 s",
        outage=lambda: hub.tb.paused("member-b", "kube-apiserver"),
        length_s=120.0,
    )
    assert_whole(figures)
    assert figures.detect_s is not None and figures.detect_s <= DETECT_WITHIN_S


def test_member_etcd_stopped(hub: hubkit.Hub, namespace: str) -> None:
    """member-b's etcd stopped for 30 s while 16 AIJobs run (its API server up, /readyz
    failing): detected, nothing lost, stuck or taken twice."""
    figures = member_outage(
        hub,
        namespace,
        member="member-b",
        prefix="etcd",
        fault="member-b etcd stopped 30 s",
        outage=lambda: stopped(hub.tb, "member-b", "etcd"),
        length_s=30.0,
    )
    assert_whole(figures)
    assert figures.detect_s is not None and figures.detect_s <= DETECT_WITHIN_S


# The hub's API server is restarted under this test's own client too: its pool may drop a
# dead TLS connection without closing it, and the socket's ResourceWarning at collection
# (an error under filterwarnings) would fail a test whose figures held (seen once in CI).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_hub_apiserver_restarted_mid_burst(hub: hubkit.Hub, namespace: str) -> None:
    """The hub's kube-apiserver stopped and started again while a burst of 30 AIJobs is
    being dispatched: nothing lost, stuck or taken twice."""
    with hubkit.JobCreations(hub.tb) as creations:
        names = burst(hub, namespace, "hubrestart", 30)
        wait_until(
            lambda: hubkit.phases(hub, namespace)["Running"] >= 3,
            timeout_s=90,
            what="the burst under way",
        )
        hub.tb.stop_component("hub", "kube-apiserver")
        hub.tb.start_component("hub", "kube-apiserver")
        ended = time.monotonic()
        figures = settle(
            hub, namespace, names, creations, fault="hub kube-apiserver restart", ended=ended
        )
    assert_whole(figures)
    assert hub.proc.poll() is None, "the operator kept running"


def set_prometheus(hub: hubkit.Hub, member: str, url: str) -> None:
    patch = {"spec": {"prometheusURL": url}}
    hub.custom.patch_cluster_custom_object("cpn.io", "v1alpha1", "memberclusters", member, patch)


def metrics_message(hub: hubkit.Hub, member: str) -> str:
    return str(member_condition(hub, member, "MetricsFresh").get("message"))


def metrics_fresh(hub: hubkit.Hub, member: str) -> str:
    return str(member_condition(hub, member, "MetricsFresh").get("status"))


def test_prometheus_answering_in_10s(hub: hubkit.Hub, namespace: str) -> None:
    """member-a's Prometheus answers every query 10 s late (a proxy in front of it): its
    metrics are degraded (the reads time out), member-b's stay fresh, scheduling goes on
    from the API's accounting: a burst of 16 AIJobs, nothing lost, stuck or taken twice;
    fresh again once Prometheus answers at once."""
    member, real = "member-a", hub.tb.prometheus_url("member-a")
    wait_until(lambda: metrics_fresh(hub, member) == "True", timeout_s=90, what="fresh")
    with slow_proxy(real, delay_s=10.0) as proxy, hubkit.JobCreations(hub.tb) as creations:
        set_prometheus(hub, member, proxy.url)
        try:
            began = time.monotonic()
            # (the new URL's source starts unread, "not read yet": wait for the timeout)
            detect_s = seconds_until(
                lambda: "timed out" in metrics_message(hub, member).lower(),
                timeout_s=90,
                what="reads timing out",
            )
            names = burst(hub, namespace, "slowprom", 16)
            others = []

            def finished() -> bool:
                others.append(metrics_fresh(hub, "member-b"))
                done = hubkit.phases(hub, namespace)
                return done["Succeeded"] + done["Failed"] >= len(names)

            wait_until(finished, timeout_s=300, what="the burst under a slow Prometheus")
            degraded_for_s = time.monotonic() - began
            assert proxy.requests > 0, "the operator never asked the slow Prometheus"
        finally:
            set_prometheus(hub, member, real)
        fresh_s = seconds_until(
            lambda: metrics_fresh(hub, member) == "True", timeout_s=90, what="fresh again"
        )
        figures = settle(
            hub,
            namespace,
            names,
            creations,
            fault=f"{member} Prometheus answering in 10 s",
            ended=began,
            detect_s=detect_s,
            ready_again_s=fresh_s,
            recovered="MetricsFresh",
            since="the fault began",
        )
    print(
        f"slow Prometheus: member-a degraded after {detect_s:.1f}s, burst done in "
        f"{degraded_for_s:.1f}s, fresh {fresh_s:.1f}s after the real URL was back; "
        f"member-b MetricsFresh over the burst: {Counter(others)}"
    )
    assert_whole(figures)
    assert set(others) == {"True"}


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("skew_s", [300.0, -300.0])
def test_member_clock_skewed_by_5_minutes(hub: hubkit.Hub, namespace: str, skew_s: float) -> None:
    """member-b's job controller runs 5 minutes ahead (or behind): what the bed can do
    honestly is pause member-b's kube-controller-manager and stamp the member Job's status
    as a controller with that clock would (startTime, then completionTime 10 s later, both
    skewed; the API server's and kwok's stamps stay on the real clock). The AIJob's
    actualRuntimeSeconds is the 10 s it ran, not 310 s or 0 s."""
    name = f"skew-{'ahead' if skew_s > 0 else 'behind'}"
    job = hubkit.aijob(name, gpus=1, gpu_types=["V100-32GB"], durations={"V100-32GB": "1h"})
    with hub.tb.paused("member-b", "kube-controller-manager"):
        assert hubkit.apply(hub, namespace, job).returncode == 0
        status = hubkit.wait_status(hub, namespace, name, timeout_s=60, phase="Dispatched")
        batch = client.BatchV1Api
        with hub.tb.api_client("member-b") as api:
            jobs = batch(api)
            member_ns, job_name = status["memberJob"]["namespace"], status["memberJob"]["name"]
            started = time.time()
            running = {"startTime": _stamp(started + skew_s), "active": 1, "ready": 1}
            jobs.patch_namespaced_job_status(job_name, member_ns, {"status": running})
            hubkit.wait_status(hub, namespace, name, timeout_s=60, phase="Running")
            time.sleep(10)  # the job's run: its length is what is measured
            end = _stamp(time.time() + skew_s)
            done = {
                "completionTime": end,
                "active": 0,
                "ready": 0,
                "succeeded": 1,
                "completedIndexes": "0",
                "conditions": [
                    {"type": kind, "status": "True", "reason": "CompletionsReached",
                     "message": "done", "lastProbeTime": end, "lastTransitionTime": end}
                    for kind in ("SuccessCriteriaMet", "Complete")
                ],
            }  # fmt: skip
            jobs.patch_namespaced_job_status(job_name, member_ns, {"status": done})
        finished = hubkit.wait_status(hub, namespace, name, timeout_s=60, phase="Succeeded")
    actual = finished["actualRuntimeSeconds"]
    print(f"\nFIGURES member-b clock {skew_s:+.0f} s: ran 10 s, actualRuntimeSeconds {actual}")
    assert 8.0 <= actual <= 20.0, finished
