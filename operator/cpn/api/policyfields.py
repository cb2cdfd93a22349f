"""The field parsers of the policy document, and the reader that collects every problem.

Each scalar parser returns the value or raises :class:`Invalid`; :class:`PolicyReader`
walks sections and named tables, reporting each bad field with its path instead of
stopping at the first. :mod:`cpn.api.policy` and :mod:`cpn.api.policydomains` read the
document's sections with them.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from cpn.api.fields import FieldReader, hint, join
from cpn.api.fields import describe_value as _kind
from cpn.api.fields import short_repr as _short
from cpn.core.errors import FormulaError
from cpn.core.formula import compile_formula

MAX_NAME = 253


class Invalid(Exception):
    """One value is wrong; ``at`` is appended to the field's path (e.g. ``[2]``)."""

    def __init__(self, message: str, at: str = "") -> None:
        super().__init__(message)
        self.at = at


Parser = Callable[[Any], Any]


def figure(value: float) -> str:
    """A bound as an admin would write it: 31622400, not 3.16224e+07."""
    return f"{value:.0f}" if float(value).is_integer() and abs(value) < 1e16 else f"{value:g}"


# --- scalar parsers: each returns the value or raises Invalid -----------------


def number(low: float, high: float, *, above: bool = False, nullable: bool = False) -> Parser:
    """A finite number in [low, high] (or (low, high] with ``above``); null if ``nullable``."""

    def parse(value: Any) -> float | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            quoted = isinstance(value, str) and _looks_numeric(value)
            hint = " (write it without quotes)" if quoted else ""
            raise Invalid(f"expected a number, got {_kind(value)}{hint}")
        try:
            number = float(value)
        except OverflowError:
            raise Invalid(f"must be at most {figure(high)}, got a huge integer") from None
        if not math.isfinite(number):
            raise Invalid(f"must be a finite number, got {value}")
        if above and number <= low:
            raise Invalid(f"must be greater than {figure(low)}, got {value}")
        if number < low:
            raise Invalid(f"must be at least {figure(low)}, got {value}")
        if number > high:
            raise Invalid(f"must be at most {figure(high)}, got {value}")
        return number

    return parse


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def integer(low: int, high: int, *, nullable: bool = False) -> Parser:
    def parse(value: Any) -> int | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"expected an integer, got {_kind(value)}")
        if not low <= value <= high:
            raise Invalid(f"must be between {low} and {high}, got {_short(value)}")
        return value

    return parse


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        yaml11 = isinstance(value, str) and value.lower() in ("yes", "no", "on", "off", "y", "n")
        hint = " (only true and false are booleans)" if yaml11 else ""
        raise Invalid(f"expected true or false, got {_kind(value)}{hint}")
    return value


def name_text(value: Any) -> str:
    """A display name: any text but invisible characters (controls, zero-width, bidi)."""
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"expected a non-empty string, got {_kind(value)}")
    if len(value) > MAX_NAME:
        raise Invalid(f"is longer than {MAX_NAME} characters")
    for index, char in enumerate(value):
        if unicodedata.category(char)[0] in "CZ" and char != " ":
            raise Invalid(f"{value!a}: invisible character U+{ord(char):04X} at {index}")
    return value


def ident(value: Any) -> str:
    """A name that is matched (group, user, queue, namespace, GPU type): printable ASCII
    without spaces, so no look-alike or invisible character makes two names seem one."""
    name = name_text(value)
    for index, char in enumerate(name):
        if not " " < char < "\x7f":
            raise Invalid(f"{name!a}: character U+{ord(char):04X} at {index} is not ASCII")
    return name


def absolute_path(value: Any) -> str:
    """An absolute path of printable ASCII ("/var/lib/cpn/data"), no ``..`` part."""
    path = ident(value)
    if not path.startswith("/") or ".." in path.split("/"):
        raise Invalid(f"{path!a}: expected an absolute path without '..'")
    return path


def choice(options: tuple[str, ...]) -> Parser:
    def parse(value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            near = hint(value, options) if isinstance(value, str) else ""
            raise Invalid(f"must be one of {', '.join(options)}; got {_kind(value)}{near}")
        return value

    return parse


def formula(*, nullable: bool = False) -> Parser:
    def parse(value: Any) -> str | None:
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise Invalid(f"expected a formula (a string), got {_kind(value)}")
        try:
            compile_formula(value)
        except FormulaError as error:
            raise Invalid(f"invalid formula: {error}") from None
        return value

    return parse


def names(value: Any) -> frozenset[str]:
    if not isinstance(value, list):
        raise Invalid(f"expected a list of names, got {_kind(value)}")
    for index, item in enumerate(value):
        try:
            ident(item)
        except Invalid as invalid:
            raise Invalid(str(invalid), at=f"[{index}]") from None
    return frozenset(value)


class PolicyReader(FieldReader):
    """Walks a policy document, collecting every FieldError instead of stopping at the first."""

    def __init__(self) -> None:
        super().__init__("key")

    def fields(
        self, section: Mapping[str, Any], path: str, parsers: Mapping[str, Parser]
    ) -> dict[str, Any]:
        """Parse the present fields of a section; bad ones are reported and left out."""
        parsed: dict[str, Any] = {}
        for key, parse in parsers.items():
            if key in section:
                try:
                    parsed[key] = parse(section[key])
                except Invalid as invalid:
                    self.error(join(path, key) + invalid.at, str(invalid))
        return parsed

    def section(self, value: Any, path: str, parsers: Mapping[str, Parser]) -> dict[str, Any]:
        return self.fields(self.mapping(value, path, tuple(parsers)), path, parsers)

    def entries(self, value: Any, path: str, what: str) -> list[tuple[str, Any, str]]:
        """A mapping from names the admin chose (groups, users...) to values, with paths."""
        if value is None:
            return []
        if not isinstance(value, Mapping):
            self.error(path, f"expected a mapping of {what} names, got {_kind(value)}")
            return []
        found = []
        for key, item in value.items():
            try:
                name = ident(key)
            except Invalid as invalid:
                self.error(path, f"{what} name {_short(key)}: {invalid}")
                continue
            found.append((name, item, join(path, name)))
        return found

    def table(self, value: Any, path: str, what: str, parse: Parser) -> dict[str, Any]:
        """``{name: value}`` with each value parsed by ``parse``."""
        parsed: dict[str, Any] = {}
        for name, item, item_path in self.entries(value, path, what):
            try:
                parsed[name] = parse(item)
            except Invalid as invalid:
                self.error(item_path + invalid.at, str(invalid))
        return parsed
