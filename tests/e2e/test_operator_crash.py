"""Crash safety: the operator SIGKILLed while AIJobs flow loses nothing and runs nothing twice."""

from __future__ import annotations

import random
import signal
import uuid
from collections.abc import Iterator

import pytest

from cpn.devbed import wait_until
from testbed.bed import Testbed
from tests.e2e.hubkit import Hub, aijob, apply, member_jobs_by_uid, phases, running_hub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

JOBS = 200


@pytest.fixture(scope="module")
def crash_hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(testbed, tmp_path_factory.mktemp("crash")) as hub:
        yield hub


def test_sigkill_while_200_aijobs_flow_loses_and_duplicates_nothing(crash_hub: Hub) -> None:
    """Killed three times mid-burst and restarted, the operator completes every AIJob once."""
    hub = crash_hub
    namespace = f"crash-{uuid.uuid4().hex[:6]}"
    hub.core.create_namespace({"metadata": {"name": namespace}})
    rng = random.Random(7)
    docs = [
        aijob(
            f"j{i:03d}",
            gpus=rng.choice([1, 1, 2, 4]),
            durations={"A100-80GB": f"{rng.randint(2, 5)}s", "V100-32GB": f"{rng.randint(4, 9)}s"},
        )
        for i in range(JOBS)
    ]
    assert apply(hub, namespace, *docs).returncode == 0
    for kill_after in (40, 90, 140):  # AIJobs finished when each kill lands
        wait_until(
            lambda n=kill_after: phases(hub, namespace)["Succeeded"] >= n,
            timeout_s=240,
            what=f"{kill_after} AIJobs Succeeded",
        )
        hub.proc.send_signal(signal.SIGKILL)
        hub.proc.wait(timeout=10)
        hub.restart()
    wait_until(
        lambda: phases(hub, namespace)["Succeeded"] == JOBS,
        timeout_s=400,
        what=f"all {JOBS} AIJobs Succeeded",
    )
    uids = {
        i["metadata"]["uid"]
        for i in hub.custom.list_namespaced_custom_object(
            "cpn.io", "v1alpha1", namespace, "aijobs"
        )["items"]
    }
    counts = member_jobs_by_uid(hub.tb)
    twice = {uid: n for uid, n in counts.items() if uid in uids and n > 1}
    assert twice == {}, f"AIJobs with more than one member Job: {twice}"
    assert uids <= set(counts), "every AIJob ran as a member Job"
    hub.kubectl("delete", "aijobs", "--all", "-n", namespace, "--timeout=120s", check=False)
    hub.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
