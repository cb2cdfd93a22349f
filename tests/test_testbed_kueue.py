"""testbed/kueue.py without a bed: the cache key agrees with build.sh, and only the webhooks
of Kueue's own kinds and of Jobs are registered, by URL."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import yaml

from testbed import kueue


def test_cache_folder_key_is_the_one_build_sh_computes() -> None:
    out = subprocess.run(
        ["bash", "-c", "cat go.mod go.sum build.sh | sha256sum | cut -c1-12"],
        cwd=kueue.KUEUE_DIR,
        capture_output=True,
        text=True,
        check=True,
    )
    assert kueue.default_root().name == f"kueue-{out.stdout.strip()}"


def _hook(name: str, path: str) -> dict[str, object]:
    return {
        "name": name,
        "clientConfig": {
            "service": {"name": "webhook-service", "namespace": "system", "path": path}
        },
        "failurePolicy": "Fail",
    }


def test_only_kueue_and_job_webhooks_are_registered_by_url(tmp_path: Path) -> None:
    manifest = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            _hook("mpod.kb.io", "/mutate--v1-pod"),
            _hook("mjob.kb.io", "/mutate-batch-v1-job"),
            _hook("mdeployment.kb.io", "/mutate-apps-v1-deployment"),
            _hook("mworkload.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-workload"),
        ],
    }
    (tmp_path / "webhook.yaml").write_text(yaml.safe_dump_all([manifest, None]))
    (doc,) = kueue.webhook_configurations(tmp_path, "https://127.0.0.1:9", b"CA")
    assert doc["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    assert [h["name"] for h in doc["webhooks"]] == ["mjob.kb.io", "mworkload.kb.io"]
    job = doc["webhooks"][0]["clientConfig"]
    assert job == {
        "url": "https://127.0.0.1:9/mutate-batch-v1-job",
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    assert f"{kueue.WEBHOOK_CONFIGS[0].split('/')[1]}" == doc["metadata"]["name"]
