"""Reading a document's nested fields, one way for AIJobs, policies and manifests.

Field paths are written ``spec.resources.gpus``, with odd keys quoted
(``metadata.labels["cpn.io/user"]``, :func:`join`); values are shown bounded and ASCII-only
(:func:`short_repr`, :func:`describe_value`); :class:`FieldReader` walks mappings and
collects a :class:`~cpn.core.errors.FieldError` for each bad field instead of stopping at
the first.
"""

from __future__ import annotations

import difflib
import json
import re
import reprlib
from collections.abc import Collection, Mapping
from typing import Any

from cpn.core.errors import FieldError

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60


def join(path: str, key: str) -> str:
    """``path.key``, or ``path["odd.key"]`` when the key is not a plain word."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def short_repr(value: object) -> str:
    """A bounded, ASCII-only repr: invisible and look-alike characters show as escapes."""
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        return ascii(text)
    return ascii(_REPR.repr(value))[1:-1]


def describe_value(value: object) -> str:
    """What a value is, for error messages: "an integer (5)", "a mapping"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({short_repr(value)})"
    if isinstance(value, float):
        return f"a number ({short_repr(value)})"
    if isinstance(value, str):
        return f"a string ({short_repr(value)})"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def hint(word: str, choices: Collection[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or ""."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class FieldReader:
    """Walks one document, collecting a FieldError for each bad field; ``noun`` is what
    the document calls its keys in messages ("field", "key")."""

    def __init__(self, noun: str = "field") -> None:
        self.noun = noun
        self.errors: list[FieldError] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def mapping(self, value: Any, path: str, known: Collection[str] | None) -> dict[str, Any]:
        """The string keys of a mapping that are ``known`` (all when None); a wrong type,
        other keys and unknown keys are reported."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.error(path, f"expected a mapping, got {describe_value(value)}")
            return {}
        found: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                self.error(path, f"key {short_repr(key)} must be a string")
            elif known is not None and key not in known:
                listed = f"known {self.noun}s: {', '.join(known)}"
                self.error(join(path, key), f"unknown {self.noun}{hint(key, known)}; {listed}")
            else:
                found[key] = item
        return found
