"""YAML documents as cpn reads them: each value with the line of every field path in it.

Read with the loader of :mod:`cpn.api.yamlsafe` (no aliases, tags or duplicate keys;
YAML 1.2 scalars), one document at a time; field paths as :func:`cpn.api.fields.join`
writes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from cpn.api.fields import join
from cpn.api.yamlsafe import StrictLoader, YamlError

Json = Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Document:
    """One YAML document of a file: its value and the line of every field path in it."""

    index: int  # 1-based
    line: int  # 1-based line where it starts
    value: Json
    lines: Mapping[str, int]
    nodes: Mapping[str, Node]


def _index_nodes(
    node: Node, path: str, line: int, lines: dict[str, int], nodes: dict[str, Node]
) -> None:
    """Record each path's node, and its line: a mapping entry's key line, a list item's own."""
    nodes[path] = node
    lines[path] = line
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode):
                child = join(path, str(key_node.value))
                _index_nodes(value_node, child, key_node.start_mark.line + 1, lines, nodes)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            _index_nodes(item, f"{path}[{i}]", item.start_mark.line + 1, lines, nodes)


def read_documents(text: str) -> Iterator[Document]:
    """Every non-empty document of ``text``, read safely; raises YamlError where it stops."""
    loader = StrictLoader(text)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            if node is None:
                continue
            value = loader.construct_document(node)
            if value is None:
                continue
            lines: dict[str, int] = {}
            nodes: dict[str, Node] = {}
            _index_nodes(node, "", node.start_mark.line + 1, lines, nodes)
            yield Document(index=index, line=lines[""], value=value, lines=lines, nodes=nodes)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        message = " ".join(part for part in (error.context, error.problem) if part)
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        raise YamlError(message, line=line, column=column) from None
    except yaml.YAMLError as error:
        raise YamlError(str(error)) from None
    finally:
        loader.dispose()


def line_of(lines: Mapping[str, int], path: str) -> int:
    """The line of ``path`` or of its nearest ancestor that is in the document."""
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return 0
