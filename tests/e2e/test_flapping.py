"""A burst of AIJobs while a member flaps (issue 19, item 3): member-b's kube-apiserver
hangs (SIGSTOP) for 20 s, answers for 20 s, and so on until every AIJob has finished.

Heavy on a 2-core machine: ``CPN_FLAP_JOBS`` AIJobs (1,000 by default; the issue's
figure), with ``-m 'e2e and slow'``. Counted as in tests/e2e/test_fault_figures.py.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator

import pytest

from testbed.bed import Testbed
from tests.e2e import hubkit
from tests.e2e.test_fault_figures import assert_whole, settle

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(3600)]

JOBS = int(os.environ.get("CPN_FLAP_JOBS", "1000"))
#: Requeue 10 s after Ready=False (2 s of missed probes, then up to a probe period): a
#: 20 s hang requeues what runs there.
TIMERS = {"member_grace_s": 2, "member_timeout_s": 10, "interval_s": 2}
FLAP_S = 20.0


@pytest.fixture(scope="module")
def hub(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[hubkit.Hub]:
    folder = tmp_path_factory.mktemp("flap")
    with hubkit.running_hub(testbed, folder, args=("--no-leader-elect",), **TIMERS) as hub:
        yield hub


def test_a_member_flapping_every_20s_loses_and_duplicates_nothing(hub: hubkit.Hub) -> None:
    rng = random.Random(19)
    docs = [
        hubkit.aijob(
            f"f{i:04d}",
            gpus=rng.choice([1, 1, 2, 4]),
            durations={"A100-80GB": f"{rng.randint(2, 5)}s", "V100-32GB": f"{rng.randint(3, 7)}s"},
        )
        for i in range(JOBS)
    ]
    stop, flaps = threading.Event(), []

    def flap() -> None:
        while not stop.wait(FLAP_S):  # up for FLAP_S, then hung for FLAP_S
            with hub.tb.paused("member-b", "kube-apiserver"):
                flaps.append(time.monotonic())
                stop.wait(FLAP_S)

    flapper = threading.Thread(target=flap, daemon=True)
    with (
        hubkit.new_namespace(hub, "flap") as namespace,
        hubkit.JobCreations(hub.tb) as creations,
    ):
        began = time.monotonic()
        assert hubkit.apply(hub, namespace, *docs).returncode == 0
        flapper.start()
        try:
            figures = settle(
                hub,
                namespace,
                [d["metadata"]["name"] for d in docs],
                creations,
                fault=f"member-b hung 20 s of every 40 s ({JOBS} AIJobs)",
                ended=began,
                timeout_s=120 + 3 * JOBS,
                since="the burst was applied",
                on_finished=stop.set,
            )
        finally:
            stop.set()
            flapper.join(timeout=FLAP_S + 10)
        print(f"{len(flaps)} hangs of member-b during the burst; burst {figures.all_done_s:.0f}s")
    assert_whole(figures)
    assert flaps, "the member never flapped during the burst"
