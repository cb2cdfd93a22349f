"""pytest fixtures for tests that run on the local test bed.

Use them from a ``conftest.py``::

    from testbed.fixtures import member_namespace, testbed  # noqa: F401

``testbed`` (session scope) brings the bed up once, reusing one that is
already healthy, and brings it down at the end of the session unless it was
running before the session or ``CPN_TESTBED_KEEP=1`` is set.
``member_namespace`` gives a test a fresh namespace on member-a (whose
``default`` ServiceAccount exists, so pods can be created at once) and deletes
it afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.bed import Testbed
from testbed.spec import default_nodes_file
from testbed.workloads import wait_for


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    """The running test bed (hub + members), started once per session."""
    tb = Testbed()
    was_running = tb.status().any_running
    if was_running and not same_layout(tb.nodes_file, default_nodes_file()):
        # a bed left running by another checkout (an older commit's CI, say): its nodes are
        # not the ones these tests are written for, so start this checkout's bed instead
        print(f"test bed: restarting a bed started from {tb.nodes_file}")
        tb.down()
        tb, was_running = Testbed(), False
    try:
        tb.up()
    except BaseException:
        if not was_running:
            tb.down()  # leave no half-started bed behind
        raise
    yield tb
    if not was_running and os.environ.get("CPN_TESTBED_KEEP") != "1":
        tb.down()


def same_layout(a: Path, b: Path) -> bool:
    """Whether two nodes files describe the same bed (same text)."""
    return a.read_bytes() == b.read_bytes()


def make_namespace(tb: Testbed, cluster: str, prefix: str = "e2e") -> str:
    """Create a uniquely named namespace on ``cluster`` and wait for its default ServiceAccount."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with tb.api_client(cluster) as api:
        core: Any = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": name}})

        def has_sa() -> bool:
            try:
                core.read_namespaced_service_account("default", name)
            except ApiException as e:
                if e.status == 404:
                    return False
                raise
            return True

        wait_for(has_sa, timeout_s=30, what=f"ServiceAccount default in {cluster}/{name}")
    return name


def delete_namespace(tb: Testbed, cluster: str, name: str) -> None:
    """Delete a namespace (the namespace controller removes what is in it)."""
    from kubernetes import client

    with tb.api_client(cluster) as api:
        client.CoreV1Api(api).delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def member_namespace(testbed: Testbed) -> Iterator[str]:
    """A fresh namespace on member-a, deleted after the test."""
    cluster = testbed.members[0]
    name = make_namespace(testbed, cluster)
    yield name
    delete_namespace(testbed, cluster, name)
