"""``cpn rerun``: the new AIJob is the old one's spec, un-suspended, under a generated name."""

from __future__ import annotations

from cpn.api.rerun import ANNOTATION_RERUN_OF, rerun_body


def test_rerun_copies_spec_labels_and_annotations_but_not_status_or_identity() -> None:
    old = {
        "apiVersion": "cpn.io/v1alpha1",
        "kind": "AIJob",
        "metadata": {
            "name": "train",
            "namespace": "team-a",
            "uid": "u1",
            "resourceVersion": "9",
            "labels": {"app": "x"},
            "annotations": {
                "note": "keep",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
            },
        },
        "spec": {"workers": 2, "suspend": True, "resources": {"gpus": 1}},
        "status": {"phase": "Succeeded"},
    }
    new = rerun_body(old)
    assert new["metadata"] == {
        "generateName": "train-rerun-",
        "labels": {"app": "x"},
        "annotations": {"note": "keep", ANNOTATION_RERUN_OF: "train"},
    }
    assert new["spec"] == {"workers": 2, "suspend": False, "resources": {"gpus": 1}}
    assert "status" not in new
    assert old["spec"]["suspend"] is True  # the original is left as it was


def test_a_long_name_leaves_room_for_the_generated_suffix() -> None:
    new = rerun_body({"metadata": {"name": "a" * 63}, "spec": {}})
    assert len(new["metadata"]["generateName"]) + 5 <= 63
