"""The fake queue manager's message selection (MQOD SelectionString): the SQL-92 subset IBM MQ
shares with JMS message selectors, over a message's properties.

Enough of it for the bridge's tests: comparisons (=, <>, <, <=, >, >=) of a property with a string
or number literal, `IS [NOT] NULL`, `[NOT] IN (...)`, AND / OR / NOT and brackets. As in MQ, a
comparison with a property the message does not have is unknown, and unknown never selects. A
string MQ would refuse (MQRC_SELECTION_STRING_ERROR 2519 at MQOPEN) raises ValueError.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

#: Tokens: string literal, number, operator or bracket or comma, identifier (word).
_TOKEN = re.compile(r"\s*(?:('(?:[^']|'')*')|(\d+(?:\.\d+)?)|(<>|<=|>=|[=<>(),])|([A-Za-z_][\w.]*))")
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: bool(a == b), "<>": lambda a, b: bool(a != b), "<": lambda a, b: bool(a < b),
    "<=": lambda a, b: bool(a <= b), ">": lambda a, b: bool(a > b), ">=": lambda a, b: bool(a >= b)}

#: A compiled selection: properties -> True, False or None (unknown).
Predicate = Callable[[Mapping[str, Any]], "bool | None"]


def compile_selection(text: str) -> Predicate:
    """The predicate of a selection string; ValueError for one the fake cannot parse."""
    parser = _Parser(_tokens(text))
    predicate = parser.disjunction()
    if parser.peek() is not None:
        raise ValueError(f"unexpected {parser.peek()[1]!r} in selection string {text!r}")  # type: ignore[index]
    return predicate


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos, text = 0, text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"cannot parse selection string {text!r} at {text[pos:]!r}")
        string, number, op, word = match.groups()
        if string is not None:
            out.append(("lit", string[1:-1].replace("''", "'")))
        elif number is not None:
            out.append(("lit", float(number) if "." in number else int(number)))
        elif op is not None:
            out.append(("op", op))
        else:
            out.append(("kw", word.upper()) if word.upper() in _KEYWORDS else ("id", word))
        pos = match.end()
    return out


_KEYWORDS = frozenset({"AND", "OR", "NOT", "IS", "NULL", "IN", "TRUE", "FALSE"})


class _Parser:
    """Recursive descent over the tokens: disjunction > conjunction > negation > comparison."""

    def __init__(self, tokens: list[tuple[str, Any]]) -> None:
        self.tokens, self.pos = tokens, 0

    def peek(self) -> tuple[str, Any] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, kind: str, value: Any = None) -> Any:
        token = self.peek()
        if token is None or token[0] != kind or (value is not None and token[1] != value):
            raise ValueError(f"expected {value or kind}, found {token[1] if token else 'the end'!r}")
        self.pos += 1
        return token[1]

    def accept(self, kind: str, value: Any) -> bool:
        if self.peek() == (kind, value):
            self.pos += 1
            return True
        return False

    def disjunction(self) -> Predicate:
        left = self.conjunction()
        while self.accept("kw", "OR"):
            left = _or(left, self.conjunction())
        return left

    def conjunction(self) -> Predicate:
        left = self.negation()
        while self.accept("kw", "AND"):
            left = _and(left, self.negation())
        return left

    def negation(self) -> Predicate:
        if self.accept("kw", "NOT"):
            inner = self.negation()
            return lambda props: None if (v := inner(props)) is None else not v
        if self.accept("op", "("):
            inner = self.disjunction()
            self.take("op", ")")
            return inner
        return self.comparison()

    def comparison(self) -> Predicate:
        name = self.take("id")
        if self.accept("kw", "IS"):
            negate = self.accept("kw", "NOT")
            self.take("kw", "NULL")
            return lambda props: (name in props) if negate else (name not in props)
        negate = self.accept("kw", "NOT")
        if self.accept("kw", "IN"):
            self.take("op", "(")
            values = [self.take("lit")]
            while self.accept("op", ","):
                values.append(self.take("lit"))
            self.take("op", ")")
            return lambda props: None if name not in props else (props[name] in values) != negate
        op = self.take("op")
        if op not in _COMPARE or negate:
            raise ValueError(f"{op!r} is not a comparison")
        value, compare = self.take("lit"), _COMPARE[op]
        return lambda props: _compare(props, name, value, compare)


def _compare(props: Mapping[str, Any], name: str, value: Any, compare: Callable[[Any, Any], bool]) -> bool | None:
    if name not in props:
        return None
    try:
        return compare(props[name], value)
    except TypeError:  # a string compared with a number: MQ finds no match
        return False


def _and(left: Predicate, right: Predicate) -> Predicate:
    def both(props: Mapping[str, Any]) -> bool | None:
        a, b = left(props), right(props)
        return False if a is False or b is False else (None if a is None or b is None else True)
    return both


def _or(left: Predicate, right: Predicate) -> Predicate:
    def either(props: Mapping[str, Any]) -> bool | None:
        a, b = left(props), right(props)
        return True if a or b else (None if a is None or b is None else False)
    return either
