"""``cpn cancel|suspend|resume|rerun`` show the API server's own refusal, and say what is
wrong in one line when there is no hub to ask (the calls themselves are tested on the bed:
tests/e2e/test_delegated_quotas.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from cpn.adapters.hubactions import ActionRefused


def test_a_refusal_carries_the_api_servers_message() -> None:
    err = ApiException(status=403, reason="Forbidden")
    err.body = json.dumps(
        {
            "kind": "Status",
            "message": 'aijobs.cpn.io "n1" is forbidden: User "vera" cannot delete resource',
        }
    )
    refused = ActionRefused.of(err)
    assert refused.status == 403
    assert refused.message.startswith('aijobs.cpn.io "n1" is forbidden: User "vera"')
    # a body that is not a Status: the reason
    err.body = "<html>"
    assert ActionRefused.of(err).message == "Forbidden"


def test_no_kubeconfig_is_one_line_and_exit_1(tmp_path: Path) -> None:
    missing = tmp_path / "nothing"
    done = subprocess.run(
        [sys.executable, "-m", "cpn", "cancel", "x", "-n", "ns", "--kubeconfig", str(missing)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == f"cpn cancel: cannot read the kubeconfig {missing}: " + (
        "No such file or directory"
    )
