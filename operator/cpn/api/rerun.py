"""Re-running an AIJob: a new AIJob with the same spec (``cpn rerun``).

An AIJob's phase only moves forward (a finished one stays finished: its status is the
record of that run), so a run again is a new object: :func:`rerun_body` copies the spec,
labels and annotations (not kubectl's last-applied copy, not the status), un-suspends it,
names it ``<name>-rerun-<random>`` (the API server's ``generateName``) and notes the
original in the ``cpn.io/rerun-of`` annotation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

ANNOTATION_RERUN_OF: Final = "cpn.io/rerun-of"
_LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"
#: room for the 5 random characters the API server adds, within 63
_PREFIX_MAX: Final = 63 - 5 - len("-rerun-")


def rerun_body(aijob: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest of a new AIJob that runs ``aijob``'s spec again."""
    meta = aijob.get("metadata") or {}
    name = str(meta.get("name", "aijob"))
    annotations = {
        key: value for key, value in (meta.get("annotations") or {}).items() if key != _LAST_APPLIED
    }
    annotations[ANNOTATION_RERUN_OF] = name
    new_meta: dict[str, Any] = {
        "generateName": f"{name[:_PREFIX_MAX].rstrip('-.')}-rerun-",
        "annotations": annotations,
    }
    if meta.get("labels"):
        new_meta["labels"] = dict(meta["labels"])
    spec = copy.deepcopy(dict(aijob.get("spec") or {}))
    spec["suspend"] = False
    return {
        "apiVersion": aijob.get("apiVersion", "cpn.io/v1alpha1"),
        "kind": aijob.get("kind", "AIJob"),
        "metadata": new_meta,
        "spec": spec,
    }
