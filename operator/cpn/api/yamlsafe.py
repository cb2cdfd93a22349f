"""A YAML loader for documents written by people we do not fully trust.

:func:`load_yaml` accepts plain YAML (mappings, lists, scalars) and refuses,
with the line and column:

- text larger than a size cap (256 KiB by default);
- anchors and aliases (``&a`` / ``*a``): they are how "billion laughs" YAML
  bombs blow up, and a policy never needs them;
- any explicit tag (``!!python/object``, ``!!str``, ``!custom``);
- a key written twice in one mapping (PyYAML would silently keep the last);
- nesting deeper than 64 levels;
- more than one document in the stream.

Scalars follow the YAML 1.2 core schema, not PyYAML's YAML 1.1 defaults: only
``true``/``false`` are booleans (``yes``, ``no``, ``on``, ``off`` stay strings,
so a group named ``no`` stays ``"no"``), ``1e3`` is a number, ``010`` is ten,
``1:30`` and ``2024-01-01`` stay strings.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode

MAX_BYTES = 256 * 1024
MAX_DEPTH = 64

_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"

# The YAML 1.2 core schema's plain scalars, in resolution order.
_CORE_SCHEMA = (
    (_NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), "~nN"),
    (_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), "tTfF"),
    (_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), "-+0123456789"),
    (
        _FLOAT,
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        "-+.0123456789",
    ),
)


class YamlError(ValueError):
    """The text is not YAML we accept. ``line`` and ``column`` are 1-based (0 = unknown)."""

    def __init__(self, message: str, *, line: int = 0, column: int = 0) -> None:
        self.message = message
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line else ""
        super().__init__(where + message)


class _Refused(yaml.MarkedYAMLError):
    """A construct this loader refuses on purpose."""


def _refuse(message: str, mark: Any) -> _Refused:
    return _Refused(None, None, message, mark)


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stricter: YAML 1.2 core scalars; no aliases, anchors or tags;
    no duplicate keys; nesting at most MAX_DEPTH (what :func:`load_yaml` reads with)."""

    yaml_implicit_resolvers = {}  # noqa: RUF012  (filled below: the YAML 1.2 core schema)
    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent):
            raise _refuse(f"aliases (*{event.anchor}) are not allowed", event.start_mark)
        if isinstance(event, ScalarEvent | CollectionStartEvent):
            if event.anchor is not None:
                raise _refuse(f"anchors (&{event.anchor}) are not allowed", event.start_mark)
            if event.tag is not None:
                tag = event.tag.replace("tag:yaml.org,2002:", "!!")
                raise _refuse(f"tags ({tag}) are not allowed", event.start_mark)
        if self._depth >= MAX_DEPTH:
            raise _refuse(f"nesting deeper than {MAX_DEPTH}", event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # Refuse deep [ and { nesting while scanning: PyYAML looks up to 1,024 characters
        # ahead for a possible key at every level, which costs about a second per document
        # of nested brackets before compose_node would see the depth.
        if self.flow_level >= MAX_DEPTH:
            raise _refuse(f"nesting deeper than {MAX_DEPTH}", self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                raise ConstructorError(
                    None, None, "a key must be a plain value", key_node.start_mark
                ) from None
            if duplicate:
                raise _refuse(f"key {key!r} appears twice", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _construct_int(loader: yaml.SafeLoader, node: ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    try:
        if text.startswith(("0o", "0x")):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text, 10)
    except ValueError:  # more digits than Python converts
        raise _refuse("integer too long", node.start_mark) from None


def _construct_float(loader: yaml.SafeLoader, node: ScalarNode) -> float:
    text = str(loader.construct_scalar(node)).lower()
    if text.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    return float("nan") if text == ".nan" else float(text)


def _construct_bool(loader: yaml.SafeLoader, node: ScalarNode) -> bool:
    return str(loader.construct_scalar(node)).lower() == "true"


for _tag, _pattern, _first in _CORE_SCHEMA:
    for _char in _first:
        StrictLoader.yaml_implicit_resolvers.setdefault(_char, []).append((_tag, _pattern))
StrictLoader.yaml_implicit_resolvers[""] = [(_NULL, _CORE_SCHEMA[0][1])]  # an empty value
StrictLoader.add_constructor(_INT, _construct_int)
StrictLoader.add_constructor(_FLOAT, _construct_float)
StrictLoader.add_constructor(_BOOL, _construct_bool)


def load_yaml(text: str, *, max_bytes: int = MAX_BYTES) -> Any:
    """Parse one YAML document from ``text``; raise YamlError for anything refused."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise YamlError(f"document is {size} bytes, more than the {max_bytes} allowed")
    loader: StrictLoader | None = None
    try:
        loader = StrictLoader(text)
        return loader.get_single_data()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        message = " ".join(part for part in (error.context, error.problem) if part)
        if mark is None:
            raise YamlError(message) from None
        raise YamlError(message, line=mark.line + 1, column=mark.column + 1) from None
    except yaml.YAMLError as error:
        raise YamlError(str(error)) from None
    finally:
        if loader is not None:
            loader.dispose()
