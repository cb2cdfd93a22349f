"""The bed's stand-in for cpn's staging copies, and its true link table.

KWOK runs no container, so nothing would ever copy a staging pod's input. The DCGM
simulator (``testbed.dcgm``) calls :func:`staging_annotations` on every pod event: a running
pod labelled ``cpn.io/staging`` with no end yet gets ``testbed.cpn.io/finish-at`` =
now + bytes / the bed's true bandwidth of the link from its source cluster (its
``cpn.io/staging-source`` annotation) to the cluster it runs in; kwok's ``pod-succeed``
stage then ends it then. The true table is the bed's own (``<bed dir>/links.yaml``, written
by :func:`write_links`, read again at each staging so a test may change it between
stagings); cpn never reads it, it only sees how long its stagings took.

A staging pod that succeeds leaves the copy program's report as its termination message
(``{"dest", "bytes", "seconds"}``, via ``testbed.cpn.io/termination-message``): its bytes
are the pod's ``cpn.io/staging-bytes``, or, for an input declared without a size (0), the
input's true size in the same file (``sizes``: input ident -> bytes, :func:`write_links`;
an input it does not list copies 0 bytes).

A node annotated ``testbed.cpn.io/staging-outcome: Failed`` fails every staging pod on it
(after ``STAGING_FAIL_AFTER_S``): a test's way to make stagings fail.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

#: pod label and annotations cpn puts on staging pods (cpn.api.constants)
STAGING_LABEL = "cpn.io/staging"
STAGING_SOURCE_ANNOTATION = "cpn.io/staging-source"
STAGING_BYTES_ANNOTATION = "cpn.io/staging-bytes"
#: node annotation: "Failed" fails every staging pod on that node
STAGING_OUTCOME_ANNOTATION = "testbed.cpn.io/staging-outcome"
#: seconds a failing staging pod runs before it fails
STAGING_FAIL_AFTER_S = 2.0
#: the true bandwidth (Gbit/s) of a link the table does not list
DEFAULT_LINK_GBPS = 10.0
LINKS_FILE = "links.yaml"
STAGING_INPUT_ANNOTATION = "cpn.io/staging-input"
TERMINATION_MESSAGE_ANNOTATION = "testbed.cpn.io/termination-message"


def write_links(
    path: Path, links: dict[tuple[str, str], float], sizes: dict[str, int] | None = None
) -> None:
    """Write the true link table: ``{(a, b): Gbit/s}``, each link both ways, and the true
    ``sizes`` (input ident -> bytes) of inputs declared without one."""
    rows = [{"between": [a, b], "gbps": gbps} for (a, b), gbps in sorted(links.items())]
    path.write_text(yaml.safe_dump({"links": rows, "sizes": dict(sizes or {})}))


def read_sizes(path: Path | None) -> dict[str, int]:
    """The true sizes at ``path`` (input ident -> bytes; empty when absent or unreadable)."""
    if path is None or not path.exists():
        return {}
    try:
        doc = yaml.safe_load(path.read_text()) or {}
        return {str(ident): int(size) for ident, size in (doc.get("sizes") or {}).items()}
    except (OSError, yaml.YAMLError, AttributeError, TypeError, ValueError):
        return {}


def read_links(path: Path | None) -> dict[frozenset[str], float]:
    """The true link table at ``path`` (empty when absent or unreadable)."""
    if path is None or not path.exists():
        return {}
    try:
        doc = yaml.safe_load(path.read_text()) or {}
        return {
            frozenset(row["between"]): float(row["gbps"])
            for row in doc.get("links") or ()
            if float(row["gbps"]) > 0
        }
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return {}


def link_gbps(links: dict[frozenset[str], float], source: str, cluster: str) -> float:
    return links.get(frozenset((source, cluster)), DEFAULT_LINK_GBPS)


def staging_annotations(
    pod: dict[str, Any],
    cluster: str,
    failing: bool,
    links: dict[frozenset[str], float],
    now_s: float,
    sizes: dict[str, int] | None = None,
) -> dict[str, str] | None:
    """What to write on staging pod ``pod`` of member ``cluster`` that runs and has no end
    yet (None: nothing); ``failing``: its node fails stagings; ``sizes``: the true sizes of
    inputs declared without one."""
    meta = pod.get("metadata") or {}
    notes = meta.get("annotations") or {}
    if STAGING_LABEL not in (meta.get("labels") or {}):
        return None
    if (pod.get("status") or {}).get("phase") != "Running" or "testbed.cpn.io/finish-at" in notes:
        return None
    if failing:
        seconds = STAGING_FAIL_AFTER_S
    else:
        try:
            size = int(notes.get(STAGING_BYTES_ANNOTATION) or 0)
        except ValueError:
            size = 0
        if size <= 0:
            size = (sizes or {}).get(str(notes.get(STAGING_INPUT_ANNOTATION) or ""), 0)
        source = str(notes.get(STAGING_SOURCE_ANNOTATION) or "")
        seconds = size * 8 / 1e9 / link_gbps(links, source, cluster) if source != cluster else 0.0
    end = datetime.fromtimestamp(now_s + seconds, tz=UTC)
    out = {"testbed.cpn.io/finish-at": end.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"}
    if failing:
        out["testbed.cpn.io/outcome"] = "Failed"
    else:
        report = {"dest": "", "bytes": size, "seconds": round(seconds, 3)}
        out[TERMINATION_MESSAGE_ANNOTATION] = json.dumps(report, separators=(",", ":"))
    return out
