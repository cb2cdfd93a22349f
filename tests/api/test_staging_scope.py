"""Where a staging runs and copies to (policy data.staging_scope): ``node`` pins the staging
Job to the job's node onto a hostPath; ``cluster`` leaves it unpinned, copying into the
shared PersistentVolumeClaim that the training Job then mounts."""

from __future__ import annotations

from typing import Any

from cpn.api.jobs import render_job
from cpn.api.staging import StagingOrder, render_staging_job
from cpn.core.policy import DataPolicy
from tests.api.test_aijob_jobs import body, start

ORDER = StagingOrder(
    cluster="m1", node="n1", ident="imagenet@v1", uri="s3://b/imagenet", source="m2", size_bytes=5
)


def _pod(data: DataPolicy) -> dict[str, Any]:
    job = render_staging_job(ORDER, hub="hub", namespace="cpn-jobs", data=data)
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def test_node_scope_pins_the_staging_to_the_node_onto_a_host_path():
    pod = _pod(DataPolicy(copy_dest="/scratch/cpn"))
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["n1"]
    assert pod["volumes"] == [
        {"name": "data", "hostPath": {"path": "/scratch/cpn", "type": "DirectoryOrCreate"}}
    ]


def test_cluster_scope_runs_the_staging_anywhere_into_the_shared_claim():
    pod = _pod(DataPolicy(staging_scope="cluster", shared_claim="shared", copy_dest="/data"))
    assert "affinity" not in pod
    assert pod["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}]
    container = pod["containers"][0]
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert container["args"][container["args"].index("--dest") + 1] == "/data/imagenet@v1"


def test_the_training_job_mounts_the_shared_claim_read_only_in_every_container():
    manifest = render_job(
        body(), start(), attempt=1, hub="hub", namespace="ns", shared_data=("shared", "/data")
    )
    pod = manifest["spec"]["template"]["spec"]
    assert {
        "name": "cpn-data",
        "persistentVolumeClaim": {"claimName": "shared", "readOnly": True},
    } in pod["volumes"]
    for container in pod["containers"]:
        assert {"name": "cpn-data", "mountPath": "/data", "readOnly": True} in container[
            "volumeMounts"
        ]
    plain = render_job(body(), start(), attempt=1, hub="hub", namespace="ns")
    plain_pod = plain["spec"]["template"]["spec"]
    assert "volumes" not in plain_pod
    assert all("volumeMounts" not in c for c in plain_pod["containers"])
