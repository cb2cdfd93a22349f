"""Issue 21 (budgets, live) on the test bed: a group with a tiny GPU-hour budget runs one job
to completion; its next AIJob then waits with reason ``Budget`` (and an ``OverBudget``
Event) while another group's job starts; after the operator is killed and started again the
hold persists, its usage rebuilt from the usage store (runtime/fairfeed.py)."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator

import pytest

from cpn.cli.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e import hubkit
from tests.e2e.hubkit import Hub, wait_status
from tests.e2e.test_usage import cycles, stored_runs

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

A100 = "A100-80GB"
SUFFIX = uuid.uuid4().hex[:5]
TIGHT, OTHER = f"tight-{SUFFIX}", f"other-{SUFFIX}"
#: 0.002 GPU-hours = 7.2 GPU-seconds: one run of 2 GPUs for 6 s uses more (a month's
#: budget: the test fails only when it straddles 00:00 UTC on the 1st).
POLICY = f"""
retry: {{max_attempts: 2, backoff_s: 1}}
reservation: {{enabled: false}}
quotas:
  max_priority: null
  budget_period: month
  over_budget: hold
  groups:
    {TIGHT}: {{gpu_hours: 0.002}}
"""


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    folder = tmp_path_factory.mktemp("budgets")
    with hubkit.running_hub(testbed, folder, policy=POLICY, metrics_port=hubkit.free_port()) as h:
        yield h


def test_a_group_past_its_budget_waits_and_still_after_a_restart(hub: Hub) -> None:
    def job(name: str) -> dict[str, object]:
        return hubkit.aijob(name, gpus=2, durations={A100: "6s"}, gpu_types=[A100])

    with (
        hubkit.new_namespace(hub, "budget-t", user="ada", group=TIGHT) as tight,
        hubkit.new_namespace(hub, "budget-o", user="bob", group=OTHER) as other,
    ):
        assert hubkit.apply(hub, tight, job("first")).returncode == 0
        wait_status(hub, tight, "first", phase="Succeeded", timeout_s=120)
        uid = hub.aijob(tight, "first")["metadata"]["uid"]

        assert hubkit.apply(hub, tight, job("second")).returncode == 0
        held = wait_status(hub, tight, "second", reason="Budget", timeout_s=60)
        assert held["phase"] == "Queued", held
        assert f"group {TIGHT} used" in held["message"], held
        hubkit.wait_events_of(hub, tight, "second", "OverBudget", timeout_s=30)
        assert hubkit.apply(hub, other, job("theirs")).returncode == 0
        wait_status(hub, other, "theirs", phase="Succeeded", timeout_s=120)
        assert hub.status(tight, "second")["reason"] == "Budget"

        # the run is in the store (a kill before then would leave it to the recovery)
        wait_until(
            lambda: any(r.uid == uid for r in stored_runs(hub)),
            timeout_s=60,
            what="the first run in the usage store",
        )
        hub.proc.send_signal(signal.SIGKILL)
        hub.proc.wait(timeout=10)
        hub.restart()
        wait_until(lambda: cycles(hub) >= 3, timeout_s=120, what="three cycles after restart")
        after = hub.status(tight, "second")
        assert (after["phase"], after["reason"]) == ("Queued", "Budget"), after
