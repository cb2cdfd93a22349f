"""Issue 16's FIFO due times on the test bed: the operator writes each AIJob's status.fifoDue
(with fifoDueCalibrated and fifoBasisSeconds) once, in submit order, and keeps them across a
restart (it reads them back from the status)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from cpn.api.aijob import parse_time
from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import Hub, aijob, apply, new_namespace, running_hub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

POLICY = """
retry: {max_attempts: 2, backoff_s: 1}
reservation: {drain_fifo: true}
"""
A100 = "A100-80GB"


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(testbed, tmp_path_factory.mktemp("fifodue"), policy=POLICY) as h:
        yield h


def dues(hub: Hub, namespace: str, names: list[str]) -> dict[str, str] | None:
    """Each AIJob's status.fifoDue, or None while one has none yet."""
    found = {name: hub.status(namespace, name).get("fifoDue") for name in names}
    return None if any(v is None for v in found.values()) else found  # type: ignore[return-value]


def stamps(hub: Hub, namespace: str, names: list[str]) -> dict[str, tuple[object, ...]]:
    """Each AIJob's three FIFO stamps as its status shows them."""
    keys = ("fifoDue", "fifoDueCalibrated", "fifoBasisSeconds")
    return {n: tuple(hub.status(namespace, n).get(key) for key in keys) for n in names}


def test_fifo_due_times_are_written_once_and_survive_a_restart(hub: Hub) -> None:
    names = [f"j{i}" for i in range(6)]
    docs = [aijob(n, gpus=8, gpu_types=[A100], durations={A100: "600s"}) for n in names]
    with new_namespace(hub, "fifodue") as ns:
        assert apply(hub, ns, *docs).returncode == 0
        before = wait_until(lambda: dues(hub, ns, names), timeout_s=120, what="fifoDue")
        times = [parse_time(before[n]) or 0.0 for n in names]
        created = parse_time(hub.aijob(ns, "j0")["metadata"]["creationTimestamp"]) or 0.0
        assert created - 1 <= times[0]
        # Later-submitted jobs (same second: by name) queue behind the earlier ones' work.
        assert times == sorted(times) and times[-1] > times[0]
        stamped = stamps(hub, ns, names)
        for _due, calibrated, basis in stamped.values():
            assert parse_time(calibrated) is not None and basis > 0  # type: ignore[arg-type,operator]

        hub.proc.send_signal(signal.SIGKILL)
        hub.proc.wait(timeout=10)
        hub.restart()
        assert apply(hub, ns, aijob("late", gpus=1, durations={A100: "5s"})).returncode == 0
        # The new operator stamps a new job, and only it: the others' are read back.
        wait_until(lambda: dues(hub, ns, ["late"]), timeout_s=180, what="late's fifoDue")
        assert dues(hub, ns, names) == before
        assert stamps(hub, ns, names) == stamped
