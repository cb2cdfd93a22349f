"""Reading AIJobs into core jobs and rendering member Jobs: the contract with Kubernetes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cpn.api import constants as k
from cpn.api.aijob import parse_aijob
from cpn.api.jobs import finished_at, member_job_name, render_job
from cpn.api.status import condition, human_duration, merge_patch
from cpn.core.errors import InvalidSpec
from cpn.core.model import Start


def body(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "resources": {"gpus": 2, "cpu": "500m", "memory": "32Gi", "gpuTypes": ["v100"]},
        "workers": 2,
        "model": {"name": "resnet50", "batchSize": 64, "datasetSamples": 1000, "epochs": 3},
        "data": {"cluster": "east", "sizeGB": 100},
        "template": {
            "metadata": {"annotations": {"keep": "me"}},
            "spec": {
                "containers": [{"name": "train", "image": "t:1"}, {"name": "side", "image": "s:1"}]
            },
        },
    }
    base.update(spec)
    return {
        "apiVersion": "cpn.io/v1alpha1",
        "kind": "AIJob",
        "metadata": {
            "name": "resnet",
            "namespace": "team-a",
            "uid": "0a1b2c3d-4e5f-6789-abcd-ef0123456789",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "generation": 1,
        },
        "spec": base,
    }


def test_parse_reads_resources_model_and_owner():
    """Quantities parse, family names expand, and user/group come from the caller only."""
    job = parse_aijob(body(), user="alice", group="vision")
    assert job.key == "team-a/resnet"
    assert (job.gpus_per_worker, job.workers, job.gpus) == (2, 2, 4.0)
    assert job.cpu == 0.5 and job.memory_gib == 32.0
    assert {"V100-16GB", "V100-32GB"} <= job.gpu_types
    assert job.features["dataset_samples"] == 1000 and job.features["epochs"] == 3
    assert (job.user, job.group) == ("alice", "vision")
    assert job.data_cluster == "east" and job.data_gb == 100


@pytest.mark.parametrize(
    ("change", "want_path"),
    [
        pytest.param(
            {"resources": {"gpus": 1, "gpuTypes": ["Z9000"]}},
            "spec.resources.gpuTypes[0]",
            id="unknown GPU type",
        ),
        pytest.param(
            {"resources": {"gpus": 1, "cpu": "lots"}}, "spec.resources.cpu", id="cpu not a quantity"
        ),
        pytest.param(
            {"resources": {"gpus": 2, "gpuShare": 0.5}},
            "spec.resources.gpuShare",
            id="sharing needs one GPU",
        ),
        pytest.param(
            {"template": {"spec": {"containers": []}}},
            "spec.template.spec.containers",
            id="no container",
        ),
        pytest.param({"data": {"sizeGB": 5}}, "spec.data.cluster", id="data without a place"),
        pytest.param(
            {"checkpointIntervalSeconds": 600},
            "spec.checkpointIntervalSeconds",
            id="checkpoint interval without checkpoint",
        ),
        pytest.param(
            {"checkpoint": True, "checkpointIntervalSeconds": 0.5},
            "spec.checkpointIntervalSeconds",
            id="checkpoint interval below a second",
        ),
    ],
)
def test_parse_names_the_bad_field(change: dict[str, Any], want_path: str):
    """Each semantic mistake is refused with its field path."""
    with pytest.raises(InvalidSpec) as err:
        parse_aijob(body(**change), user="u", group="g")
    assert want_path in {e.path for e in err.value.errors}


def start() -> Start:
    return Start(
        job_key="team-a/resnet",
        cluster="member-b",
        gpu_type="V100-32GB",
        nodes=("n1", "n2", "n1"),
        predicted_runtime_s=100.0,
    )


def test_member_job_name_is_stable_and_a_dns_label():
    """The same AIJob and attempt give the same name, at most 63 characters."""
    uid = "0a1b2c3d-4e5f-6789-abcd-ef0123456789"
    assert member_job_name("resnet", uid, 1) == "resnet-0a1b2c3d-1"
    long = member_job_name("x" * 80, uid, 12)
    assert len(long) <= 63 and long.endswith("-0a1b2c3d-12")


def test_render_job_pins_nodes_requests_gpus_and_labels_origin():
    """The member Job: origin labels, node affinity, GPU limit on the first container."""
    b = body()
    b["spec"]["template"]["metadata"]["annotations"][k.ANNOTATION_PER_GPU_TYPE] = json.dumps(
        {"testbed.cpn.io/duration": {"V100-32GB": "45s", "A100-80GB": "20s"}}
    )
    job = render_job(b, start(), attempt=2, hub="hub", namespace="cpn-jobs")
    labels = job["metadata"]["labels"]
    assert labels[k.LABEL_UID] == b["metadata"]["uid"] and labels[k.LABEL_ATTEMPT] == "2"
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["n1", "n2"]
    first, side = pod["spec"]["containers"]
    assert first["resources"]["limits"][k.GPU_RESOURCE] == "2"
    assert first["resources"]["requests"] == {"cpu": "500m", "memory": "32Gi"}
    assert "resources" not in side
    notes = pod["metadata"]["annotations"]
    assert notes["keep"] == "me" and notes["testbed.cpn.io/duration"] == "45s"
    assert pod["metadata"]["labels"][k.LABEL_UID] == b["metadata"]["uid"]


def test_a_resumed_attempt_tells_its_pods_where_to_resume() -> None:
    """Every attempt's containers get CPN_ATTEMPT; one resuming a preempted job also gets
    CPN_RESUME_FROM_S and the pod annotation with the checkpointed seconds."""
    b = body(checkpoint=True, checkpointIntervalSeconds=600)
    job = parse_aijob(b, user="u", group="g")
    assert (job.checkpoint, job.checkpoint_interval_s) == (True, 600.0)
    fresh = render_job(b, start(), attempt=1, hub="hub", namespace="ns")
    resumed = render_job(b, start(), attempt=3, hub="hub", namespace="ns", resume_from_s=1200.0)
    for manifest, want in ((fresh, {"CPN_ATTEMPT": "1"}), (resumed, {"CPN_ATTEMPT": "3"})):
        pod = manifest["spec"]["template"]
        for container in pod["spec"]["containers"]:
            env = {e["name"]: e["value"] for e in container["env"]}
            assert env["CPN_ATTEMPT"] == want["CPN_ATTEMPT"]
            assert env.get("CPN_RESUME_FROM_S") == ("1200" if manifest is resumed else None)
        notes = pod["metadata"]["annotations"]
        assert notes.get(k.ANNOTATION_RESUME_FROM) == ("1200" if manifest is resumed else None)


def test_an_attempt_carries_its_fence_and_checkpoint_directories() -> None:
    """The fencing token is a label of the Job and its pods and in every container's env,
    with the attempt-scoped checkpoint directories under the AIJob's checkpoint root."""
    b = body()
    uid = b["metadata"]["uid"]
    plain = render_job(b, start(), attempt=2, hub="hub", namespace="ns", fence="2-beef")
    assert plain["metadata"]["labels"][k.LABEL_FENCE] == "2-beef"
    pod = plain["spec"]["template"]
    assert pod["metadata"]["labels"][k.LABEL_FENCE] == "2-beef"
    for container in pod["spec"]["containers"]:
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["CPN_FENCE"] == "2-beef"
        assert env["CPN_CHECKPOINT_DIR"] == f"/checkpoints/{uid}/attempt-2"
        assert env["CPN_RESUME_DIRS"] == f"/checkpoints/{uid}/attempt-1"
    b["metadata"]["annotations"] = {k.ANNOTATION_CHECKPOINT_ROOT: "/mnt/ckpt"}
    rooted = render_job(b, start(), attempt=1, hub="hub", namespace="ns")
    assert k.LABEL_FENCE not in rooted["metadata"]["labels"]
    env = {
        e["name"]: e["value"] for e in rooted["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["CPN_CHECKPOINT_DIR"] == f"/mnt/ckpt/{uid}/attempt-1"
    assert "CPN_FENCE" not in env


def test_render_job_survives_a_per_type_annotation_it_cannot_read():
    """Broken or 100,000-deep JSON in the per-GPU-type annotation adds nothing, raises nothing
    (the AIJob reader refuses both; this is the second guard at dispatch)."""
    for raw in ("{not json", "[" * 100_000 + "]" * 100_000):
        b = body()
        b["spec"]["template"]["metadata"]["annotations"][k.ANNOTATION_PER_GPU_TYPE] = raw
        job = render_job(b, start(), attempt=1, hub="hub", namespace="cpn-jobs")
        notes = job["spec"]["template"]["metadata"]["annotations"]
        assert "testbed.cpn.io/duration" not in notes and notes["keep"] == "me"


def test_render_job_for_a_shared_gpu_adds_hami_limits():
    """A GPU share asks HAMi for cores and memory, and names its pool when configured."""
    b = body(resources={"gpus": 1, "gpuShare": 0.25, "gpuMemoryGiB": 8})
    job = render_job(b, start(), attempt=1, hub="hub", namespace="ns", hami_pool="pool-a")
    pod = job["spec"]["template"]
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {k.GPU_RESOURCE: "1", k.HAMI_GPU_CORES: "25", k.HAMI_GPU_MEMORY: "8192"}
    assert pod["metadata"]["annotations"][k.ANNOTATION_HAMI_POOL] == "pool-a"


def test_gpu_type_affinity_uses_the_product_label():
    """With affinity gpu-type the Job may land on any node of the chosen GPU product."""
    job = render_job(
        body(),
        start(),
        attempt=1,
        hub="hub",
        namespace="ns",
        affinity="gpu-type",
        gpu_product="Tesla-V100-SXM2-32GB",
    )
    expr = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expr == {
        "key": k.GPU_PRODUCT_LABEL,
        "operator": "In",
        "values": ["Tesla-V100-SXM2-32GB"],
    }


def test_condition_keeps_its_transition_time_while_unchanged():
    """Only a change of status moves lastTransitionTime."""
    first = condition("Admitted", False, "Capacity", "m", generation=1, now_s=100.0)
    same = condition("Admitted", False, "Quota", "m2", generation=1, now_s=200.0, previous=[first])
    flipped = condition(
        "Admitted", True, "Dispatched", "m3", generation=1, now_s=300.0, previous=[same]
    )
    assert same["lastTransitionTime"] == first["lastTransitionTime"]
    assert flipped["lastTransitionTime"] != first["lastTransitionTime"]


def test_merge_patch_sends_only_changes_and_removals():
    """Unchanged keys are left out; keys gone are set to None, inside objects too."""
    assert merge_patch({"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 5}) == {"b": 5, "c": None}
    before = {"range": {"earliest": "10:00", "latest": "11:00"}, "eta": "10:30"}
    after = {"range": {"latest": "11:05"}, "eta": "imminent"}
    assert merge_patch(before, after) == {
        "range": {"earliest": None, "latest": "11:05"},
        "eta": "imminent",
    }


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386's algorithm, as an API server applies a merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge_patch(out.get(key), value)
    return out


_leaf = st.one_of(st.integers(-3, 3), st.sampled_from(["x", "y"]), st.lists(st.integers(0, 2)))
_doc = st.recursive(
    _leaf, lambda inner: st.dictionaries(st.sampled_from("abcd"), inner, max_size=4), max_leaves=12
)


@given(
    old=st.dictionaries(st.sampled_from("abcd"), _doc),
    new=st.dictionaries(st.sampled_from("abcd"), _doc),
)
def test_merge_patch_applied_by_the_server_gives_the_new_status(old, new):
    """Whatever the nesting, the server applying the patch to ``old`` holds ``new``."""
    assert apply_merge_patch(old, merge_patch(old, new)) == new


@pytest.mark.parametrize(
    ("seconds", "want"), [(45, "45s"), (75, "1m15s"), (3700, "1h01m"), (90000, "1d1h"), (None, "")]
)
def test_human_duration(seconds: float | None, want: str):
    """Printer-column durations are short."""
    assert human_duration(seconds) == want


def template_with(**meta: Any) -> dict[str, Any]:
    return {"metadata": meta, "spec": {"containers": [{"name": "train", "image": "t:1"}]}}


def errors_of(spec_change: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidSpec) as err:
        parse_aijob(body(**spec_change), user="u", group="g")
    return {e.path: e.message for e in err.value.errors}


def test_annotations_a_member_would_refuse_are_invalid_with_the_sizes():
    """A member takes 256 KiB of annotations in all (keys and values, in bytes); cpn keeps
    17 KiB of it for what it adds, so the template may hold 239 KiB; one byte more is
    refused here, not by the member at every dispatch."""
    room = 256 * 1024 - 16 * 1024 - 1024
    key = "notes.example.com/x"
    fits = template_with(annotations={key: "é" * ((room - len(key)) // 2)})  # 2 bytes each
    parse_aijob(body(template=fits), user="u", group="g")
    over = template_with(annotations={key: "x" * (room - len(key) + 1)})
    found = errors_of({"template": over})
    assert found == {
        "spec.template.metadata.annotations": f"{room + 1} bytes in all; a member cluster "
        f"takes at most 262144 bytes of annotations, of which cpn keeps 17408 for its own: "
        f"at most {room}"
    }


@pytest.mark.parametrize(
    ("field", "key", "value", "why"),
    [
        ("labels", "team", "a" * 64, "is not a label value"),
        ("labels", "team", "-dash", "is not a label value"),
        ("labels", "bad key", "x", "not a valid key"),
        ("annotations", "Example.com/x", "x", "not a valid key"),  # the prefix is lower case
        ("annotations", "x" * 64, "x", "not a valid key"),
        ("labels", "a/b/c", "x", "not a valid key"),
    ],
)
def test_label_and_annotation_keys_and_label_values_are_checked(field, key, value, why):
    """What Kubernetes' validation refuses (422) is refused with its path."""
    found = errors_of({"template": template_with(**{field: {key: value}})})
    ((path, message),) = found.items()
    assert path.startswith(f"spec.template.metadata.{field}") and key in path, path
    assert why in message, message


def test_valid_keys_and_values_pass():
    meta = {
        "labels": {"app.kubernetes.io/name": "x", "empty": "", "a_b.c-d": "V1.2_3"},
        "annotations": {"example.com/long": "any text: /, spaces, ünïcode"},
    }
    parse_aijob(body(template=template_with(**meta)), user="u", group="g")


def test_a_template_too_big_for_a_member_is_invalid():
    """Over 1 MiB of pod template (as JSON) would not fit a member's store with cpn's part."""
    env = [{"name": f"V{i}", "value": "x" * 1000} for i in range(1100)]
    template = {"spec": {"containers": [{"name": "train", "image": "t:1", "env": env}]}}
    found = errors_of({"template": template})
    assert "a member cluster stores at most 1048576" in found["spec.template"]


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("skew_s", [300.0, -300.0])
def test_a_skewed_members_finish_is_read_on_one_clock(skew_s: float) -> None:
    """A member whose clock is 5 minutes off: the attempt ran its Job's completionTime -
    startTime (both the member's), not 5 minutes more or less (before: 300 s too long,
    or 0 s, learned by the predictor)."""
    began, now = 1_800_000_000.0, 1_800_000_130.0  # operator clock: ran 120 s, seen 10 s late
    status = {
        "startTime": _stamp(began - 2 + skew_s),
        "completionTime": _stamp(began + 118 + skew_s),
    }
    assert finished_at(status, began, now) == began + 120.0


def test_a_finish_seen_late_keeps_its_completion_time() -> None:
    """No skew, seen after an outage: the member's completionTime as it is."""
    began, now = 1_800_000_000.0, 1_800_003_600.0
    status = {"startTime": _stamp(began - 2), "completionTime": _stamp(began + 300)}
    assert finished_at(status, began, now) == began + 300


def test_a_finish_without_stamps_is_now() -> None:
    assert finished_at({}, 100.0, 250.0) == 250.0
    assert finished_at({"completionTime": _stamp(1_800_000_000)}, 100.0, 250.0) == 250.0
