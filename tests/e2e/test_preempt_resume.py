"""Issue 16 on the test bed: what the operator learned survives a restart (the hub is the
store), and a checkpointing AIJob is preempted, requeued and resumed, one member Job at a
time, paying its restart cost in its measured runtime."""

from __future__ import annotations

import signal
import statistics
from collections.abc import Iterator
from typing import Any

import pytest

from cpn.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import Hub, aijob, apply, new_namespace, running_hub, wait_status

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

#: The long job's restart cost on the bed (its pods' testbed.cpn.io/restart-cost) and the
#: policy's price of it; its checkpoint interval; its work.
RESTART_S, INTERVAL_S, WORK_S = 6, 10, 60
POLICY = f"""
retry: {{max_attempts: 2, backoff_s: 1}}
reservation: {{enabled: false}}
preemption: {{enabled: true, restart_cost_s: {RESTART_S}}}
"""
COLD_S = 24 * 3600.0  # the predictor's estimate when nothing is known
V100 = "V100-32GB"


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    # No history file: whatever a new process knows comes from the hub's AIJobs.
    with running_hub(
        testbed, tmp_path_factory.mktemp("preempt"), policy=POLICY, history_db=""
    ) as h:
        yield h


def unlabelled(name: str, seconds: int, **spec: Any) -> dict[str, Any]:
    """An AIJob with no model and no declared work (issue 16's real workloads)."""
    doc = aijob(name, durations={V100: f"{seconds}s"}, gpu_types=[V100], **spec)
    del doc["spec"]["model"]
    return doc


def test_what_was_learned_survives_a_restart(hub: Hub) -> None:
    """Three jobs of one user finish; the operator is SIGKILLed and started again with no
    history file. A job of the same user and GPU count is then estimated from the finished
    jobs' runtimes (read back from their AIJobs), not the cold default; so is one that was
    waiting (suspended) across the restart, estimated cold before it."""
    with new_namespace(hub, "learn", user="ada", group="vision") as ns:
        assert apply(hub, ns, unlabelled("held", 12, suspend=True)).returncode == 0
        cold = wait_status(hub, ns, "held", phase="Suspended")["predictedRuntimeSeconds"][V100]
        assert cold == pytest.approx(COLD_S, rel=0.5)  # nothing learned yet
        done = [unlabelled(f"done-{i}", 12) for i in range(3)]
        assert apply(hub, ns, *done).returncode == 0
        actual = [
            wait_status(hub, ns, d["metadata"]["name"], phase="Succeeded", timeout_s=180)[
                "actualRuntimeSeconds"
            ]
            for d in done
        ]
        assert all(10 <= a <= 25 for a in actual), actual
        assert hub.status(ns, "held")["predictedRuntimeSeconds"][V100] == cold  # not refreshed

        hub.proc.send_signal(signal.SIGKILL)
        hub.proc.wait(timeout=10)
        assert apply(hub, ns, unlabelled("new", 12)).returncode == 0  # while it is down
        hub.restart()

        median = statistics.median(actual)
        for name in ("new", "held"):
            predicted = wait_until(
                lambda n=name: next(
                    (
                        p
                        for p in [
                            (hub.status(ns, n).get("predictedRuntimeSeconds") or {}).get(V100)
                        ]
                        if p is not None and p < COLD_S / 10
                    ),
                    None,
                ),
                timeout_s=120,
                what=f"{name}'s estimate learned from the finished jobs",
            )
            print(f"{name}: cold {cold} -> {predicted} (actual {actual})", flush=True)
            assert median / 2 <= predicted <= median * 2, (name, predicted, actual)
        assert "learned from 3 finished AIJobs on the hub" in hub.log.read_text()
