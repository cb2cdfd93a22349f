"""spec.inputs read by the operator: each input becomes a core DataInput, and every bad
field is named with its index (issue 20)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cpn.api.aijob import parse_aijob
from cpn.core.errors import InvalidSpec
from cpn.core.model import DataInput

BASE: dict[str, Any] = {
    "metadata": {"name": "j", "namespace": "ns"},
    "spec": {
        "resources": {"gpus": 1},
        "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}},
    },
}


def _with(inputs: Any, **spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    body["spec"].update(inputs=inputs, **spec)
    return body


def _errors(inputs: Any) -> dict[str, str]:
    with pytest.raises(InvalidSpec) as caught:
        parse_aijob(_with(inputs), user="u", group="g")
    return {e.path: e.message for e in caught.value.errors}


def test_inputs_become_data_inputs_in_gb() -> None:
    """Name, version, size (bytes to GB) and location are kept; no location stays None."""
    job = parse_aijob(
        _with(
            [
                {
                    "name": "imagenet",
                    "version": "sha256:9f86d081",
                    "uri": "s3://d/imagenet",
                    "sizeBytes": 150_000_000_000,
                    "location": "member-a",
                },
                {"name": "bert", "uri": "pvc://models/bert"},
            ]
        ),
        user="u",
        group="g",
    )
    assert job.inputs == (
        DataInput(name="imagenet", version="sha256:9f86d081", size_gb=150.0, location="member-a"),
        DataInput(name="bert"),
    )
    assert job.inputs[0].ident == "imagenet@sha256:9f86d081"


def test_spec_data_still_reads_as_the_unnamed_input() -> None:
    """An AIJob with today's spec.data keeps reading it (data_cluster, data_gb), no inputs."""
    body = _with(None, data={"cluster": "member-b", "sizeGB": 2})
    del body["spec"]["inputs"]
    job = parse_aijob(body, user="u", group="g")
    assert (job.data_cluster, job.data_gb, job.inputs) == ("member-b", 2.0, ())


def test_each_bad_field_is_named_with_its_index() -> None:
    """A bad name, URI, version, size and location, a missing URI and an unknown key."""
    found = _errors(
        [
            {
                "name": "ImageNet",
                "uri": "imagenet",
                "version": "-v1",
                "sizeBytes": -1,
                "location": "Member A",
            },
            {"name": "bert", "kind": "model"},
        ]
    )
    assert set(found) == {
        "spec.inputs[0].name",
        "spec.inputs[0].uri",
        "spec.inputs[0].version",
        "spec.inputs[0].sizeBytes",
        "spec.inputs[0].location",
        "spec.inputs[1].uri",
        "spec.inputs[1].kind",
    }
    assert "lower-case letters" in found["spec.inputs[0].name"]
    assert "with its scheme" in found["spec.inputs[0].uri"]
    assert found["spec.inputs[1].uri"] == "is required"


def test_a_name_twice_is_refused_at_the_second() -> None:
    """Two inputs of one name: the second's name is the error, pointing at the first."""
    found = _errors([{"name": "a", "uri": "s3://x/a"}, {"name": "a", "uri": "s3://x/b"}])
    assert found == {"spec.inputs[1].name": "'a' is also spec.inputs[0].name"}


def test_the_list_is_bounded_and_must_be_a_list() -> None:
    """More than 32 inputs, or a mapping instead of a list, is one error on spec.inputs."""
    many = [{"name": f"d{i}", "uri": "s3://x/y"} for i in range(33)]
    assert _errors(many) == {"spec.inputs": "at most 32 inputs, got 33"}
    assert list(_errors({"name": "a"})) == ["spec.inputs"]
