"""The policy ConfigMap: parsed on every change; an invalid edit is refused with a reason."""

from __future__ import annotations

import os
from typing import Any

import kopf


def _is_policy(**kwargs: Any) -> bool:
    return bool(
        kwargs["name"] == os.environ.get("CPN_POLICY_CONFIGMAP", "cpn-policy")
        and kwargs["namespace"] == os.environ.get("CPN_NAMESPACE", "cpn-system")
    )


@kopf.on.event("", "v1", "configmaps", when=_is_policy)
def policy_changed(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if type == "DELETED":
        kopf.warn(body, reason="PolicyDeleted", message="policy deleted; the last one stays")
        return
    error = memo.runtime.policy_event(body)
    if error:
        kopf.warn(
            body,
            reason="InvalidPolicy",
            message=f"refused, the last good policy stays: {error}"[:1000],
        )
    else:
        kopf.info(
            body,
            reason="PolicyAccepted",
            message=f"policy version {body['metadata'].get('resourceVersion')} in force",
        )
