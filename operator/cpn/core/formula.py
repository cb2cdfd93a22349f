"""The priority-formula language: a small, safe subset of CEL's expression syntax.

An admin writes one arithmetic expression over named per-job factors, e.g.
``1000000 * priority + aging * wait_s - gpu_time_s``; higher scores go first.
:func:`compile_formula` tokenizes and parses it (a Pratt parser, no Python
``eval``/``ast``) once into a tree of numpy operations; :meth:`Formula.evaluate`
scores every job at once. The CEL libraries tried instead (issue 18) are called once per job
and take 109-181 ms of CPU for a realistic formula over 10,000 jobs, against about 1 ms here
(``bench/bench_formula.py``; figures and their safety in docs/policy.md).

Grammar (CEL precedence, lowest first)::

    expr    := or ("?" expr ":" expr)?          # right-associative
    or      := and ("||" and)*
    and     := rel ("&&" rel)*
    rel     := sum (("=="|"!="|"<"|"<="|">"|">=") sum)?   # no chaining
    sum     := product (("+"|"-") product)*
    product := unary (("*"|"/"|"%") unary)*
    unary   := ("-"|"!") unary | atom
    atom    := number | "true" | "false" | factor | function "(" expr ("," expr)* ")"
             | "(" expr ")"
    number  := 42 | 0x2A | 2.5 | .5 | 1e6 | 2.5e-3       # "//" starts a comment to end of line

Semantics, chosen so that evaluation never fails and never warns:

- every value is a float64 (unlike CEL, ``7 / 2`` is 3.5 and ints mix with
  doubles); comparisons and ``&& || !`` give 1.0 or 0.0, and any non-zero
  value counts as true; ``c ? a : b`` picks per job;
- ``a / 0`` and ``a % 0`` are 0; ``%`` keeps the sign of ``a`` (like CEL on ints);
- ``log(x)`` for x <= 0, ``log1p(x)`` for x <= -1 and ``sqrt(x)`` for x < 0 are 0;
  ``exp``'s argument is clamped to at most 700 (``exp`` <= about 1e304);
- after every ``+ - * /``, NaN becomes 0 and an overflow becomes ±1.797e308
  (the largest float64); input columns are cleaned the same way first.

Limits: at most :data:`MAX_CHARS` characters, :data:`MAX_DEPTH` levels of
nesting (each parenthesis, call, unary operator or operand nests one level) and
:data:`MAX_NODES` nodes. Every error is a :class:`FormulaError` with the
1-based column (characters from the start of the text, newlines included).
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from cpn.core.errors import FormulaError

MAX_CHARS = 1000
MAX_DEPTH = 32
MAX_NODES = 256
#: What any overflow becomes (the largest finite float64).
BIG = float(np.finfo(np.float64).max)
#: ``exp``'s argument is clamped to at most this.
EXP_MAX_ARG = 700.0

#: The names a formula may use, with their meaning. All are per-job columns.
FACTORS: Mapping[str, str] = MappingProxyType(
    {
        "priority": "the job's own priority (integer, higher is more urgent)",
        "gpus": "GPUs asked in total (workers × GPUs per worker; fractional when shared)",
        "workers": "number of workers (pods) of the job",
        "runtime_s": "predicted remaining runtime on the fastest GPU type it may use, in "
        "seconds (given the service it already received, for a job that ran before)",
        "gpu_time_s": "predicted GPU-time: gpus × runtime_s, in GPU-seconds",
        "wait_s": "seconds since the job was submitted",
        "service_s": "GPU-seconds the job already received in earlier attempts",
        "quota_used": "share (0..1) of the job's group quota in use now",
        "user_level": "the user's level from the policy's user_levels (0 if unlisted)",
        "group_level": "the group's level from the policy's group_levels (0 if unlisted)",
        "user_estimate_s": "the runtime the user declared, in seconds (0 if none)",
        "attempts": "attempts already made (0 for a new job)",
        "unseen": "1 if the predictor never saw the job's model, else 0",
        "checkpoint": "1 if the job checkpoints (it may be preempted), else 0",
        "aging": "the policy's aging.rate constant (same for every job)",
        "fair_share": "2^-(r_group + r_user)/2 in (0, 1]: r = recent decayed usage of the job's "
        "group and user over their share; 1 = used nothing, 0.5 = used exactly its share "
        "(cpn.core.fairshare)",
        "group_fair_share": "2^-r_group in (0, 1]: the group's part of fair_share",
        "user_fair_share": "2^-r_user in (0, 1]: the user's part of fair_share",
        "size": "alias of gpus",
    }
)
#: Alternative spellings and the factor they read.
ALIASES: Mapping[str, str] = MappingProxyType({"size": "gpus"})

Vector = npt.NDArray[np.float64]
Value = Any  # a Vector or a float: constants stay scalars and broadcast
Columns = Mapping[str, Vector]
_Fn = Callable[[Columns], Value]

# --- tokens ------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<num>0[xX][0-9a-fA-F]+|(?:\d+\.\d+|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|&&|\|\||[-+*/%<>!?:(),])
    """,
    re.VERBOSE,
)

# Characters that are CEL but not ours, with the reason we give.
_REFUSED = {
    '"': "strings are not allowed",
    "'": "strings are not allowed",
    ".": "attribute access (.) is not allowed",
    "[": "indexing and lists ([ ]) are not allowed",
    "]": "indexing and lists ([ ]) are not allowed",
    "{": "maps and messages ({ }) are not allowed",
    "}": "maps and messages ({ }) are not allowed",
    "=": "'=' is not an operator; compare with '=='",
    "&": "'&' is not an operator; use '&&'",
    "|": "'|' is not an operator; use '||'",
}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # num | name | op | end
    text: str
    column: int  # 1-based
    number: float = 0.0


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        column = pos + 1
        if match is None:
            char = text[pos]
            reason = _REFUSED.get(char, f"unexpected character {char!r}")
            raise FormulaError(reason, column=column)
        kind = match.lastgroup or ""
        word = match.group()
        pos = match.end()
        if kind == "space":
            continue
        number = 0.0
        if kind == "num":
            number = float(int(word, 16)) if word[:2] in ("0x", "0X") else float(word)
            if not math.isfinite(number):
                raise FormulaError(f"number {word} is too large", column=column)
        tokens.append(_Token(kind, word, column, number))
    tokens.append(_Token("end", "", len(text) + 1))
    return tokens


# --- syntax tree -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Node:
    kind: str  # num | factor | unary | binary | ternary | call
    op: str  # operator, factor or function name
    args: tuple[_Node, ...] = ()
    number: float = 0.0
    column: int = 0


# Binding powers of the infix operators (higher binds tighter).
_INFIX = {
    "?": 10,
    "||": 20,
    "&&": 30,
    **dict.fromkeys(("==", "!=", "<", "<=", ">", ">="), 40),
    "+": 50,
    "-": 50,
    "*": 60,
    "/": 60,
    "%": 60,
}
_RELATIONS = frozenset(("==", "!=", "<", "<=", ">", ">="))
_PREFIX_BP = 70

# name -> (min args, max args)
_ARITY: Mapping[str, tuple[int, int]] = MappingProxyType(
    {
        "min": (1, 64),
        "max": (1, 64),
        "log": (1, 1),
        "log1p": (1, 1),
        "sqrt": (1, 1),
        "exp": (1, 1),
        "abs": (1, 1),
        "clamp": (3, 3),
    }
)
#: The functions a formula may call.
FUNCTIONS = frozenset(_ARITY)


def _nearest(word: str, choices: frozenset[str] | Mapping[str, str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


class _Parser:
    """A Pratt parser over the token list; counts nodes and nesting as it goes."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.index = 0
        self.depth = 0
        self.nodes = 0

    def peek(self) -> _Token:
        return self.tokens[self.index]

    def advance(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != "end":
            self.index += 1
        return token

    def node(self, kind: str, op: str, column: int, *args: _Node, number: float = 0.0) -> _Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise FormulaError(f"formula has more than {MAX_NODES} nodes", column=column)
        return _Node(kind, op, args, number, column)

    def expect(self, text: str) -> _Token:
        token = self.advance()
        if token.text != text or token.kind != "op":
            found = f"'{token.text}'" if token.text else "the end of the formula"
            raise FormulaError(f"expected '{text}', found {found}", column=token.column)
        return token

    def parse(self) -> _Node:
        tree = self.expression(0)
        token = self.peek()
        if token.kind != "end":
            if token.text == "(":
                raise FormulaError("only the listed functions can be called", column=token.column)
            if token.text == "in":
                raise FormulaError("the 'in' operator is not supported", column=token.column)
            raise FormulaError(
                f"expected an operator or the end, found '{token.text}'", column=token.column
            )
        return tree

    def expression(self, right_bp: int) -> _Node:
        self.depth += 1
        start = self.peek()
        if self.depth > MAX_DEPTH:
            raise FormulaError(f"formula nests more than {MAX_DEPTH} levels", column=start.column)
        left = self.prefix(self.advance())
        after_relation = False
        while True:
            token = self.peek()
            bp = _INFIX.get(token.text, 0) if token.kind == "op" else 0
            if bp <= right_bp:
                break
            self.advance()
            if token.text == "?":
                then = self.expression(0)
                self.expect(":")
                otherwise = self.expression(bp - 1)  # right-associative
                left = self.node("ternary", "?", token.column, left, then, otherwise)
                continue
            if token.text in _RELATIONS:
                if after_relation:
                    raise FormulaError(
                        "comparisons cannot be chained; write a < b && b < c",
                        column=token.column,
                    )
                after_relation = True
            right = self.expression(bp)
            left = self.node("binary", token.text, token.column, left, right)
        self.depth -= 1
        return left

    def prefix(self, token: _Token) -> _Node:
        if token.kind == "num":
            return self.node("num", token.text, token.column, number=token.number)
        if token.kind == "name":
            return self.name(token)
        if token.text in ("-", "!"):
            operand = self.expression(_PREFIX_BP)
            return self.node("unary", token.text, token.column, operand)
        if token.text == "(":
            inner = self.expression(0)
            self.expect(")")
            return inner
        if token.kind == "end":
            raise FormulaError("unexpected end of formula", column=token.column)
        raise FormulaError(f"unexpected '{token.text}'", column=token.column)

    def name(self, token: _Token) -> _Node:
        word = token.text
        if self.peek().text == "(":
            return self.call(token)
        if word in ("true", "false"):
            return self.node("num", word, token.column, number=1.0 if word == "true" else 0.0)
        if word in FACTORS:
            return self.node("factor", ALIASES.get(word, word), token.column)
        if word in FUNCTIONS:
            raise FormulaError(
                f"'{word}' is a function; call it as {word}(...)", column=token.column
            )
        if word in ("null", "in"):
            raise FormulaError(f"'{word}' is not supported", column=token.column)
        raise FormulaError(
            f"unknown name '{word}'{_nearest(word, FACTORS)}; known factors: " + ", ".join(FACTORS),
            column=token.column,
        )

    def call(self, token: _Token) -> _Node:
        word = token.text
        if word not in FUNCTIONS:
            what = "a factor, not a function" if word in FACTORS else "not an allowed function"
            raise FormulaError(
                f"'{word}' is {what}{_nearest(word, FUNCTIONS)}; functions: "
                + ", ".join(sorted(FUNCTIONS)),
                column=token.column,
            )
        self.expect("(")
        self.depth += 1
        args: list[_Node] = []
        if self.peek().text != ")":
            args.append(self.expression(0))
            while self.peek().text == ",":
                self.advance()
                args.append(self.expression(0))
        self.expect(")")
        self.depth -= 1
        low, high = _ARITY[word]
        if not low <= len(args) <= high:
            wanted = str(low) if low == high else f"{low} to {high}"
            raise FormulaError(
                f"{word}() takes {wanted} argument(s), got {len(args)}", column=token.column
            )
        return self.node("call", word, token.column, *args)


# --- numpy operations ----------------------------------------------------------


def _finite(x: Value) -> Value:
    """NaN -> 0, ±inf -> ±BIG (in place: ``x`` is always a fresh result)."""
    if isinstance(x, np.ndarray):
        return np.nan_to_num(x, copy=False, nan=0.0, posinf=BIG, neginf=-BIG)
    return float(np.nan_to_num(x, nan=0.0, posinf=BIG, neginf=-BIG))


def _flag(x: Value) -> Value:
    return np.asarray(x, dtype=np.float64) if np.ndim(x) else float(x)


def _divide(a: Value, b: Value) -> Value:
    return _finite(np.where(b != 0, np.divide(a, b), 0.0))


def _modulo(a: Value, b: Value) -> Value:
    return np.where(b != 0, np.fmod(a, b), 0.0)


_BINARY: Mapping[str, Callable[[Value, Value], Value]] = MappingProxyType(
    {
        "+": lambda a, b: _finite(np.add(a, b)),
        "-": lambda a, b: _finite(np.subtract(a, b)),
        "*": lambda a, b: _finite(np.multiply(a, b)),
        "/": _divide,
        "%": _modulo,
        "==": lambda a, b: _flag(np.equal(a, b)),
        "!=": lambda a, b: _flag(np.not_equal(a, b)),
        "<": lambda a, b: _flag(np.less(a, b)),
        "<=": lambda a, b: _flag(np.less_equal(a, b)),
        ">": lambda a, b: _flag(np.greater(a, b)),
        ">=": lambda a, b: _flag(np.greater_equal(a, b)),
        "&&": lambda a, b: _flag(np.logical_and(a != 0, b != 0)),
        "||": lambda a, b: _flag(np.logical_or(a != 0, b != 0)),
    }
)
_UNARY: Mapping[str, Callable[[Value], Value]] = MappingProxyType(
    {
        "-": np.negative,
        "!": lambda a: _flag(np.equal(a, 0)),
        "log": lambda x: np.where(x > 0, np.log(x), 0.0),
        "log1p": lambda x: np.where(x > -1, np.log1p(x), 0.0),
        "sqrt": lambda x: np.where(x >= 0, np.sqrt(x), 0.0),
        "exp": lambda x: np.exp(np.minimum(x, EXP_MAX_ARG)),
        "abs": np.abs,
    }
)


def _call(name: str, args: list[Value]) -> Value:
    if name in _UNARY:
        return _UNARY[name](args[0])
    if name == "clamp":
        return np.minimum(np.maximum(args[0], args[1]), args[2])
    combine = np.minimum if name == "min" else np.maximum
    return functools.reduce(combine, args)


def _apply(node: _Node, values: list[Value]) -> Value:
    if node.kind == "unary":
        return _UNARY[node.op](values[0])
    if node.kind == "binary":
        return _BINARY[node.op](values[0], values[1])
    if node.kind == "ternary":
        return np.where(values[0] != 0, values[1], values[2])
    return _call(node.op, values)


def _lower(node: _Node) -> tuple[_Fn, float | None]:
    """Turn a node into a function of the columns; also return its value when constant."""
    if node.kind == "num":
        number = node.number
        return (lambda _columns: number), number
    if node.kind == "factor":
        name = node.op
        return (lambda columns: columns[name]), None
    lowered = [_lower(arg) for arg in node.args]
    if all(constant is not None for _, constant in lowered):
        with np.errstate(all="ignore"):
            folded = float(_apply(node, [constant for _, constant in lowered]))
        return (lambda _columns: folded), folded
    fns = [fn for fn, _ in lowered]
    if len(fns) == 1:
        (only,) = fns
        return (lambda columns: _apply(node, [only(columns)])), None
    if len(fns) == 2:
        first, second = fns
        return (lambda columns: _apply(node, [first(columns), second(columns)])), None
    return (lambda columns: _apply(node, [fn(columns) for fn in fns])), None


def _names(node: _Node) -> frozenset[str]:
    if node.kind == "factor":
        return frozenset((node.op,))
    return frozenset().union(*(_names(arg) for arg in node.args))


# --- public API ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Formula:
    """A compiled formula. ``names`` are the factors it reads (aliases resolved)."""

    text: str
    names: frozenset[str]
    run: _Fn = field(repr=False, compare=False)

    def evaluate(self, columns: Mapping[str, npt.ArrayLike]) -> Vector:
        """One float64 score per job, finite for any input.

        ``columns`` maps each of :attr:`names` to a 1-D array (one entry per
        job) or a scalar; the number of jobs is the length of the first 1-D
        column given (1 if none is). A missing factor is a ``KeyError``.
        """
        rows = next((np.shape(v)[0] for v in columns.values() if np.ndim(v) >= 1), 1)
        with np.errstate(all="ignore"):
            inputs: dict[str, Vector] = {}
            for name in self.names:
                if name not in columns:
                    raise KeyError(f"formula {self.text!r} needs the factor {name!r}")
                inputs[name] = np.nan_to_num(
                    np.asarray(columns[name], dtype=np.float64), nan=0.0, posinf=BIG, neginf=-BIG
                )
            result = self.run(inputs)
        if isinstance(result, np.ndarray) and result.shape == (rows,):
            return result.astype(np.float64, copy=False)
        return np.broadcast_to(np.asarray(result, dtype=np.float64), (rows,)).copy()


def compile_formula(text: str) -> Formula:
    """Parse ``text`` and compile it (cached by text); raise FormulaError if it is not valid."""
    if not isinstance(text, str):
        raise FormulaError(f"a formula must be a string, not {type(text).__name__}")
    return _compile(text)


@functools.lru_cache(maxsize=256)
def _compile(text: str) -> Formula:
    if len(text) > MAX_CHARS:
        raise FormulaError(f"formula is longer than {MAX_CHARS} characters", column=MAX_CHARS + 1)
    tokens = _tokenize(text)
    if tokens[0].kind == "end":
        raise FormulaError("formula is empty", column=1)
    tree = _Parser(tokens).parse()
    run, _ = _lower(tree)
    return Formula(text=text, names=_names(tree), run=run)
