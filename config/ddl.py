"""A Spark DDL column list (`[types.X] schema`) checked without Spark.

pyspark parses DDL only through a JVM or a Spark Connect server (`DataType.fromDDL`), which a
linter (and the configuration's load, which counts a fixed-width type's columns against its
`widths`) must not start. The grammar a landed JSON schema uses is small, so it is parsed here:
`name TYPE [NOT NULL] [COMMENT '...']` separated by commas, where TYPE is a primitive, DECIMAL(p, s),
CHAR(n)/VARCHAR(n), ARRAY<T>, MAP<K, V>, STRUCT<name[:] T, ...> or INTERVAL ... (names are
case-insensitive; `backquoted` names may hold any character). Spark is the judge at run time; this
parser says "not checked" rather than guess at anything outside that grammar.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructField, StructType

_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[A-Za-z0-9_]+|[<>(),:]|\S)")
#: The pyspark type class of each primitive name (`_Parser._type`; pyspark is imported only when parsing).
_PRIMITIVE_CLASSES = {
    "string": "StringType", "boolean": "BooleanType", "tinyint": "ByteType", "byte": "ByteType",
    "smallint": "ShortType", "short": "ShortType", "int": "IntegerType", "integer": "IntegerType",
    "bigint": "LongType", "long": "LongType", "float": "FloatType", "real": "FloatType", "double": "DoubleType",
    "date": "DateType", "timestamp": "TimestampType", "timestamp_ltz": "TimestampType",
    "timestamp_ntz": "TimestampNTZType", "binary": "BinaryType", "void": "NullType", "variant": "VariantType"}
PRIMITIVES = frozenset(_PRIMITIVE_CLASSES)
_DECIMALS = frozenset({"decimal", "dec", "numeric"})
_INTERVAL_UNITS = ("year", "month", "day", "hour", "minute", "second")
EXAMPLE = 'order_id STRING, amount DECIMAL(12,2), items ARRAY<STRUCT<sku: STRING, qty: INT>>'


class DdlError(ValueError):
    """The DDL is not a column list; the message says where and what was expected."""


def ddl_columns(ddl: str) -> list[str]:
    """The top-level column names of a DDL column list. Raises DdlError when it does not parse."""
    return [f.name for f in ddl_schema(ddl).fields]


def ddl_schema(ddl: str) -> StructType:
    """The StructType of a DDL column list, as Spark's `DataType.fromDDL` gives it (pyspark's type
    classes need no JVM). Raises DdlError when it does not parse."""
    from pyspark.sql.types import StructType

    return StructType(_Parser(ddl).columns())


class _Parser:
    def __init__(self, ddl: str) -> None:
        self.tokens: list[tuple[str, int]] = []
        position = 0
        while position < len(ddl) and ddl[position:].strip():
            match = _TOKEN.match(ddl, position)
            assert match is not None  # \S matches any other character
            self.tokens.append((match[1], match.start(1) + 1))
            position = match.end()
        self.index = 0

    def columns(self) -> list[StructField]:
        fields = [self._field(top=True)]
        while self._accept(","):
            fields.append(self._field(top=True))
        if self.index < len(self.tokens):
            self._fail("',' or the end")
        return fields

    def _field(self, *, top: bool) -> StructField:
        from pyspark.sql.types import StructField

        token = self._next("a column name")
        if not (token.startswith("`") or re.fullmatch(r"[A-Za-z0-9_]+", token)):
            self._fail("a column name", back=1)
        self._accept(":")
        data_type = self._type()
        nullable = not self._accept_word("not")
        if not nullable:
            self._expect_word("null")
        if self._accept_word("comment") and not self._next("a quoted comment").startswith(("'", '"')):
            self._fail("a quoted comment", back=1)
        name = token[1:-1].replace("``", "`") if token.startswith("`") else token
        return StructField(name, data_type, nullable)

    def _type(self) -> DataType:
        from pyspark.sql import types as T

        word = self._next("a type").lower()
        if word in PRIMITIVES:
            return getattr(T, _PRIMITIVE_CLASSES[word])()  # type: ignore[no-any-return]
        if word in _DECIMALS:
            precision, scale = 10, 0
            if self._accept("("):
                precision = self._number(1, 38, "a precision 1 to 38")
                if self._accept(","):
                    scale = self._number(0, precision, f"a scale 0 to {precision}")
                self._expect(")")
            return T.DecimalType(precision, scale)
        if word in ("char", "varchar"):
            self._expect("(")
            length = self._number(1, 2**31 - 1, "a length")
            self._expect(")")
            return T.CharType(length) if word == "char" else T.VarcharType(length)
        if word == "array":
            self._expect("<")
            element = self._type()
            self._expect(">")
            return T.ArrayType(element)
        if word == "map":
            self._expect("<")
            key = self._type()
            self._expect(",")
            value = self._type()
            self._expect(">")
            return T.MapType(key, value)
        if word == "struct":
            self._expect("<")
            fields = []
            if not self._accept(">"):
                fields.append(self._field(top=False))
                while self._accept(","):
                    fields.append(self._field(top=False))
                self._expect(">")
            return T.StructType(fields)
        if word == "interval":
            return self._interval()
        self._fail("a Spark type (STRING, INT, BIGINT, DOUBLE, DECIMAL(p,s), BOOLEAN, DATE, TIMESTAMP, "
                   "ARRAY<T>, MAP<K,V>, STRUCT<...>...)", back=1)

    def _interval(self) -> DataType:
        from pyspark.sql.types import DayTimeIntervalType, YearMonthIntervalType

        first = self._next("an interval unit").lower()
        if first not in _INTERVAL_UNITS:
            self._fail("an interval unit (YEAR, MONTH, DAY, HOUR, MINUTE, SECOND)", back=1)
        last = first
        if self._accept_word("to"):
            last = self._next("an interval unit").lower()
            if last not in _INTERVAL_UNITS or _INTERVAL_UNITS.index(last) <= _INTERVAL_UNITS.index(first):
                self._fail(f"a unit smaller than {first.upper()}", back=1)
        start, end = _INTERVAL_UNITS.index(first), _INTERVAL_UNITS.index(last)
        if end <= 1:
            return YearMonthIntervalType(start, end)
        if start <= 1:
            self._fail("units of one kind: YEAR TO MONTH, or DAY to SECOND", back=1)
        return DayTimeIntervalType(start - 2, end - 2)

    def _number(self, low: int, high: int, what: str) -> int:
        token = self._next(what)
        if not token.isdigit() or not low <= int(token) <= high:
            self._fail(what, back=1)
        return int(token)

    def _next(self, what: str) -> str:
        if self.index >= len(self.tokens):
            self._fail(what)
        token = self.tokens[self.index][0]
        self.index += 1
        return token

    def _accept(self, token: str) -> bool:
        if self.index < len(self.tokens) and self.tokens[self.index][0] == token:
            self.index += 1
            return True
        return False

    def _accept_word(self, word: str) -> bool:
        if self.index < len(self.tokens) and self.tokens[self.index][0].lower() == word:
            self.index += 1
            return True
        return False

    def _expect(self, token: str) -> None:
        if not self._accept(token):
            self._fail(repr(token))

    def _expect_word(self, word: str) -> None:
        if not self._accept_word(word):
            self._fail(word.upper())

    def _fail(self, expected: str, back: int = 0) -> NoReturn:
        index = self.index - back
        if index >= len(self.tokens):
            raise DdlError(f"expected {expected} at the end")
        token, column = self.tokens[index]
        raise DdlError(f"expected {expected} at column {column}, found {token!r}")
