"""The suite's hub behaves like the Deployment of the manifests: an operator that exits
because it lost its Lease (a hub that did not answer its renewals in time) is started
again, and the new one leads and schedules. Without this, one slow renewal on a loaded
machine would leave a module with no operator at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from cpn.cli.devbed import wait_until
from cpn.cli.run import EXIT_LEADERSHIP_LOST
from testbed.bed import Testbed
from tests.e2e.hubkit import aijob, apply, new_namespace, running_hub, wait_status

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def leads(log: Path) -> int:
    return log.read_text(errors="replace").count("leader: holding lease")


def test_an_operator_that_lost_its_lease_is_started_again(testbed: Testbed, tmp_path: Path) -> None:
    with running_hub(testbed, tmp_path) as hub:
        wait_until(lambda: leads(hub.log) == 1, timeout_s=60, what="the operator leading")
        first = hub.proc
        # the hub stops answering: the operator cannot renew and steps down by design
        with testbed.paused("hub", "kube-apiserver"):
            wait_until(lambda: first.poll() is not None, timeout_s=60, what="the operator exit")
        assert first.returncode == EXIT_LEADERSHIP_LOST
        wait_until(lambda: hub.proc is not first, timeout_s=30, what="a new operator process")
        assert hub.restarts_after_lost_lease == 1
        wait_until(lambda: leads(hub.log) == 2, timeout_s=90, what="the new operator leading")
        with new_namespace(hub, "hubkit") as ns:
            assert apply(hub, ns, aijob("after")).returncode == 0
            wait_status(hub, ns, "after", timeout_s=120, phase="Succeeded")
        assert hub.proc.poll() is None
