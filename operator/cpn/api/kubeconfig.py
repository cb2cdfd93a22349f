"""Check a member cluster's kubeconfig (from its Secret) before the operator uses it.

A kubeconfig can do more than hold credentials: ``exec`` and ``auth-provider``
run programs or plugins, and file fields (``certificate-authority``,
``client-key``, ``tokenFile``) read files from the operator's own disk, such as
its ServiceAccount token, and could send them to the server the kubeconfig
names. A member's credentials must be *in* the Secret, so this accepts only
inline data: a server URL, ``certificate-authority-data`` (or none), and either
``token`` or ``client-certificate-data`` + ``client-key-data``.
:func:`kubeconfig_problems` lists what is refused, with the field path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cpn.api.yamlsafe import YamlError, load_yaml

#: Fields of ``clusters[].cluster`` and ``users[].user`` that hold credentials inline.
CLUSTER_FIELDS = frozenset(
    {"server", "certificate-authority-data", "tls-server-name", "insecure-skip-tls-verify"}
)
USER_FIELDS = frozenset({"token", "client-certificate-data", "client-key-data"})


def _entries(doc: Mapping[str, Any], section: str, inner: str) -> list[tuple[str, Any]]:
    items = doc.get(section) or []
    if not isinstance(items, list):
        return [(section, None)]
    return [
        (f"{section}[{i}].{inner}", (e or {}).get(inner) if isinstance(e, Mapping) else None)
        for i, e in enumerate(items)
    ]


def kubeconfig_problems(text: str) -> list[str]:
    """Problems of a member kubeconfig ("path: why"); empty when only inline credentials."""
    try:
        doc = load_yaml(text)
    except YamlError as err:
        return [f"not accepted as YAML: {err}"]
    if not isinstance(doc, Mapping):
        return ["a kubeconfig must be a mapping"]
    problems = []
    for section, inner, allowed in (
        ("clusters", "cluster", CLUSTER_FIELDS),
        ("users", "user", USER_FIELDS),
    ):
        entries = _entries(doc, section, inner)
        if not entries:
            problems.append(f"{section}: at least one entry is needed")
        for path, body in entries:
            if not isinstance(body, Mapping):
                problems.append(f"{path}: expected a mapping")
                continue
            for key in body:
                if key not in allowed:
                    problems.append(
                        f"{path}.{key}: not allowed in a member kubeconfig "
                        f"(only {', '.join(sorted(allowed))}: credentials inline, no files, "
                        "no exec or auth-provider)"
                    )
    return problems


def context_namespace(text: str, context: str | None = None) -> str:
    """The namespace a kubeconfig's context (its current one unless named) points at, as
    kubectl uses it when no ``-n`` is given; "default" when it names none."""
    try:
        doc = load_yaml(text)
    except YamlError:
        return "default"
    if not isinstance(doc, Mapping):
        return "default"
    name = context or doc.get("current-context")
    contexts = doc.get("contexts")
    for entry in contexts if isinstance(contexts, list) else []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            inner = entry.get("context")
            found = inner.get("namespace") if isinstance(inner, Mapping) else None
            return str(found) if found else "default"
    return "default"
