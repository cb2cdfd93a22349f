"""The test bed's own life cycle: down leaves nothing behind, up comes back quickly."""

from __future__ import annotations

import subprocess

import pytest

from testbed import procs
from testbed.bed import Testbed

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(180)
def test_down_leaves_no_process_then_up_restores_the_bed(testbed: Testbed) -> None:
    """down() stops every process, none mentions the state dir; up() makes it healthy again."""
    recorded = testbed.processes()
    assert len(recorded) == sum(len(c.components) for c in testbed.spec.clusters)
    testbed.down()
    assert not any(procs.alive(p) for p in recorded)
    assert testbed.stray_processes() == []
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    leftovers = [line for line in ps.stdout.splitlines() if str(testbed.state_dir) in line]
    assert leftovers == []
    assert not testbed.status().any_running
    report = testbed.up()
    assert not report.already_running
    assert testbed.status().healthy
    assert report.elapsed_s < 60.0
