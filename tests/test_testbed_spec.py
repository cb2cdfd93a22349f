"""The bed's port plan: a port base whose range meets the kernel's ephemeral ports is
refused before anything starts, with the fix in the message."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.spec import (
    PORT_BLOCK,
    SpecError,
    ephemeral_range,
    load_spec,
    parse_spec,
    ports_problem,
)


@pytest.mark.parametrize(
    ("base", "refused"),
    [
        (26100, False),  # the default, below Linux's default range
        (32768 - 3 * PORT_BLOCK, False),  # ends just below the range
        (32768 - 3 * PORT_BLOCK + 1, True),  # its last port is the range's first
        (33000, True),
        (60999, True),  # starts on the range's last port
        (61000, False),  # above it
    ],
)
def test_ports_in_the_ephemeral_range_are_refused(base: int, refused: bool) -> None:
    spec = load_spec(port_base=base)
    assert len(spec.clusters) == 3  # the packaged bed: the hub and two members
    problem = ports_problem(spec, (32768, 60999))
    assert (problem is not None) == refused
    if problem:
        assert "CPN_TESTBED_PORT_BASE" in problem and "32768-60999" in problem


def test_no_range_known_or_no_room_outside_it_refuses_nothing() -> None:
    assert ports_problem(load_spec(port_base=33000), None) is None
    assert ports_problem(load_spec(port_base=33000), (1024, 65535)) is None


def test_ephemeral_range_is_read_from_the_kernel_file(tmp_path: Path) -> None:
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert ephemeral_range(f) == (40000, 50000)
    f.write_text("garbage")
    assert ephemeral_range(f) is None
    assert ephemeral_range(tmp_path / "missing") is None


def _doc(**top: object) -> dict[str, object]:
    models = {"A": {"product": "P", "family": "f", "memory_mib": 1, "power_limit_w": 1}}
    models["A"]["idle_power_w"] = 1
    group = {"prefix": "n", "count": 2, "gpu_model": "A", "gpus": 8, "cpu": 1, "memory_gib": 1}
    return {"gpu_models": models, "members": {"m": [group]}, **top}


def test_metrics_false_leaves_the_members_metrics_stack_out() -> None:
    with_stack = parse_spec(_doc()).members[0]
    without = parse_spec(_doc(metrics=False)).members[0]
    assert with_stack.components[-2:] == ("dcgm", "prometheus")
    assert without.components == (
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    )
    assert parse_spec(_doc(metrics=False)).clusters[0].components == with_stack.components[:3]


def test_metrics_must_be_a_boolean() -> None:
    with pytest.raises(SpecError, match=r"metrics: expected true or false, got 'no'"):
        parse_spec(_doc(metrics="no"))
